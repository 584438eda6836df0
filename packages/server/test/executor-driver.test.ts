// The executor -> driver -> Nomad path: a driver (fixtures/executor/driver.mjs) runs each task under
// a nomadkit executor, forwards stats and exec, and is driven here like Nomad drives it.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Code, ConnectError } from "@connectrpc/connect";
import { launchPlugin, type PluginClient } from "@nomadkit/client";
import { CPUUsage_Fields, type TaskHandle } from "@nomadkit/protocol/driver";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { executorBinPath, isProcessAlive } from "../src/executor.js";
import { hostCompute, totalTicks } from "../src/stats.js";
import { grpcDriverClient } from "./fixtures/driver/harness.js";

const fixture = join(dirname(fileURLToPath(import.meta.url)), "fixtures/executor/driver.mjs");

interface Recorded {
  seconds: string;
  nanos: number;
  totalTicks: number;
  percent: number;
  listed: boolean;
}

describe("an executor-based driver", () => {
  let dir: string;
  let ticksFile: string;
  let plugin: PluginClient;
  let handle: TaskHandle | undefined;
  const launch = () => launchPlugin(process.execPath, [fixture], { env: { NK_TICKS_FILE: ticksFile, NOMADKIT_LOG_LEVEL: "warn" } });

  beforeAll(async () => {
    if (!existsSync(executorBinPath())) throw new Error(`build first: ${executorBinPath()} is missing (npx turbo run build)`);
    dir = mkdtempSync(join(tmpdir(), "nk-exec-driver-"));
    ticksFile = join(dir, "ticks.jsonl");
    plugin = await launch();
    handle = (await plugin.driver.startTask({ task: { id: "busy", name: "busy", allocId: "a1" } })).handle;
  });

  afterAll(async () => {
    await plugin?.driver.destroyTask({ taskId: "busy", force: true }).catch(() => undefined);
    await plugin?.kill();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("delivers the executor's total_ticks unchanged to the far client, listed in measured_fields or not", async () => {
    const recorded = () =>
      readFileSync(ticksFile, "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as Recorded);
    const far: { ticks: number; percent: number; listed: boolean; key: string }[] = [];
    const ac = new AbortController();
    for await (const r of plugin.driver.taskStats({ taskId: "busy", collectionInterval: { nanos: 50_000_000 } }, { signal: ac.signal })) {
      const cpu = r.stats!.aggResourceUsage!.cpu!;
      far.push({
        ticks: cpu.totalTicks,
        percent: cpu.percent,
        listed: cpu.measuredFields.includes(CPUUsage_Fields.TOTAL_TICKS),
        key: `${r.stats!.timestamp!.seconds}:${r.stats!.timestamp!.nanos}`,
      });
      const nonZero = far.filter((f) => f.ticks > 0);
      if (nonZero.some((f) => f.listed) && nonZero.some((f) => !f.listed)) break;
    }
    ac.abort();
    const byKey = new Map(recorded().map((r) => [`${r.seconds}:${r.nanos}`, r]));
    // The executor's host: 12345 MHz over this machine's cores (the driver's own would differ).
    const executorHost = { numCores: hostCompute().numCores, totalComputeMhz: 12345 };
    for (const f of far) {
      const sent = byKey.get(f.key);
      expect(sent, `sample ${f.key} was taken by the executor`).toBeDefined();
      expect(f.ticks).toBe(sent!.totalTicks); // bit for bit
      expect(f.listed).toBe(sent!.listed);
      expect(f.ticks).toBeCloseTo(totalTicks(f.percent, executorHost), 9);
    }
    expect(far.some((f) => f.ticks > 0 && f.listed)).toBe(true);
    expect(far.some((f) => f.ticks > 0 && !f.listed)).toBe(true);
  });

  it("total_ticks also reaches an independent grpc-js client", async () => {
    const client = grpcDriverClient(plugin.address);
    try {
      const first = await new Promise<{ stats: { agg_resource_usage: { cpu: { total_ticks: number; percent: number } } } }>((resolve, reject) => {
        const call = (client.TaskStats as (req: unknown) => NodeJS.EventEmitter & { cancel(): void })({
          task_id: "busy",
          collection_interval: { seconds: "0", nanos: 50_000_000 },
        });
        call.once("data", (d) => {
          resolve(d as never);
          call.cancel();
        });
        call.once("error", (e: { code?: number }) => {
          if (e.code !== 1) reject(e);
        });
      });
      const cpu = first.stats.agg_resource_usage.cpu;
      const recorded = readFileSync(ticksFile, "utf8").trim().split("\n").map((l) => JSON.parse(l) as Recorded);
      expect(recorded.some((r) => r.totalTicks === cpu.total_ticks)).toBe(true);
    } finally {
      client.close();
    }
  });

  it("forwards exec streaming to the executor untranslated (raw form)", async () => {
    const requests = (async function* () {
      yield { setup: { taskId: "busy", command: ["/bin/sh", "-c", "echo hello stdout; echo hello stderr >&2; exit 43"], tty: false } };
      yield {}; // heartbeat
      await new Promise(() => {}); // like Nomad: never half-closes
    })();
    let stdout = "";
    let stderr = "";
    let closes = 0;
    let exits = 0;
    let code = -1;
    for await (const r of plugin.driver.execTaskStreaming(requests)) {
      if (r.stdout?.data.length) stdout += Buffer.from(r.stdout.data).toString();
      if (r.stderr?.data.length) stderr += Buffer.from(r.stderr.data).toString();
      if (r.stdout?.close) closes++;
      if (r.stderr?.close) closes++;
      if (r.exited) {
        exits++;
        code = r.result!.exitCode;
      }
    }
    expect({ stdout, stderr, closes, exits, code }).toEqual({ stdout: "hello stdout\n", stderr: "hello stderr\n", closes: 2, exits: 1, code: 43 });
  });

  it("a buffered ExecTask run through the executor's session names ExecTaskRequest's own field", async () => {
    const err = await plugin.driver.execTask({ taskId: "busy", command: ["nk-no-such-command"], timeout: { seconds: 30n } }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: Code.InvalidArgument });
    // The session's lookup says setup.command[0]: ExecTaskRequest has no setup message.
    expect((err as ConnectError).rawMessage).toMatch(/^command\[0\]: /);
  });

  it("keeps the task running when the driver is SIGKILLed; RecoverTask reattaches to the executor", async () => {
    const state = JSON.parse(new TextDecoder().decode(handle!.driverState)) as { executor: { pid: number } };
    const oldPid = plugin.pid;
    plugin.process!.kill("SIGKILL");
    await plugin.exited;
    plugin.close();
    expect(isProcessAlive(oldPid)).toBe(false);
    expect(isProcessAlive(state.executor.pid)).toBe(true);
    plugin = await launch();
    await plugin.driver.recoverTask({ taskId: "busy", handle: handle! });
    // The recovered driver answers stats from the same executor.
    const ac = new AbortController();
    for await (const r of plugin.driver.taskStats({ taskId: "busy", collectionInterval: { nanos: 50_000_000 } }, { signal: ac.signal })) {
      expect(r.stats!.aggResourceUsage!.cpu).toBeDefined();
      break;
    }
    ac.abort();
  });

  it("stops the task through the executor: SIGTERM is exit code 143", async () => {
    const wait = plugin.driver.waitTask({ taskId: "busy" });
    await plugin.driver.stopTask({ taskId: "busy", signal: "SIGTERM", timeout: { seconds: 30n } });
    const res = await wait;
    expect(res.result?.exitCode).toBe(143);
  });
});
