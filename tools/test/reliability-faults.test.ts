// Faults with real processes, unix sockets and HTTP/2 (issue 8, "Faults").
//
// 1. SIGKILL mid-call, 100 trials: each trial launches the fixture driver (launchPlugin, as Nomad
//    does) and puts one call of every RPC kind in flight at once — unary (WaitTask and InspectTask,
//    both blocked in the handler), server streaming (TaskStats, Fingerprint, TaskEvents, each past
//    its first message) and bidi (ExecTaskStreaming past its first output; even trials run the raw
//    form without a process, odd trials a real `cat`). Then the plugin is SIGKILLed. Every call must
//    reject with PluginShutdownError, within the client's grace period (3 s), measured from the
//    kill; nothing may hang (a bounded wait reports the trial), no unhandled rejection, the plugin
//    is reaped (no zombie child of this process) and the exec'd `cat` does not outlive its plugin.
//
// 2. The host goes away without Shutdown. Decision (matching go-plugin): a closed connection or a
//    dead host is NOT a shutdown. go-plugin servers exit only on GRPCController.Shutdown (or a
//    signal); hosts may reattach to a running plugin (ReattachConfig) and Nomad does so after an
//    agent restart, so a plugin that exits when its host disconnects would lose its
//    tasks' state. What the plugin must do instead is notice: every call of that connection is
//    cancelled (handler signals abort, streams end, exec processes are killed), nothing is logged as
//    an error, its resources return to the baseline, it does not spin, it survives writing logs to
//    the dead host's stderr pipe, and it still serves (reattach) and exits 0 on a later Shutdown.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { spawn } from "node:child_process";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encode } from "@msgpack/msgpack";
import {
  DEFAULT_SHUTDOWN_GRACE_MS,
  PluginShutdownError,
  reattachPlugin,
  type PluginClient,
  type ReattachConfig,
  RequestQueue,
} from "@nomadkit/client";
import { HealthCheckResponse_ServingStatus as ServingStatus } from "@nomadkit/protocol/health";
import {
  descendantsOf,
  fixture,
  launchRelDriver,
  ownZombies,
  pool,
  procStat,
  recordUnhandledRejections,
  until,
  withinBaseline,
} from "../reliability/helpers.js";

const TRIALS = Number(process.env.NOMADKIT_FAULT_TRIALS ?? 100);
// Plugin start-up dominates a trial; 4 at once keeps both cores busy without starving the timers.
const CONCURRENCY = 4;
const taskConfig = encode({ command: "none" });

let unhandled: ReturnType<typeof recordUnhandledRejections>;
let tmp: string;
beforeAll(() => {
  unhandled = recordUnhandledRejections();
  tmp = mkdtempSync(join(tmpdir(), "nk-rel-faults-"));
});
afterAll(() => {
  unhandled.uninstall();
  rmSync(tmp, { recursive: true, force: true });
});

/** Settles with the error a call rejected with (or an Error saying it did not reject). */
function outcome(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => new Error("call completed instead of failing"),
    (e: unknown) => e,
  );
}

/** The first message of a stream, then the error that ends it. */
async function streamFailure<T>(iterable: AsyncIterable<T>, first: (m: T) => boolean): Promise<{ started: Promise<void>; failed: Promise<unknown> }> {
  const it = iterable[Symbol.asyncIterator]();
  let started!: () => void;
  const startedP = new Promise<void>((r) => (started = r));
  const failed = (async () => {
    for (;;) {
      try {
        const r = await it.next();
        if (r.done) return new Error("stream ended cleanly");
        if (first(r.value)) started();
      } catch (err) {
        started(); // let the trial proceed; the error is what gets checked
        return err;
      }
    }
  })();
  return { started: startedP, failed };
}

/** `p`, or a descriptive failure after `ms` (a hang detector, not a timing assertion). */
function bounded<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`hang: ${what} did not settle within ${ms} ms`)), ms))),
  ]).finally(() => clearTimeout(timer));
}

interface TrialResult {
  index: number;
  errors: Record<string, unknown>;
  /** ms from SIGKILL to each call's rejection. */
  latency: Record<string, number>;
  execPid: number;
  pluginPid: number;
}

async function trial(index: number): Promise<TrialResult> {
  const raw = index % 2 === 0;
  const { plugin, logs } = await launchRelDriver({ NOMADKIT_LOG_LEVEL: "info", ...(raw ? { REL_EXEC: "raw" } : {}) });
  try {
    for (const id of ["t", "block-t"]) await plugin.driver.startTask({ task: { id, msgpackDriverConfig: taskConfig } });
    const calls: Record<string, Promise<unknown>> = {};
    const inFlight: Record<string, Promise<unknown>> = {};

    calls.waitTask = outcome(plugin.driver.waitTask({ taskId: "t" }));
    inFlight.waitTask = logs.waitFor((e) => e.message === "rel: waitTask in flight");
    calls.inspectTask = outcome(plugin.driver.inspectTask({ taskId: "block-t" }));
    inFlight.inspectTask = logs.waitFor((e) => e.message === "rel: inspectTask in flight");

    const streams = {
      taskStats: await streamFailure(plugin.driver.taskStats({ taskId: "t", collectionInterval: { seconds: 0n, nanos: 20_000_000 } }), (m) => m.stats !== undefined),
      fingerprint: await streamFailure(plugin.driver.fingerprint({}), () => true),
      taskEvents: await streamFailure(plugin.driver.taskEvents({}), () => true),
    };
    for (const [name, s] of Object.entries(streams)) {
      calls[name] = s.failed;
      inFlight[name] = s.started;
    }

    const requests = new RequestQueue<object>();
    requests.push(
      raw ? { setup: { taskId: "t", command: ["echo"] } } : { setup: { taskId: "t", command: ["sh", "-c", "echo $$; exec cat"] } },
    );
    let execPid = 0;
    const exec = await streamFailure(plugin.driver.execTaskStreaming(requests), (m) => {
      if (m.stdout?.data.length) {
        if (!raw) execPid = Number(Buffer.from(m.stdout.data).toString().trim());
        return true;
      }
      return false;
    });
    calls.execTaskStreaming = exec.failed;
    inFlight.execTaskStreaming = exec.started;

    const pending = new Set(Object.keys(inFlight));
    for (const [name, p] of Object.entries(inFlight)) void p.then(() => pending.delete(name));
    await bounded(Promise.all(Object.values(inFlight)), 120_000, `trial ${index}: calls getting in flight`).catch((err: Error) => {
      throw new Error(`${err.message} (still pending: ${[...pending].join(", ")})`);
    });
    const killedAt = performance.now();
    process.kill(plugin.pid, "SIGKILL");
    const latency: Record<string, number> = {};
    const errors: Record<string, unknown> = {};
    await Promise.all(
      Object.entries(calls).map(async ([name, p]) => {
        errors[name] = await bounded(p, 60_000, `trial ${index}: ${name} after SIGKILL`);
        latency[name] = performance.now() - killedAt;
      }),
    );
    requests.end();
    const exit = await bounded(plugin.exited, 60_000, `trial ${index}: exit`);
    expect(exit.signal).toBe("SIGKILL");
    return { index, errors, latency, execPid, pluginPid: plugin.pid };
  } finally {
    if (!plugin.exitSignal.aborted) process.kill(plugin.pid, "SIGKILL");
  }
}

describe(`SIGKILL mid-call, ${TRIALS} trials, every RPC kind in flight`, () => {
  it(
    "every call rejects with PluginShutdownError within the grace period; no hang, unhandled rejection or zombie",
    async () => {
      const started = performance.now();
      const results = await pool(CONCURRENCY, Array.from({ length: TRIALS }, (_, i) => i), trial);
      const wall = performance.now() - started;

      const wrong: string[] = [];
      const worst: Record<string, number> = {};
      for (const r of results) {
        for (const [name, err] of Object.entries(r.errors)) {
          if (!(err instanceof PluginShutdownError)) wrong.push(`trial ${r.index} ${name}: ${String(err)}`);
          worst[name] = Math.max(worst[name] ?? 0, r.latency[name]!);
        }
      }
      console.log(
        `faults: ${TRIALS} trials x ${Object.keys(results[0]!.errors).length} calls in ${(wall / 1000).toFixed(1)} s; ` +
          `worst kill->PluginShutdownError ms: ${JSON.stringify(Object.fromEntries(Object.entries(worst).map(([k, v]) => [k, Math.round(v)])))}`,
      );
      expect(wrong).toEqual([]);
      // "Within the grace period": PluginShutdownError itself is only produced when the exit is seen
      // within the grace; the latency bound says the same thing from the outside.
      for (const [name, ms] of Object.entries(worst)) expect(ms, name).toBeLessThan(DEFAULT_SHUTDOWN_GRACE_MS);
      expect(unhandled.seen.map(String)).toEqual([]);

      // Reaped: no plugin pid is left as a zombie of ours, and neither is anything else.
      for (const r of results) expect(procStat(r.pluginPid)?.state ?? "gone", `plugin ${r.pluginPid}`).not.toBe("Z");
      await until("no zombie children (exited plugins are reaped)", () => ownZombies().length === 0, ownZombies);
      // The exec'd `cat` of a killed plugin sees EOF and exits (it is orphaned, so init reaps it).
      const cats = results.map((r) => r.execPid).filter((p) => p > 0);
      expect(cats.length).toBe(Math.floor(TRIALS / 2));
      await until("orphaned exec processes to exit", () => cats.every((p) => !["R", "S", "D", "T"].includes(procStat(p)?.state ?? "gone")));
    },
    1_200_000,
  );
});

// ---------------------------------------------------------------------------------------------

/** What the fixture says about itself: resources by kind and exec sessions in progress. */
async function probe(plugin: PluginClient): Promise<{ resources: Record<string, number>; execs: number }> {
  const r = await plugin.driver.inspectTask({ taskId: "probe" });
  return { resources: JSON.parse(r.driver!.attributes.resources!) as Record<string, number>, execs: Number(r.driver!.attributes.execs) };
}

/** CPU ticks the process uses over `ms` of wall time. */
async function cpuTicksOver(pid: number, ms: number): Promise<number> {
  const before = procStat(pid)!.cpuTicks;
  await new Promise((r) => setTimeout(r, ms));
  return procStat(pid)!.cpuTicks - before;
}

function logLines(file: string): { level: string; message: string; raw: string }[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => {
      const o = JSON.parse(l) as Record<string, string>;
      return { level: o["@level"]!, message: o["@message"]!, raw: l };
    });
}

/** Opens one call of every long-lived kind on `plugin`; resolves once all are in flight. */
async function openEverything(plugin: PluginClient, logs: { waitFor(m: (e: { message: string }) => boolean): Promise<unknown> } | undefined, taskId: string) {
  await plugin.driver.startTask({ task: { id: taskId, msgpackDriverConfig: taskConfig } });
  const settled: Promise<unknown>[] = [];
  settled.push(outcome(plugin.driver.waitTask({ taskId })));
  if (logs) await logs.waitFor((e) => e.message === "rel: waitTask in flight");
  const streams = [
    await streamFailure(plugin.driver.taskStats({ taskId, collectionInterval: { seconds: 0n, nanos: 20_000_000 } }), () => true),
    await streamFailure(plugin.driver.fingerprint({}), () => true),
    await streamFailure(plugin.driver.taskEvents({}), () => true),
  ];
  const requests = new RequestQueue<object>();
  requests.push({ setup: { taskId, command: ["sh", "-c", "echo $$; exec cat"] } });
  let execPid = 0;
  const exec = await streamFailure(plugin.driver.execTaskStreaming(requests), (m) => {
    if (!m.stdout?.data.length) return false;
    execPid = Number(Buffer.from(m.stdout.data).toString().trim());
    return true;
  });
  streams.push(exec);
  await Promise.all(streams.map((s) => s.started));
  settled.push(...streams.map((s) => s.failed));
  return { execPid, settled, requests };
}

describe("the host goes away without Shutdown", () => {
  it("host closes its connection: the plugin cancels that connection's calls, kills its exec process, returns to baseline, keeps serving", async () => {
    const logFile = join(tmp, "close.log");
    const { plugin, logs } = await launchRelDriver({ REL_LOG_FILE: logFile });
    try {
      await plugin.driver.startTask({ task: { id: "probe", msgpackDriverConfig: taskConfig } });
      const baseline = await probe(plugin);
      const second = await reattachPlugin(plugin.reattachConfig);
      const { execPid, settled, requests } = await openEverything(second, logs, "t-close");
      expect(procStat(execPid)).toBeDefined();
      expect((await probe(plugin)).execs).toBe(1);
      const mark = logLines(logFile).length;

      second.close(); // the HTTP/2 connection goes away; no Shutdown was called
      await bounded(Promise.all(settled), 60_000, "the closed connection's calls");
      requests.end();

      await until("exec process killed and plugin back to its baseline", async () => {
        const p = await probe(plugin);
        return p.execs === 0 && descendantsOf(plugin.pid).length === 0 && withinBaseline(p.resources, baseline.resources);
      });
      const after = logLines(logFile).slice(mark);
      expect(after.filter((l) => l.level === "error").map((l) => l.raw)).toEqual([]);
      // It noticed: the handlers of the closed connection ended as cancelled calls.
      expect(after.filter((l) => l.message === "call cancelled").length).toBeGreaterThanOrEqual(5);
      expect(await cpuTicksOver(plugin.pid, 2000), "CPU ticks while idle (a spinning plugin burns ~200)").toBeLessThan(30);
      expect((await plugin.health.check({ service: "plugin" })).status).toBe(ServingStatus.SERVING);
      expect(plugin.exitSignal.aborted).toBe(false);

      const exit = await plugin.kill();
      expect(exit).toEqual({ code: 0, signal: null });
      expect(existsSync(dirname(plugin.address))).toBe(false);
    } finally {
      if (!plugin.exitSignal.aborted) process.kill(plugin.pid, "SIGKILL");
    }
  }, 300_000);

  it("host process SIGKILLed: the plugin survives logging into the dead pipe, cleans up, stays reattachable and exits 0 on Shutdown", async () => {
    const logFile = join(tmp, "host-killed.log");
    const exitFile = join(tmp, "host-killed.exit");
    const host = spawn(process.execPath, [fixture("host.mjs")], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, REL_LOG_FILE: logFile, REL_EXIT_FILE: exitFile, NOMADKIT_LOG_LEVEL: "debug" },
    });
    let hostStderr = "";
    host.stderr!.on("data", (d: Buffer) => (hostStderr += d.toString()));
    const hostLines = createInterface({ input: host.stdout! });
    const hostExited = new Promise((r) => host.once("exit", r));
    let killedHost = false;
    // The host's next line, or a failure quoting its stderr if it exits first.
    const nextLine = () =>
      new Promise<Record<string, unknown>>((resolve, reject) => {
        hostLines.once("line", (l) => resolve(JSON.parse(l) as Record<string, unknown>));
        void hostExited.then(() => !killedHost && reject(new Error(`the host exited early:\n${hostStderr}`)));
      });
    let config: ReattachConfig | undefined;
    let plugin: PluginClient | undefined;
    try {
      config = (await nextLine()).attach as ReattachConfig;
      plugin = await reattachPlugin(config);
      await plugin.driver.startTask({ task: { id: "probe", msgpackDriverConfig: taskConfig } });
      const baseline = await probe(plugin);
      const inflight = nextLine();
      host.stdin!.write("go\n");
      const { execPid } = (await inflight) as { execPid: number };
      expect(procStat(execPid)).toBeDefined();
      const mark = logLines(logFile).length;

      killedHost = true;
      host.kill("SIGKILL");
      await hostExited;

      await until("exec process killed and plugin back to its baseline after the host died", async () => {
        const p = await probe(plugin!);
        return p.execs === 0 && descendantsOf(config!.pid).length === 0 && withinBaseline(p.resources, baseline.resources);
      });
      // Everything below makes the plugin log (debug and info) into the broken stderr pipe.
      for (let i = 0; i < 20; i++) await plugin.basePlugin.setConfig({ msgpackConfig: encode({ greeting: `again ${i}` }) });
      await plugin.driver.startTask({ task: { id: "after-host", msgpackDriverConfig: taskConfig } });
      await plugin.driver.destroyTask({ taskId: "after-host", force: true });
      const after = logLines(logFile).slice(mark);
      expect(after.filter((l) => l.level === "error").map((l) => l.raw)).toEqual([]);
      expect(after.filter((l) => l.message === "call cancelled").length).toBeGreaterThanOrEqual(5);
      expect(await cpuTicksOver(config.pid, 2000), "CPU ticks while idle (a spinning plugin burns ~200)").toBeLessThan(30);
      expect((await plugin.health.check({ service: "plugin" })).status).toBe(ServingStatus.SERVING);

      await plugin.kill();
      await until("the orphaned plugin to exit", () => !["R", "S", "D", "T"].includes(procStat(config!.pid)?.state ?? "gone"));
      expect(readFileSync(exitFile, "utf8")).toBe("0");
      expect(existsSync(dirname(config.address))).toBe(false);
    } finally {
      host.kill("SIGKILL");
      if (config && procStat(config.pid)) {
        try {
          process.kill(config.pid, "SIGKILL");
        } catch {
          // gone
        }
      }
      plugin?.close();
    }
  }, 300_000);
});
