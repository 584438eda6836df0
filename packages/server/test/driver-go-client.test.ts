// What Nomad's Go side reads from a driver's answers, beyond the field types: StopTask tells the
// driver whether the job chose its kill signal, and InspectTask always carries completed_at and
// result, as Nomad's Go server sends them (its client fails on a missing timestamp and dereferences
// the result).
import type { DriverClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { StopTaskOptions } from "../src/driver/index.js";
import { fakeDriver, serveTestDriver, type ServedTestDriver } from "./runtime-helpers.js";

let served: ServedTestDriver | undefined;
let driver: DriverClient;
const stops: StopTaskOptions[] = [];
const exits = new Map<string, () => void>();

beforeAll(async () => {
  served = await serveTestDriver(
    fakeDriver("go-client", {
      waitTask: (id) => new Promise((resolve) => exits.set(id, () => resolve({ exitCode: 3 }))),
      stopTask: (_id, opts) => void stops.push(opts),
    }),
  );
  driver = served.driver;
});

afterAll(async () => {
  await served?.close();
});

describe("StopTask", () => {
  it("says whether the job set a kill_signal: SIGINT by default, as Nomad's executors", async () => {
    await driver.startTask({ task: { id: "stop-1", name: "stop" } });
    await driver.stopTask({ taskId: "stop-1", signal: "" });
    await driver.stopTask({ taskId: "stop-1", signal: "SIGINT" });
    await driver.stopTask({ taskId: "stop-1", signal: "TERM" });
    expect(stops.map((s) => [s.signal, s.signalDefaulted])).toEqual([
      ["SIGINT", true],
      ["SIGINT", false],
      ["SIGTERM", false],
    ]);
  });
});

describe("InspectTask", () => {
  it("sends Go's zero time and an empty result while the task runs, then the exit", async () => {
    await driver.startTask({ task: { id: "insp-1", name: "insp" } });
    const running = await driver.inspectTask({ taskId: "insp-1" });
    expect(running.task?.completedAt).toMatchObject({ seconds: -62135596800n, nanos: 0 });
    expect(running.task?.result).toMatchObject({ exitCode: 0, signal: 0, oomKilled: false });

    const waited = driver.waitTask({ taskId: "insp-1" });
    while (!exits.has("insp-1")) await new Promise((r) => setImmediate(r));
    exits.get("insp-1")!();
    await waited;
    const exited = await driver.inspectTask({ taskId: "insp-1" });
    expect(exited.task?.completedAt?.seconds).toBeGreaterThan(1_600_000_000n);
    expect(exited.task?.result?.exitCode).toBe(3);
  });
});
