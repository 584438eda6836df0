// ExecutorStatsFeed against a real executor: the task's TaskStats streams share one executor Stats
// stream per interval, each gets every sample (CPU measured between two samples of that stream),
// an interval nobody reads is released, and the streams end when the executor goes away.
import { existsSync } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  ExecutorStatsFeed,
  executorBinPath,
  isProcessAlive,
  launchExecutor,
  reattachExecutor,
  type ExecutorHandle,
  type ExecutorStatsSample,
} from "../src/executor.js";

const PATH = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
const handles: ExecutorHandle[] = [];
const stray: number[] = [];
const aborts: AbortController[] = [];

beforeAll(() => {
  if (!existsSync(executorBinPath())) throw new Error(`build first: ${executorBinPath()} is missing (npx turbo run build)`);
});
afterEach(async () => {
  for (const ac of aborts.splice(0)) ac.abort();
  for (const h of handles.splice(0)) {
    await h.shutdownTask("SIGKILL", 0).catch(() => undefined);
    await h.kill();
  }
  for (const pid of stray.splice(0)) {
    try {
      process.kill(-pid, "SIGKILL"); // the executor makes each task a process group leader
    } catch {
      /* gone */
    }
  }
});

/** An executor running `script` under sh; its task's pid is killed after the test whatever happens. */
async function task(script: string): Promise<ExecutorHandle> {
  const exe = await launchExecutor();
  handles.push(exe);
  const { process: p } = await exe.client.launch({ cmd: "/bin/sh", args: ["-c", script], env: [PATH] });
  stray.push(p!.pid);
  return exe;
}

/** Counts the executor Stats calls the feed opens, and those still running (not yet ended or cancelled). */
function countStatsCalls(exe: ExecutorHandle): { opened: number; live: number } {
  const count = { opened: 0, live: 0 };
  const stats = exe.client.stats.bind(exe.client);
  Object.defineProperty(exe.client, "stats", {
    value: (...args: Parameters<typeof stats>) => {
      count.opened++;
      count.live++;
      const calls = stats(...args);
      return (async function* () {
        try {
          yield* calls;
        } finally {
          count.live--;
        }
      })();
    },
  });
  return count;
}

const reader = () => {
  const ac = new AbortController();
  aborts.push(ac);
  return ac;
};

/** Polls a condition; the generous deadline only turns a hang into a message naming what never happened. */
async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A sample's executor timestamp, in nanoseconds. */
const at = (s: ExecutorStatsSample) => s.timestamp!.seconds * 1_000_000_000n + BigInt(s.timestamp!.nanos);

describe("ExecutorStatsFeed", () => {
  it("gives two readers at one interval every sample of one executor stream, CPU measured", async () => {
    const exe = await task("while :; do :; done");
    const count = countStatsCalls(exe);
    const feed = new ExecutorStatsFeed(exe);
    const collect = async () => {
      const call = { intervalMs: 250, signal: reader().signal };
      const got: ExecutorStatsSample[] = [];
      while (got.length < 4) got.push((await feed.next(call))!);
      return got;
    };
    const [a, b] = await Promise.all([collect(), collect()]);
    // The same samples, none stolen by the other reader (each got half before 7e6fb69's fix).
    expect(a.map(at)).toEqual(b.map(at));
    expect(new Set(a.map(at)).size).toBe(4);
    // After the executor's first sample of the task (0 %, as Nomad's), a busy loop's CPU shows.
    for (const s of a.slice(1)) {
      const cpu = s.aggResourceUsage!.cpu!;
      const shown = `${cpu.percent}% user ${cpu.userMode} system ${cpu.systemMode}`;
      expect(cpu.percent, shown).toBeGreaterThan(0);
      expect(cpu.userMode + cpu.systemMode, shown).toBeGreaterThan(0);
      expect(cpu.totalTicks).toBeGreaterThan(0);
    }
    expect(count.opened).toBe(1);
    feed.close();
    await until(() => count.live === 0, "the executor stream closed");
  });

  it("closes an interval's executor stream when its last reader stops, and opens one per interval in use", async () => {
    const exe = await task("exec sleep 600");
    const count = countStatsCalls(exe);
    const feed = new ExecutorStatsFeed(exe);
    const a = { intervalMs: 100, signal: reader().signal };
    const bAc = reader();
    const b = { intervalMs: 100, signal: bAc.signal };
    const slow = { intervalMs: 5000, signal: reader().signal };
    await Promise.all([feed.next(a), feed.next(b), feed.next(slow)]);
    expect(count).toEqual({ opened: 2, live: 2 });
    // `a` stops (its TaskStats stream ended): `b` still reads the 100 ms stream.
    aborts[0]!.abort();
    const before = at((await feed.next(b))!);
    expect(at((await feed.next(b))!)).toBeGreaterThan(before);
    expect(count).toEqual({ opened: 2, live: 2 });
    // The last reader of 100 ms stops: that executor stream is closed, the 5 s one stays.
    bAc.abort();
    await until(() => count.live === 1, "the 100 ms executor stream closed");
    expect(feed.closed).toBe(false);
    // A later reader at 100 ms gets a stream of its own again.
    const c = { intervalMs: 100, signal: reader().signal };
    expect(await feed.next(c)).toBeDefined();
    expect(count).toEqual({ opened: 3, live: 2 });
    // A call that stops while it waits rejects with its signal's reason, and releases its stream.
    const d = reader();
    const minute = { intervalMs: 60_000, signal: d.signal };
    expect(await feed.next(minute)).toBeDefined();
    const waiting = feed.next(minute); // the next sample is a minute away
    d.abort(new Error("stopped"));
    await expect(waiting).rejects.toThrow("stopped");
    await until(() => count.live === 2, "the 60 s executor stream closed");
    expect(count.opened).toBe(4);
    feed.close();
    await until(() => count.live === 0, "every executor stream closed");
    expect(await feed.next(c)).toBeUndefined();
  });

  it.each([
    ["launched", false],
    // Reattached (after a driver restart), its death is polled for: the failed stream tells first.
    ["reattached", true],
  ])("ends every waiting and later call cleanly when the executor dies (%s)", async (_, reattached) => {
    const launched = await task("exec sleep 600");
    const exe = reattached ? await reattachExecutor(launched.reattach, { pollIntervalMs: 600_000 }) : launched;
    if (reattached) handles.push(exe);
    const count = countStatsCalls(exe);
    const feed = new ExecutorStatsFeed(exe);
    const call = { intervalMs: 60_000, signal: reader().signal };
    const otherCall = { intervalMs: 30_000, signal: reader().signal };
    expect(await feed.next(call)).toBeDefined();
    expect(await feed.next(otherCall)).toBeDefined();
    // The next samples are half a minute away or more: the calls wait, then the executor is SIGKILLed.
    const waiting = feed.next(call);
    const other = feed.next(otherCall);
    process.kill(exe.pid, "SIGKILL");
    await expect(waiting).resolves.toBeUndefined();
    await expect(other).resolves.toBeUndefined();
    expect(feed.closed).toBe(true);
    expect(isProcessAlive(exe.pid)).toBe(false);
    expect(await feed.next(call)).toBeUndefined();
    expect(await feed.next({ intervalMs: 100, signal: reader().signal })).toBeUndefined();
    await until(() => count.live === 0, "no executor stream left");
  });

  it("rejects the calls reading a stream the executor fails with its error, and bad intervals by name", async () => {
    // No task launched: the executor refuses Stats, while it runs on.
    const exe = await launchExecutor();
    handles.push(exe);
    const feed = new ExecutorStatsFeed(exe);
    const one = feed.next({ intervalMs: 100, signal: reader().signal });
    const two = feed.next({ intervalMs: 100, signal: reader().signal });
    for (const p of [one, two]) {
      const err = await p.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.FailedPrecondition);
    }
    expect(feed.closed).toBe(false);
    await expect(feed.next({ intervalMs: 0, signal: reader().signal })).rejects.toThrow(/intervalMs must be a positive number of milliseconds, got 0/);
    await expect(feed.next({ intervalMs: Number.NaN, signal: reader().signal })).rejects.toThrow(/intervalMs/);
    feed.close();
  });
});
