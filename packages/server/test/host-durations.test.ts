// Durations a host sends can be anything a Go time.Duration holds; Node's timers take whole ms up
// to 2^31-1 (~24.8 days) and fire after 1 ms beyond that. Every timer armed from a host's duration
// goes through timerDelayMs: checked here on the wire (TaskStats intervals, ExecTask and StopTask
// timeouts, a far grpc-timeout) and for the executor's stop grace period.
import fc from "fast-check";
import { Code, ConnectError } from "@connectrpc/connect";
import type { DriverClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defineDriver } from "../src/driver/index.js";
import { MAX_TIMER_DELAY_MS, timerDelayMs } from "../src/runtime/timer-delay.js";
import { TaskProcess } from "../src/executor/process.js";
import { serveTestDriver, type ServedTestDriver } from "./runtime-helpers.js";

const DAY_S = 86_400n;
let served: ServedTestDriver | undefined;
let driver: DriverClient;
const seen: { execTimeoutMs?: number; stopTimeoutMs?: number } = {};
let releaseWait: (() => void) | undefined;

beforeAll(async () => {
  served = await serveTestDriver(
    defineDriver({
      name: "durations",
      version: "0.0.1",
      fingerprint: () => ({ health: "healthy" }),
      startTask: () => {},
      waitTask: (_id, ctx) =>
        new Promise((resolve) => {
          releaseWait = () => resolve({ exitCode: 0 });
          ctx.signal.addEventListener("abort", () => resolve({ exitCode: 1 }), { once: true });
        }),
      stopTask: (_id, opts) => void (seen.stopTimeoutMs = opts.timeoutMs),
      destroyTask: () => {},
      execTask: async (_id, _cmd, opts) => {
        seen.execTimeoutMs = opts.timeoutMs;
        return { exitCode: 0, stdout: new Uint8Array(), stderr: new Uint8Array() };
      },
      taskStats: () => ({ timestamp: new Date(), resources: { memory: { rss: 1 } } }),
    }),
  );
  driver = served.driver;
});

afterAll(async () => {
  await served?.close();
});

describe("timerDelayMs", () => {
  it("gives whole ms a Node timer honours, never shorter than asked (up to the cap)", () => {
    expect(timerDelayMs(1000.000001)).toBe(1001);
    expect(timerDelayMs(30 * 86_400_000)).toBe(MAX_TIMER_DELAY_MS);
    expect(timerDelayMs(-5)).toBe(0);
    expect(timerDelayMs(Number.NaN)).toBe(0);
    expect(timerDelayMs(Number.POSITIVE_INFINITY)).toBe(MAX_TIMER_DELAY_MS);
    fc.assert(
      fc.property(fc.double({ noNaN: true }), (ms) => {
        const d = timerDelayMs(ms);
        expect(Number.isInteger(d)).toBe(true);
        expect(d).toBeGreaterThanOrEqual(0);
        expect(d).toBeLessThanOrEqual(MAX_TIMER_DELAY_MS);
        if (ms > 0 && ms <= MAX_TIMER_DELAY_MS) expect(d).toBeGreaterThanOrEqual(ms);
        if (ms > 0 && ms <= MAX_TIMER_DELAY_MS) expect(d - ms).toBeLessThanOrEqual(1);
      }),
    );
  });
});

describe("durations from the host", () => {
  it("a 30-day TaskStats interval sends one sample, not one every millisecond", async () => {
    const ac = new AbortController();
    let samples = 0;
    const timer = setTimeout(() => ac.abort(), 300);
    await (async () => {
      for await (const _ of driver.taskStats({ taskId: "t1", collectionInterval: { seconds: 30n * DAY_S } }, { signal: ac.signal })) samples++;
    })().catch(() => {});
    clearTimeout(timer);
    expect(samples).toBe(1);
  });

  it("ExecTask timeouts with a fraction of a ms or beyond 24.8 days run, with whole-ms timeouts", async () => {
    await driver.execTask({ taskId: "t1", command: ["true"], timeout: { seconds: 1n, nanos: 1 } });
    expect(seen.execTimeoutMs).toBe(1001);
    await driver.execTask({ taskId: "t1", command: ["true"], timeout: { seconds: 100n * DAY_S } });
    expect(seen.execTimeoutMs).toBe(MAX_TIMER_DELAY_MS);
  });

  it("a 30-day StopTask timeout reaches the driver as the longest timer", async () => {
    await driver.stopTask({ taskId: "t1", timeout: { seconds: 30n * DAY_S }, signal: "SIGTERM" });
    expect(seen.stopTimeoutMs).toBe(MAX_TIMER_DELAY_MS);
  });

  it("a grpc-timeout of 30 days does not end the call at once", async () => {
    const call = driver.waitTask({ taskId: "t1" }, { headers: { "grpc-timeout": "2592000S" } }).then(
      () => "answered",
      (e: unknown) => ConnectError.from(e).code,
    );
    const early = await Promise.race([call, new Promise((r) => setTimeout(() => r("still waiting"), 300))]);
    expect(early).toBe("still waiting");
    releaseWait?.();
    expect(await call).toBe("answered");
    // Near deadlines still apply.
    const near = await driver
      .waitTask({ taskId: "t1" }, { headers: { "grpc-timeout": "50m" } })
      .then(() => "answered", (e: unknown) => ConnectError.from(e).code);
    expect(near).toBe(Code.DeadlineExceeded);
  });

  it("the executor waits out a 30-day stop grace period instead of killing the task at once", async () => {
    // The task exits 7 on SIGTERM, after its current sleep (up to 0.5 s); a SIGKILL first says signal 9.
    const task = await TaskProcess.launch({
      cmd: "sh",
      args: ["-c", "trap 'exit 7' TERM; echo ready; while :; do sleep 0.5; done"],
      env: [`PATH=${process.env.PATH}`],
    });
    await new Promise((r) => setTimeout(r, 100)); // the trap is set
    const exit = await task.shutdown("SIGTERM", 30 * 86_400_000);
    expect(exit).toMatchObject({ exitCode: 7, signal: 0 });
  });
});
