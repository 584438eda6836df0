import { execFileSync, spawn } from "node:child_process";
import { existsSync, readFileSync, readlinkSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { PluginShutdownError, restoredTaskHandle } from "@nomadkit/client";
import { PluginType } from "@nomadkit/protocol/base";
import {
  CPUUsage_Fields,
  DriverCapabilities_FSIsolation,
  FingerprintResponse_HealthState,
  NetworkIsolationSpec_NetworkIsolationMode,
  TaskState,
  type CPUUsage,
  type TaskStats,
  type WaitTaskResponse,
} from "@nomadkit/protocol/driver";
import { runExecStream, type ExecOutcome, type ExecRequest } from "./exec.js";
import { START_MARKER, burnTaskConfig, defaultTaskSignals, signalToken, stubbornTaskConfig, type Suite, type SuiteTask } from "./suite.js";
import { CheckFailure, Code, LostOutput, SEMVER, SkipCheck, codeOf, describe, expect, formatMs, isUnimplemented, processGone, show, waitUntil } from "./util.js";
import { anySignal } from "@nomadkit/client/runtime";

/** A named step of the suite. Returns a short message on success; throws to fail or skip. */
export interface Check {
  name: string;
  title: string;
  needs: readonly string[];
  run(s: Suite): Promise<string | void>;
}

const NOMAD_API_VERSION = "v0.1.0";
/** gRPC status names, for messages. */
const CODE_NAMES = ["OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound", "AlreadyExists", "PermissionDenied",
  "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"];
const te = new TextEncoder();

function running(s: Suite) {
  expect(s.run && !s.run.exitSignal.aborted, s.whyGone(s.run));
  return s.run;
}

function needCap(s: Suite, cap: "exec" | "sendSignals"): void {
  if (!s.caps?.[cap]) throw new SkipCheck(`capabilities.${cap === "exec" ? "exec" : "send_signals"} is false`);
}

/**
 * With `user`, the task must run as that user as Nomad's executor runs it: its uid, its primary
 * group and its supplementary groups (`user.GroupIds`), all of them real, effective and saved. Only
 * for the default task (its start line names its pid) of a driver without filesystem isolation
 * (an isolated task's user comes from the image's or chroot's own user database).
 */
async function checkTaskUser(s: Suite, task: SuiteTask, user: string): Promise<string> {
  if (!s.defaultTask) return `user ${user} not verified (custom taskConfig)`;
  if (s.caps?.fsIsolation !== undefined && s.caps.fsIsolation !== DriverCapabilities_FSIsolation.NONE) {
    return `user ${user} not verified (fs_isolation ${DriverCapabilities_FSIsolation[s.caps.fsIsolation]})`;
  }
  const id = (flag: string) => {
    try {
      return execFileSync("id", [flag, "--", user], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim().split(/\s+/).map(Number);
    } catch (err) {
      throw new CheckFailure(`user ${JSON.stringify(user)}: \`id ${flag}\` failed: ${describe(err)}`);
    }
  };
  const [uid] = id("-u");
  const [gid] = id("-g");
  const groups = new Set(id("-G"));
  const pid = await s.taskPid(task);
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch (err) {
    throw new CheckFailure(`the task's process ${pid} (its start line) is gone before its user could be read: ${describe(err)}`);
  }
  const field = (name: string) => (new RegExp(`^${name}:\\s*(.*)$`, "m").exec(status)?.[1] ?? "").trim().split(/\s+/).filter(Boolean).map(Number);
  const uids = field("Uid").slice(0, 3);
  const gids = field("Gid").slice(0, 3);
  expect(uids.every((u) => u === uid), `the task runs as uid ${uids.join("/")} (real/effective/saved), want ${uid} (user ${user})`);
  expect(gids.every((g) => g === gid), `the task runs with gid ${gids.join("/")} (real/effective/saved), want ${gid} (user ${user}'s primary group)`);
  // The kernel's list may leave out the primary group; every other group of the user must be there, and only those.
  const got = new Set([...field("Groups"), gid]);
  const missing = [...groups].filter((g) => !got.has(g));
  const extra = [...got].filter((g) => !groups.has(g));
  expect(missing.length === 0 && extra.length === 0, `the task's groups are ${[...got].sort((a, b) => a - b).join(",")}, want ${[...groups].sort((a, b) => a - b).join(",")} (\`id -G ${user}\`)${missing.length ? `; missing ${missing.join(",")}` : ""}${extra.length ? `; not the user's: ${extra.join(",")}` : ""}`);
  return `runs as ${user} (uid ${uid}, gid ${gid}, groups ${[...groups].sort((a, b) => a - b).join(",")})`;
}

function execCmd(s: Suite, script: string): string[] {
  return [s.opts.execShell, "-c", script];
}

async function exec(s: Suite, task: SuiteTask, requests: ExecRequest[]): Promise<ExecOutcome> {
  const o = await runExecStream(running(s).driver, requests, { timeoutMs: s.opts.callTimeoutMs, signal: s.signal });
  if (o.error instanceof PluginShutdownError) throw o.error;
  if (o.error) throw new Error(`ExecTaskStreaming on ${task.id} failed: ${describe(o.error)}`);
  expect(o.violations.length === 0, `protocol violation: ${o.violations.join("; ")}`);
  expect(o.exitedCount === 1, "the stream ended without an exited message");
  return o;
}

function setup(task: SuiteTask, command: string[], tty = false): ExecRequest {
  return { setup: { taskId: task.id, command, tty } };
}

function stdin(data: string): ExecRequest {
  return { stdin: { data: te.encode(data) } };
}

/** How long after StopTask's 1 s timeout a task that ignores the stop signal may still run (a busy host). */
const STOP_TIMEOUT_SLACK_MS = 10_000;

/** TaskStats' collection_interval. */
const STATS_INTERVAL_MS = 200;

/**
 * How long the task-stats check reads samples of a task that burns CPU before it concludes that a
 * measure the driver claims never shows the use. Generous: it ends as soon as every claimed measure
 * has shown use (a sample or two), and Nomad's own executors compute each rate between two readings.
 */
const CPU_USE_WAIT_MS = 15_000;

/**
 * The CPU measures that show use, as Nomad's executors report them (pid collector and cgroups
 * alike): percent, user_mode and system_mode are rates between two readings (the first reading of
 * a process is 0), total_ticks is percent in MHz. A task that keeps a core busy makes each of them
 * positive in some sample. The throttling counters are not use and are left out.
 */
const CPU_USE_FIELDS: readonly { field: CPUUsage_Fields; name: string; value(c: CPUUsage): number }[] = [
  { field: CPUUsage_Fields.PERCENT, name: "percent", value: (c) => c.percent },
  { field: CPUUsage_Fields.USER_MODE, name: "user_mode", value: (c) => c.userMode },
  { field: CPUUsage_Fields.SYSTEM_MODE, name: "system_mode", value: (c) => c.systemMode },
  { field: CPUUsage_Fields.TOTAL_TICKS, name: "total_ticks", value: (c) => c.totalTicks },
];

/** StopTask's signal: the task's kill_signal, which Nomad sends as is, "" when the job sets none. */
const STOP_SIGNAL = "";

/** Seconds of Go's zero time (0001-01-01), which a Go driver's unset time.Time travels as. */
const GO_ZERO_TIME_SECONDS = -62135596800n;

/** Whether a timestamp of InspectTask is set: present, and not Go's zero time ("not set" in a Go driver). */
function timeSet(t: Timestamp | undefined): t is Timestamp {
  return t !== undefined && t.seconds > GO_ZERO_TIME_SECONDS;
}

function describeExit(r: WaitTaskResponse | undefined): string {
  if (!r?.result) return "no result";
  const parts = [`exit_code ${r.result.exitCode}`];
  if (r.result.signal) parts.push(`signal ${r.result.signal}`);
  if (r.result.oomKilled) parts.push("oom_killed");
  if (r.err) parts.push(`err ${JSON.stringify(r.err)}`);
  return parts.join(", ");
}

/** Whether a WaitTask result says the task ended well: exit code 0, no signal. */
function succeeded(r: WaitTaskResponse): boolean {
  return (r.result?.exitCode ?? 0) === 0 && (r.result?.signal ?? 0) === 0;
}

async function settled(s: Suite, task: SuiteTask): Promise<WaitTaskResponse> {
  expect(task.waiting, `no WaitTask call is pending for ${task.id}`);
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  // The check's signal ends the wait too: an abandoned check must not resume when WaitTask answers later.
  const r = await Promise.race([
    task.waiting,
    new Promise<Error>((res) => {
      timer = setTimeout(() => res(new Error(`WaitTask did not return within ${s.opts.callTimeoutMs} ms after the task ended`)), s.opts.callTimeoutMs);
      onAbort = () => res(new CheckFailure("aborted while waiting for WaitTask"));
      if (s.signal.aborted) onAbort();
      else s.signal.addEventListener("abort", onAbort, { once: true });
    }),
  ]);
  clearTimeout(timer);
  s.signal.removeEventListener("abort", onAbort!);
  if (r instanceof Error) throw r;
  return r;
}

function statsProblems(st: TaskStats | undefined): string[] {
  const p: string[] = [];
  if (!st) return ["the response has no stats"];
  if (!st.timestamp) p.push("stats.timestamp is missing (Nomad drops such samples)");
  if (!st.aggResourceUsage) p.push("stats.agg_resource_usage is missing (Nomad dereferences it)");
  else {
    const { cpu, memory } = st.aggResourceUsage;
    if (!cpu) p.push("agg_resource_usage.cpu is missing");
    if (!memory) p.push("agg_resource_usage.memory is missing");
    if (cpu) {
      if (!Number.isFinite(cpu.totalTicks) || cpu.totalTicks < 0) p.push(`cpu.total_ticks is ${cpu.totalTicks}`);
      if (cpu.percent > 0 && !(cpu.totalTicks > 0)) p.push(`cpu.percent is ${cpu.percent} but total_ticks is ${cpu.totalTicks}`);
    }
  }
  return p;
}

/**
 * How the pending WaitTask call of a task that runs until stopped has already ended ("returned
 * (exit_code 0)", "failed (...)"), or undefined while it still waits. A negative check only: the
 * grace lets an early answer arrive (in a short selection of checks WaitTask may have been sent just
 * now); a correct driver's never arrives, however long the host takes.
 */
async function earlyWait(task: SuiteTask): Promise<string | undefined> {
  expect(task.waiting, `no WaitTask call is pending for ${task.id}`);
  let grace: NodeJS.Timeout | undefined;
  const early = await Promise.race([task.waiting, new Promise<undefined>((res) => (grace = setTimeout(() => res(undefined), 250)))]);
  clearTimeout(grace);
  if (early === undefined) return undefined;
  return early instanceof Error ? `failed (${describe(early)})` : `returned (${describeExit(early)})`;
}

function stillRuns(pid: number | undefined): string {
  return pid !== undefined && !processGone(pid) ? `, while the task's process ${pid} still runs` : "";
}

/**
 * SignalTask(`signal`) on the default task, then waits for the task's next signal line: it must
 * name `signal`. The task prints one line per trapped signal it gets, so the first new line is the
 * answer to this call; a driver that sends another signal (a fixed one, or the wrong number for the
 * name) is reported at once rather than after a timeout.
 */
async function deliverSignal(s: Suite, task: SuiteTask, signal: string): Promise<void> {
  const before = s.signalsReceived(task).length;
  await running(s).driver.signalTask({ taskId: task.id, signal }, s.co());
  await s.waitForOutput(task, () => s.signalsReceived(task).length > before, `the task to report ${signal} (it prints a line for each signal it traps)`);
  const got = s.signalsReceived(task)[before]!;
  expect(got === signalToken(signal), `SignalTask asked for ${signal}, the task received SIG${got}: the driver must send the signal Nomad names`);
}

/**
 * The task-stats check's CPU use: a task that keeps a core busy (user and kernel mode) runs while
 * its TaskStats stream is read, until each CPU measure the driver lists in `measured_fields` has
 * been positive in some sample, or {@link CPU_USE_WAIT_MS} passed. A measure the driver does not
 * claim is not required (Nomad shows and publishes only the listed ones). The task is destroyed
 * when the check is done with it, whatever happened.
 */
async function cpuUse(s: Suite): Promise<string> {
  const p = running(s);
  const task = s.newTask("burn", { taskConfig: burnTaskConfig(s.opts.execShell) });
  await s.startTask(p, task);
  try {
    // Burning from here on.
    const pid = await s.taskPid(task);
    const claimed = new Set<CPUUsage_Fields>();
    const max = new Map<CPUUsage_Fields, number>();
    const unshown = () => CPU_USE_FIELDS.filter((f) => claimed.has(f.field) && !((max.get(f.field) ?? 0) > 0));
    const ac = new AbortController();
    const deadline = AbortSignal.timeout(CPU_USE_WAIT_MS);
    const t0 = performance.now();
    let n = 0;
    let ended = false;
    let seen = false;
    try {
      const req = { taskId: task.id, collectionInterval: { nanos: STATS_INTERVAL_MS * 1e6 } };
      for await (const r of p.driver.taskStats(req, { signal: anySignal([ac.signal, s.signal, deadline]) })) {
        for (const k of Object.keys(r.stats?.resourceUsageByPid ?? {})) if (/^\d+$/.test(k)) s.learnPid(Number(k));
        const problems = statsProblems(r.stats);
        expect(problems.length === 0, `sample ${n + 1} of the CPU-burning task: ${problems.join("; ")}`);
        n++;
        const cpu = r.stats!.aggResourceUsage!.cpu!;
        for (const f of cpu.measuredFields) claimed.add(f);
        for (const f of CPU_USE_FIELDS) max.set(f.field, Math.max(max.get(f.field) ?? 0, f.value(cpu)));
        // Two samples at least: the first one of a stream may rightly show no use yet.
        if (n >= 2 && unshown().length === 0) {
          seen = true;
          break;
        }
      }
      // An iterator that ends quietly when the deadline aborts it has not ended by itself.
      ended = !seen && !deadline.aborted;
    } catch (err) {
      if (!deadline.aborted || s.signal.aborted) throw err;
    } finally {
      ac.abort();
    }
    expect(!ended, `the TaskStats stream of the CPU-burning task ended after ${n} sample(s); it must run until cancelled`);
    // A stream that stalls is no stream of samples: with none, no measure is even claimed.
    expect(n >= 2, `the TaskStats stream of the CPU-burning task sent ${n} sample${n === 1 ? "" : "s"} in ${formatMs(performance.now() - t0)}, want one every ${STATS_INTERVAL_MS} ms`);
    const missing = unshown();
    expect(
      missing.length === 0,
      `a task burning CPU (pid ${pid}, a busy shell loop) ran for ${formatMs(performance.now() - t0)} and TaskStats never showed it: ` +
        `${missing.map((f) => f.name).join(", ")} stayed 0 in ${n} samples, though measured_fields lists ${missing.length === 1 ? "it" : "them"} (Nomad shows and publishes the listed measures)`,
    );
    const shown = CPU_USE_FIELDS.filter((f) => claimed.has(f.field));
    if (shown.length === 0) return "CPU use not verified: measured_fields lists no CPU use measure (percent, user_mode, system_mode, total_ticks)";
    return `a CPU-burning task showed ${shown.map((f) => `${f.name} ${max.get(f.field)!.toFixed(1)}`).join(", ")}`;
  } finally {
    // With the check's signal: once it fired (a timeout), the runner destroys what the check left.
    await p.driver.destroyTask({ taskId: task.id, force: true }, s.co()).then(
      () => void (task.destroyed = true),
      () => undefined,
    );
  }
}

/**
 * With requireTaskEvents and no event yet: waits up to the call deadline for one, on a task of the
 * check's own when the run started none (a selection of checks without start-task), destroyed
 * afterwards. Events come on their own stream, after the call that caused them.
 */
async function awaitTaskEvent(s: Suite): Promise<void> {
  const p = running(s);
  let own: SuiteTask | undefined;
  if (!s.tasks.some((t) => t.handle)) {
    // What start-task would have learned first: the task config is encoded with the plugin's schema.
    s.caps ??= (await p.driver.capabilities({}, s.co())).capabilities;
    s.taskSpec ??= (await p.driver.taskConfigSchema({}, s.co())).spec;
    own = s.newTask("events");
    await s.startTask(p, own);
  }
  const ran = s.tasks.filter((t) => t.handle).length;
  try {
    await waitUntil(() => s.events.count > 0, "a TaskEvent", s.opts.callTimeoutMs, s.signal);
  } catch (err) {
    if (s.signal.aborted) throw err;
    throw new CheckFailure(
      `no TaskEvent within ${s.opts.callTimeoutMs} ms for the ${ran} task(s) the driver ran, and requireTaskEvents (--require-task-events) wants at least one (Nomad shows them in the task's events)`,
    );
  } finally {
    if (own) {
      const t = own;
      await p.driver.destroyTask({ taskId: t.id, force: true }, s.co()).then(
        () => void (t.destroyed = true),
        () => undefined,
      );
    }
  }
}

/**
 * After a failed RecoverTask, does what Nomad's task runner does: DestroyTask(force) through the new
 * plugin, then start the task again; the new task becomes `s.main`.
 *
 * Why: signal-task, stop-task, wait-task, inspect-exited and destroy-task need a running task on
 * the live plugin, not a recovered one. The SIGKILLed plugin cannot be kept, and its successor does
 * not know a task it could not recover, so without this they would all fail with NotFound (or be
 * skipped) for the recover check's finding — a driver that legitimately cannot recover (Unimplemented,
 * which Nomad answers by restarting the task) would look broken everywhere. With it, recover alone
 * fails and the checks that follow test what they name. When RecoverTask succeeds but something after
 * it fails (state, started_at, output, exec), the task stays: the later checks then run on the
 * recovered task, which is what Nomad would do with it. The old task's processes are ended first
 * (the new plugin cannot, and they would run beside the new task), as far as the suite knows them.
 */
async function restartTask(s: Suite, old: SuiteTask): Promise<string> {
  const p = running(s);
  await p.driver.destroyTask({ taskId: old.id, force: true }, s.co()).then(
    () => void (old.destroyed = true),
    () => undefined,
  );
  s.killOrphans();
  const task = s.newTask(old.name);
  try {
    await s.startTask(p, task);
  } catch (err) {
    if (err instanceof PluginShutdownError) throw err;
    return `starting the task again on the new plugin failed too: ${describe(err)}`;
  }
  s.main = task;
  return "as Nomad does, the task was destroyed and started again on the new plugin for the checks that follow";
}

/**
 * InspectTask of a task the driver was told to forget: it must fail (with any status: Nomad's Go
 * server answers drivers.ErrTaskNotFound with a plain error), and do so as a refusal, not by dying
 * (a Go driver's nil task handle panics, which ends the plugin) or by never answering. Returns the
 * refusal for the report.
 */
async function inspectForgotten(s: Suite, task: SuiteTask): Promise<string> {
  const p = running(s);
  let err: unknown;
  try {
    await p.driver.inspectTask({ taskId: task.id }, s.co());
  } catch (e) {
    err = e;
  }
  expect(err !== undefined, "InspectTask still knows the destroyed task");
  if (err instanceof PluginShutdownError || p.exitSignal.aborted) {
    // Let the exit be recorded before describing it.
    await p.exited;
    throw new CheckFailure(`InspectTask of the destroyed task: ${s.whyGone(p)}`);
  }
  if (s.signal.aborted) throw err;
  if (codeOf(err) === Code.DeadlineExceeded)
    throw new CheckFailure(`InspectTask of the destroyed task did not answer: ${describe(err)} (it must refuse a task it does not know)`);
  return describe(err);
}

/**
 * What the report says about the task's cgroup: its path and, with the default task (whose pid is
 * known), whether the task runs in it, as it would under Nomad's executor (informational: a driver
 * may place its tasks otherwise); or why there is none.
 */
async function cgroupNote(s: Suite, task: SuiteTask): Promise<string> {
  if (!task.cgroup) return `no task cgroup (${s.noCgroup ?? "none made"})`;
  let where = "";
  // The later checks judge a task that does not print its start line; this note only reports.
  const pid = s.defaultTask ? await s.taskPid(task).catch(() => undefined) : undefined;
  if (pid !== undefined) where = task.cgroup.pids().includes(pid) ? ", the task runs in it" : `, the task (pid ${pid}) runs outside it`;
  return `cpuset_cgroup ${task.cgroup.path}${where}`;
}

/** The checks, in run order. */
export const CHECKS: readonly Check[] = [
  {
    name: "handshake",
    title: "go-plugin handshake and gRPC connection",
    needs: [],
    async run(s) {
      s.load = await s.launch();
      const h = s.load.handshake;
      expect(h.coreVersion === 1, `core protocol version ${h.coreVersion}, want 1`);
      expect(h.protocolVersion === 2, `app protocol version ${h.protocolVersion}, want 2`);
      return `${h.network} ${h.address} ${h.protocol}, core 1, app ${h.protocolVersion}${h.serverCert ? ", TLS" : ""}`;
    },
  },
  {
    name: "no-cookie",
    title: "refuses to run without the magic cookie (message on stderr, exit 1)",
    // A plugin that cannot start at all also exits 1 with something on stderr: not a pass.
    needs: ["handshake"],
    async run(s) {
      const env: NodeJS.ProcessEnv = { ...process.env, ...s.opts.env };
      delete env.NOMAD_PLUGIN_MAGIC_COOKIE;
      const child = spawn(s.opts.plugin, [...s.opts.args], { env, stdio: ["ignore", "pipe", "pipe"] });
      let stderr = "";
      let stdout = "";
      child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
      child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
      let timer: NodeJS.Timeout | undefined;
      // An abandoned check (interruption, timeout) does not leave the process running.
      const onAbort = () => child.kill("SIGKILL");
      s.signal.addEventListener("abort", onAbort, { once: true });
      const code = await new Promise<number | string>((resolve) => {
        child.once("error", (e) => resolve(`cannot start: ${e.message}`));
        child.once("close", (c, sig) => resolve(c ?? `signal ${sig}`));
        timer = setTimeout(() => {
          child.kill("SIGKILL");
          resolve("still running (it must exit)");
        }, s.opts.callTimeoutMs);
      });
      clearTimeout(timer);
      s.signal.removeEventListener("abort", onAbort);
      expect(code === 1, `exit status ${code}, want 1`);
      expect(stderr.trim() !== "", "nothing was written to stderr");
      expect(!/^\d+\|\d+\|/.test(stdout), "it printed a go-plugin handshake anyway");
      return show(stderr.trim().split("\n")[0] ?? "", 80);
    },
  },
  {
    name: "health",
    title: "grpc.health.v1 Check(\"plugin\") is SERVING",
    needs: ["handshake"],
    async run(s) {
      const r = await s.load!.health.check({ service: "plugin" }, s.co());
      expect(r.status === 1, `status ${r.status}, want SERVING (1)`);
      return "SERVING";
    },
  },
  {
    name: "plugin-info",
    title: "PluginInfo: type DRIVER, API version v0.1.0, semver plugin version, name",
    needs: ["handshake"],
    async run(s) {
      const info = await s.load!.basePlugin.pluginInfo({}, s.co());
      s.info = info;
      expect(info.type === PluginType.DRIVER, `type ${PluginType[info.type] ?? info.type}, want DRIVER`);
      expect(info.pluginApiVersions.includes(NOMAD_API_VERSION), `plugin_api_versions ${JSON.stringify(info.pluginApiVersions)} lacks ${NOMAD_API_VERSION}`);
      expect(SEMVER.test(info.pluginVersion), `plugin_version ${JSON.stringify(info.pluginVersion)} is not a semantic version`);
      expect(info.name !== "", "name is empty (it is the job's driver = \"...\")");
      if (s.opts.name) expect(info.name === s.opts.name, `name ${JSON.stringify(info.name)}, want ${JSON.stringify(s.opts.name)}`);
      return `${info.name} ${info.pluginVersion} (api ${info.pluginApiVersions.join(",")})`;
    },
  },
  {
    name: "config-schema",
    title: "ConfigSchema returns the plugin config spec",
    needs: ["handshake"],
    async run(s) {
      const r = await s.load!.basePlugin.configSchema({}, s.co());
      s.configSpec = r.spec;
      const rec = await s.kill(s.load!, "load");
      const kind = r.spec?.block.case ?? "none";
      const attrs = r.spec?.block.case === "object" ? Object.keys(r.spec.block.value.attributes) : [];
      return `spec ${kind}${attrs.length ? ` {${attrs.join(", ")}}` : ""}; load process stopped in ${formatMs(rec.ms)}`;
    },
  },
  {
    name: "set-config",
    title: "SetConfig twice with the same config in a fresh process (Nomad's validation)",
    needs: ["config-schema"],
    async run(s) {
      const p = await s.launch();
      const req = { msgpackConfig: s.pluginConfigBytes(), pluginApiVersion: NOMAD_API_VERSION };
      await p.basePlugin.setConfig(req, s.co());
      await p.basePlugin.setConfig(req, s.co());
      const rec = await s.kill(p, "validate");
      return `accepted ${JSON.stringify(s.opts.pluginConfig)}; validate process stopped in ${formatMs(rec.ms)}`;
    },
  },
  {
    name: "init",
    title: "run process: SetConfig then Init (Unimplemented accepted)",
    needs: ["set-config"],
    async run(s) {
      s.run = await s.launch();
      await s.setConfig(s.run);
      const r = await s.init(s.run);
      s.openStreams(s.run);
      return `Init ${r}`;
    },
  },
  {
    name: "capabilities",
    title: "Capabilities answers (send_signals, exec, network isolation modes)",
    needs: ["init"],
    async run(s) {
      const r = await running(s).driver.capabilities({}, s.co());
      expect(r.capabilities, "the response has no capabilities");
      s.caps = r.capabilities;
      const c = r.capabilities;
      const modes = c.networkIsolationModes.map((m) => NetworkIsolationSpec_NetworkIsolationMode[m] ?? String(m));
      return [
        `send_signals=${c.sendSignals}`,
        `exec=${c.exec}`,
        `network=[${modes.join(",")}]`,
        `must_create_network=${c.mustCreateNetwork}`,
      ].join(" ");
    },
  },
  {
    name: "fingerprint",
    title: "first Fingerprint arrives promptly and reports HEALTHY",
    needs: ["init"],
    async run(s) {
      let timer: NodeJS.Timeout | undefined;
      const r = await Promise.race([
        s.firstFingerprint!,
        new Promise<Error>((res) => (timer = setTimeout(() => res(new Error(`no Fingerprint response within ${s.opts.fingerprintTimeoutMs} ms`)), s.opts.fingerprintTimeoutMs))),
      ]);
      clearTimeout(timer);
      if (r instanceof Error) throw r;
      const health = FingerprintResponse_HealthState[r.health] ?? String(r.health);
      expect(r.health === FingerprintResponse_HealthState.HEALTHY, `health ${health}: ${r.description || "(no description)"}`);
      return `${health} "${r.description}", ${r.attributes} attributes`;
    },
  },
  {
    name: "task-config-schema",
    title: "TaskConfigSchema returns the task config spec",
    needs: ["init"],
    async run(s) {
      const r = await running(s).driver.taskConfigSchema({}, s.co());
      s.taskSpec = r.spec;
      const attrs = r.spec?.block.case === "object" ? Object.keys(r.spec.block.value.attributes) : [];
      return `spec ${r.spec?.block.case ?? "none"}${attrs.length ? ` {${attrs.join(", ")}}` : ""}`;
    },
  },
  {
    name: "start-task",
    title: "StartTask returns a handle for the task",
    needs: ["capabilities", "task-config-schema"],
    async run(s) {
      const task = s.newTask("main");
      s.main = task;
      const h = await s.startTask(running(s), task);
      expect(h.config?.id === task.id, `handle.config.id ${JSON.stringify(h.config?.id)}, want ${JSON.stringify(task.id)}`);
      expect(h.state !== TaskState.EXITED, "the handle says the task has already exited");
      const handle = `handle v${h.version}, state ${TaskState[h.state]}, driver_state ${h.driverState.length} bytes; ${await cgroupNote(s, task)}`;
      return s.opts.user ? `${handle}; ${await checkTaskUser(s, task, s.opts.user)}` : handle;
    },
  },
  {
    name: "inspect-task",
    title: "InspectTask reports the task RUNNING",
    needs: ["start-task"],
    async run(s) {
      const r = await running(s).driver.inspectTask({ taskId: s.main!.id }, s.co());
      s.learnFromInspect(r);
      expect(r.task, "the response has no task status");
      expect(r.task.id === s.main!.id, `task.id ${JSON.stringify(r.task.id)}, want ${JSON.stringify(s.main!.id)}`);
      expect(r.task.state === TaskState.RUNNING, `state ${TaskState[r.task.state]}, want RUNNING`);
      expect(timeSet(r.task.startedAt), "started_at is not set");
      s.main!.startedAt = timestampDate(r.task.startedAt);
      return `RUNNING since ${s.main!.startedAt.toISOString()}`;
    },
  },
  {
    name: "task-stats",
    title: "TaskStats: timestamp, aggregate cpu + memory, total_ticks, one sample per interval; a CPU-burning task shows use in each CPU measure listed in measured_fields",
    needs: ["start-task"],
    async run(s) {
      const ac = new AbortController();
      const deadline = AbortSignal.timeout(s.opts.callTimeoutMs);
      const signal = anySignal([ac.signal, s.signal, deadline]);
      const samples: TaskStats[] = [];
      try {
        for await (const r of running(s).driver.taskStats({ taskId: s.main!.id, collectionInterval: { nanos: STATS_INTERVAL_MS * 1e6 } }, { signal })) {
          for (const pid of Object.keys(r.stats?.resourceUsageByPid ?? {})) if (/^\d+$/.test(pid)) s.learnPid(Number(pid));
          const problems = statsProblems(r.stats);
          expect(problems.length === 0, `sample ${samples.length + 1}: ${problems.join("; ")}`);
          samples.push(r.stats!);
          if (samples.length === 2) break;
        }
      } catch (err) {
        // The deadline is the suite's own: the client reports it as the caller's cancellation.
        if (!deadline.aborted || s.signal.aborted || err instanceof CheckFailure) throw err;
        throw new CheckFailure(`the TaskStats stream sent ${samples.length} sample${samples.length === 1 ? "" : "s"} within the call deadline of ${s.opts.callTimeoutMs} ms, want 2, one every ${STATS_INTERVAL_MS} ms`);
      } finally {
        ac.abort();
      }
      expect(samples.length === 2, `the stream ended after ${samples.length} sample(s); it must run until cancelled`);
      const [a, b] = samples as [TaskStats, TaskStats];
      const ta = timestampDate(a.timestamp!).getTime();
      const tb = timestampDate(b.timestamp!).getTime();
      expect(tb >= ta, "the second sample's timestamp is older than the first");
      // Nomad asks for one sample per collection_interval (its executor collects on a timer). Only a
      // lower bound, on the driver's own collection times: a busy host may delay a sample, never hasten it.
      const min = STATS_INTERVAL_MS / 2;
      expect(tb - ta >= min, `samples ${tb - ta} ms apart, want at least ${min} ms (half the collection_interval of ${STATS_INTERVAL_MS} ms)`);
      const cpu = b.aggResourceUsage!.cpu!;
      const mem = b.aggResourceUsage!.memory!;
      const idle = `idle task: cpu ${cpu.percent.toFixed(1)}% total_ticks ${cpu.totalTicks.toFixed(1)}, rss ${mem.rss} B`;
      // Only the default task's shell can be made to burn CPU (a custom taskConfig's command is unknown).
      if (!s.defaultTask) return `${idle}; CPU use not verified (custom taskConfig)`;
      return `${idle}; ${await cpuUse(s)}`;
    },
  },
  {
    name: "exec",
    title: "ExecTask (buffered): output and exit code 43",
    needs: ["start-task"],
    async run(s) {
      needCap(s, "exec");
      const r = await running(s).driver.execTask(
        { taskId: s.main!.id, command: execCmd(s, "echo hello stdout; echo hello stderr >&2; exit 43"), timeout: { seconds: BigInt(Math.ceil(s.opts.callTimeoutMs / 1000)) } },
        s.co(),
      );
      const all = Buffer.concat([r.stdout, r.stderr]).toString();
      expect(r.result?.exitCode === 43, `exit code ${r.result?.exitCode}, want 43`);
      expect(all.includes("hello stdout\n") && all.includes("hello stderr\n"), `output ${show(all)} lacks the two lines`);
      return `exit 43, stdout ${show(r.stdout)}, stderr ${show(r.stderr)}`;
    },
  },
  {
    name: "exec-streaming",
    title: "ExecTaskStreaming without tty: echo stdout/stderr, exit 43",
    needs: ["start-task"],
    async run(s) {
      needCap(s, "exec");
      const o = await exec(s, s.main!, [setup(s.main!, execCmd(s, "echo hello stdout; echo hello stderr >&2; exit 43"))]);
      expect(o.stdout.toString() === "hello stdout\n", `stdout ${show(o.stdout)}, want "hello stdout\\n"`);
      expect(o.stderr.toString() === "hello stderr\n", `stderr ${show(o.stderr)}, want "hello stderr\\n"`);
      expect(o.exitCode === 43, `exit code ${o.exitCode}, want 43`);
      expect(o.stdoutCloses === 1 && o.stderrCloses === 1, `close markers: stdout ${o.stdoutCloses}, stderr ${o.stderrCloses}, want one each`);
      return "stdout/stderr as expected, one close each, one exited (43)";
    },
  },
  {
    name: "exec-streaming-tty",
    title: "ExecTaskStreaming with tty: resize 50x40 then 100x100, `stty size` = 100 100",
    needs: ["start-task"],
    async run(s) {
      needCap(s, "exec");
      // The command waits for a line on stdin, sent after the resizes, so the size is settled first.
      const o = await exec(s, s.main!, [
        setup(s.main!, execCmd(s, "read line; stty size"), true),
        { ttySize: { height: 50, width: 40 } },
        { ttySize: { height: 100, width: 100 } },
        stdin("go\n"),
      ]);
      const out = o.stdout.toString();
      expect(out.endsWith("\n") && out.split(/(?<=\n)/).pop() === "100 100\r\n", `output ${show(out)} does not end with the line "100 100\\r\\n"`);
      expect(o.stderr.length === 0, `with a tty all output is stdout; got stderr ${show(o.stderr)}`);
      expect(o.exitCode === 0, `exit code ${o.exitCode}, want 0`);
      expect(o.stdoutCloses === 1, `stdout close sent ${o.stdoutCloses} times, want once`);
      return `stty size printed "100 100\\r\\n"`;
    },
  },
  {
    name: "exec-heartbeat",
    title: "ExecTaskStreaming ignores empty heartbeat requests",
    needs: ["start-task"],
    async run(s) {
      needCap(s, "exec");
      const o = await exec(s, s.main!, [setup(s.main!, execCmd(s, "read line; echo got:$line")), {}, {}, stdin("ping\n"), {}]);
      expect(o.stdout.toString() === "got:ping\n", `stdout ${show(o.stdout)}, want "got:ping\\n"`);
      expect(o.exitCode === 0, `exit code ${o.exitCode}, want 0`);
      return "3 heartbeats ignored";
    },
  },
  {
    name: "exec-stdin-close",
    title: "ExecTaskStreaming: stdin data then close reaches the process as EOF",
    needs: ["start-task"],
    async run(s) {
      needCap(s, "exec");
      const o = await exec(s, s.main!, [setup(s.main!, execCmd(s, "cat; echo done")), stdin("hello "), stdin("world"), { stdin: { close: true } }]);
      expect(o.stdout.toString() === "hello worlddone\n", `stdout ${show(o.stdout)}, want "hello worlddone\\n"`);
      expect(o.exitCode === 0, `exit code ${o.exitCode}, want 0`);
      return "cat saw EOF";
    },
  },
  {
    name: "exec-signal-exit",
    title: "ExecTaskStreaming: a command killed by signal 9 exits 137",
    needs: ["start-task"],
    async run(s) {
      needCap(s, "exec");
      const o = await exec(s, s.main!, [setup(s.main!, execCmd(s, "kill -9 $$"))]);
      expect(o.exitCode === 137, `exit code ${o.exitCode}, want 137 (128+9)`);
      return "exit 137";
    },
  },
  {
    name: "exec-setup-first",
    title: "ExecTaskStreaming: a first message other than setup fails the stream (any status); the plugin stays SERVING",
    needs: ["start-task"],
    async run(s) {
      needCap(s, "exec");
      const o = await runExecStream(running(s).driver, [stdin("x")], { timeoutMs: s.opts.callTimeoutMs, signal: s.signal });
      if (o.error instanceof PluginShutdownError) throw o.error;
      expect(o.error !== undefined, "the plugin accepted a stream whose first message was not setup");
      if (s.signal.aborted) throw o.error;
      // A stream left open is no refusal: Nomad's exec session would hang on it.
      if (codeOf(o.error) === Code.DeadlineExceeded)
        throw new CheckFailure(`the driver did not answer a stream whose first message was not setup: ${describe(o.error)} (it must fail the stream)`);
      // Any error status will do: Nomad's Go plugin server (plugins/drivers/server.go) answers with a
      // plain error, which is Unknown on the wire; nomadkit's server says InvalidArgument.
      const code = codeOf(o.error);
      const status = code === undefined ? "no gRPC status" : `status ${CODE_NAMES[code] ?? "code"} (${code})`;
      const h = await running(s).health.check({ service: "plugin" }, s.co());
      expect(h.status === 1, `${status}: ${describe(o.error)}; then the plugin is no longer SERVING (status ${h.status})`);
      return `${status}: ${describe(o.error)}; the plugin stays SERVING`;
    },
  },
  {
    name: "bad-config",
    title: "StartTask with malformed msgpack config fails cleanly; the plugin stays up",
    needs: ["start-task"],
    async run(s) {
      const task = s.newTask("bad");
      task.config.msgpackDriverConfig = new Uint8Array([0xc1, 0xff, 0x00]);
      let err: unknown;
      try {
        await running(s).driver.startTask({ task: task.config }, s.co());
      } catch (e) {
        err = e;
      }
      expect(err !== undefined, "StartTask accepted garbage as config");
      expect(!(err instanceof PluginShutdownError), "the plugin died");
      if (s.signal.aborted) throw err;
      // A call that never answers is no refusal: Nomad's task runner would wait on it forever.
      if (codeOf(err) === Code.DeadlineExceeded) throw new CheckFailure(`StartTask did not answer the malformed config: ${describe(err)} (it must refuse it)`);
      const h = await running(s).health.check({ service: "plugin" }, s.co());
      expect(h.status === 1, "the plugin is no longer SERVING");
      task.destroyed = true;
      return describe(err);
    },
  },
  {
    name: "recover",
    title: "plugin SIGKILLed, restarted, RecoverTask with the handle as Nomad's state keeps it: the task kept running and is controlled (SignalTask reaches it, WaitTask waits); Inspect/exec work",
    needs: ["inspect-task"],
    async run(s) {
      const task = s.main!;
      const old = running(s);
      let pid: number | undefined;
      if (s.defaultTask) pid = await s.taskPid(task);
      const before = s.size(task.logs.stdoutFile);
      s.rememberProcesses(old);
      s.expectExit(old);
      // As an agent restart, the strictest case: the handle read back from Nomad's state database,
      // which drops the task's config block (the driver must re-attach from driver_state), and the
      // task's FIFOs read again after RecoverTask (Nomad's logmon hook, run again once the task is
      // restored): a FIFO whose writer died with the plugin and that RecoverTask reopens is collected.
      let refused: unknown;
      s.run = await task.logs.agentRestart(async () => {
        process.kill(old.pid, "SIGKILL");
        await old.exited;
        const p = (s.run = await s.launch());
        await s.setConfig(p);
        await s.init(p);
        s.openStreams(p);
        await p.driver.recoverTask({ taskId: task.id, handle: restoredTaskHandle(task.handle) }, s.co()).catch((err: unknown) => {
          if (err instanceof PluginShutdownError || s.signal.aborted) throw err;
          refused = err;
        });
        return p;
      });
      if (refused !== undefined) throw new CheckFailure(`RecoverTask failed: ${describe(refused)}; ${await restartTask(s, task)}`);
      s.watch(s.run, task);
      const r = await s.run.driver.inspectTask({ taskId: task.id }, s.co());
      s.learnFromInspect(r);
      expect(r.task?.state === TaskState.RUNNING, `after RecoverTask the task is ${TaskState[r.task?.state ?? 0]}, want RUNNING`);
      if (r.task?.startedAt && task.startedAt) {
        const now = timestampDate(r.task.startedAt).getTime();
        expect(Math.abs(now - task.startedAt.getTime()) < 1000, `started_at changed across the restart: ${task.startedAt.toISOString()} -> ${new Date(now).toISOString()}`);
      }
      const notes = [`plugin ${old.pid} -> ${s.run.pid}`];
      if (pid !== undefined) {
        await s.waitForOutput(task, () => s.size(task.logs.stdoutFile) > before, "the task's output to keep growing after the restart");
        expect(s.startPids(task).length === 1, `the task started ${s.startPids(task).length} times; it must never restart`);
        notes.push(`task pid ${pid} never stopped`);
      }
      // Re-attached, not merely remembered: a signal must reach the very process that kept running.
      // A plugin that only records the task as RUNNING otherwise passes here and fails stop-task.
      if (pid !== undefined && s.caps?.sendSignals) {
        const sig = defaultTaskSignals(s.opts.signal)[0]!;
        try {
          await deliverSignal(s, task, sig);
        } catch (err) {
          if (err instanceof PluginShutdownError || err instanceof LostOutput || s.signal.aborted) throw err;
          throw new CheckFailure(`after RecoverTask the plugin does not control the running task (pid ${pid}): ${describe(err)}`);
        }
        notes.push(`SignalTask(${sig}) reached it`);
      } else notes.push(`control not verified by a signal (${pid === undefined ? "custom taskConfig" : "send_signals false"})`);
      if (s.caps?.exec) {
        const o = await exec(s, task, [setup(task, execCmd(s, "echo recovered"))]);
        expect(o.stdout.toString() === "recovered\n" && o.exitCode === 0, `exec after recover: stdout ${show(o.stdout)}, exit ${o.exitCode}`);
        notes.push("exec works");
      }
      // The WaitTask sent after RecoverTask waits for the task, which still runs (a driver that cannot
      // wait for a process it did not start may answer at once: Nomad would take the task as exited).
      const early = await earlyWait(task);
      if (early !== undefined) throw new CheckFailure(`WaitTask on the recovered task ${early}${stillRuns(pid)}: Nomad would take the running task as exited`);
      notes.push("WaitTask pending");
      // Nomad may call RecoverTask for a task the plugin already knows: it must succeed.
      await s.run.driver.recoverTask({ taskId: task.id, handle: task.handle }, s.co());
      return notes.join("; ");
    },
  },
  {
    name: "signal-task",
    title: "SignalTask delivers each signal as asked (default task: SIGHUP, SIGUSR1, SIGUSR2, each reported by the task)",
    needs: ["start-task"],
    async run(s) {
      needCap(s, "sendSignals");
      const task = s.main!;
      if (!s.defaultTask) {
        await running(s).driver.signalTask({ taskId: task.id, signal: s.opts.signal }, s.co());
        return `${s.opts.signal} sent (accepted; its delivery is not verified with a custom taskConfig)`;
      }
      const signals = defaultTaskSignals(s.opts.signal);
      for (const signal of signals) await deliverSignal(s, task, signal);
      return `the task received ${signals.join(", ")}, each as sent`;
    },
  },
  {
    name: "stop-task",
    title: "StopTask as Nomad sends it without kill_signal (signal \"\", timeout) ends the task; WaitTask, pending until then, returns its exit",
    needs: ["start-task"],
    async run(s) {
      const task = s.main!;
      let pid: number | undefined;
      if (s.defaultTask) pid = await s.taskPid(task);
      // The task runs until stopped: the WaitTask call made as it started must still be pending (Nomad
      // takes its answer as the task's exit).
      const early = await earlyWait(task);
      if (early !== undefined) throw new CheckFailure(`WaitTask ${early} before StopTask${stillRuns(pid)}: Nomad would take the running task as exited`);
      // The task's kill_signal, which most jobs leave unset: the driver picks its default (Nomad's
      // executor SIGINT, docker the image's STOPSIGNAL), so any way the task ended is accepted.
      await running(s).driver.stopTask({ taskId: task.id, signal: STOP_SIGNAL, timeout: { seconds: 10n } }, s.co());
      const r = await settled(s, task);
      expect(r.result, "WaitTask returned no result");
      expect(r.err === "", `WaitTask err ${JSON.stringify(r.err)}`);
      if (s.defaultTask) {
        await s.pidGone(pid!, `task pid ${pid} to be gone`);
        // The default task traps only the signal-task signals: whatever stopped it, it did not exit 0 by itself.
        expect(!succeeded(r), `the stopped task is reported as ${describeExit(r)}: Nomad would count a killed task as a success`);
      }
      return describeExit(r);
    },
  },
  {
    name: "wait-task",
    title: "WaitTask on an exited task returns its result at once",
    needs: ["stop-task"],
    async run(s) {
      const r = await running(s).driver.waitTask({ taskId: s.main!.id }, s.co());
      expect(r.result, "WaitTask returned no result");
      return describeExit(r);
    },
  },
  {
    name: "exit-code",
    title: "WaitTask reports the exit code of a task that exits by itself (exit 7)",
    needs: ["start-task"],
    async run(s) {
      if (!s.defaultTask) throw new SkipCheck("needs the default task (a custom taskConfig's exit status is not known)");
      const p = running(s);
      const task = s.newTask("exits", { taskConfig: { command: s.opts.execShell, args: ["-c", `echo "${START_MARKER} $$"; exit 7`] } });
      await s.startTask(p, task);
      const r = await settled(s, task);
      await p.driver.destroyTask({ taskId: task.id, force: true }, s.co()).then(() => void (task.destroyed = true));
      // Nomad's restart policy and a batch job's success read this code.
      expect(r.result?.exitCode === 7 && r.result.signal === 0, `WaitTask reported ${describeExit(r)}, want exit_code 7`);
      return describeExit(r);
    },
  },
  {
    name: "inspect-exited",
    title: "InspectTask reports the exited task: EXITED, completed_at, result",
    needs: ["stop-task"],
    async run(s) {
      const r = await running(s).driver.inspectTask({ taskId: s.main!.id }, s.co());
      expect(r.task?.state === TaskState.EXITED, `state ${TaskState[r.task?.state ?? 0]}, want EXITED`);
      expect(timeSet(r.task.completedAt), "completed_at is not set");
      expect(r.task.result, "result is not set");
      return `EXITED at ${timestampDate(r.task.completedAt).toISOString()}`;
    },
  },
  {
    name: "destroy-task",
    title: "DestroyTask(force), as Nomad sends it, forgets the exited task (InspectTask then fails)",
    needs: ["stop-task"],
    async run(s) {
      const task = s.main!;
      // Nomad's task runner (clearDriverHandle) always destroys with force = true, an exited task too.
      try {
        await running(s).driver.destroyTask({ taskId: task.id, force: true }, s.co());
      } catch (err) {
        if (err instanceof PluginShutdownError) throw err;
        throw new CheckFailure(`DestroyTask(force = true) on the exited task failed: ${describe(err)}`);
      }
      task.destroyed = true;
      return `InspectTask: ${await inspectForgotten(s, task)}`;
    },
  },
  {
    name: "destroy-force",
    title: "DestroyTask(force) kills a running task and forgets it",
    needs: ["start-task"],
    async run(s) {
      const task = s.newTask("forced");
      await s.startTask(running(s), task);
      let pid: number | undefined;
      if (s.defaultTask) pid = await s.taskPid(task);
      await running(s).driver.destroyTask({ taskId: task.id, force: true }, s.co());
      task.destroyed = true;
      await inspectForgotten(s, task);
      if (pid !== undefined) await s.pidGone(pid, `task pid ${pid} to be killed`);
      return pid !== undefined ? `pid ${pid} killed and forgotten` : "forgotten";
    },
  },
  {
    name: "destroy-no-force",
    title: "DestroyTask(force = false) refuses a running task, which runs on; once the task has exited it forgets it (InspectTask then fails)",
    needs: ["start-task"],
    async run(s) {
      const p = running(s);
      const task = s.newTask("no-force");
      await s.startTask(p, task);
      let pid: number | undefined;
      if (s.defaultTask) pid = await s.taskPid(task);
      // Without force a running task is an error (driver.proto; Nomad's drivers answer "cannot destroy
      // running task", and their tests destroy an exited task with force = false). Judged on a task
      // the driver itself reports RUNNING: a custom taskConfig's command may have ended by now.
      const before = await p.driver.inspectTask({ taskId: task.id }, s.co());
      s.learnFromInspect(before);
      let refusal = `not tried (the driver reports the task ${TaskState[before.task?.state ?? 0]}, not RUNNING)`;
      if (before.task?.state === TaskState.RUNNING) {
        let err: unknown;
        try {
          await p.driver.destroyTask({ taskId: task.id, force: false }, s.co());
        } catch (e) {
          err = e;
        }
        if (err instanceof PluginShutdownError || s.signal.aborted) throw err;
        expect(
          err !== undefined,
          `DestroyTask(force = false) on the running task${pid !== undefined ? ` (pid ${pid})` : ""} succeeded: without force a running task is an error ` +
            `(Nomad's drivers answer "cannot destroy running task"); only force may kill it`,
        );
        if (codeOf(err) === Code.DeadlineExceeded)
          throw new CheckFailure(`DestroyTask(force = false) on the running task did not answer: ${describe(err)} (it must refuse it)`);
        refusal = `refused (${describe(err)})`;
        // A refusal that kills or forgets the task anyway is no refusal.
        const after = await p.driver.inspectTask({ taskId: task.id }, s.co()).catch((e: unknown) => e);
        if (after instanceof PluginShutdownError) throw after;
        if (after instanceof Error) throw new CheckFailure(`DestroyTask(force = false) was ${refusal}, then InspectTask of the task failed: ${describe(after)} (a refused destroy must keep the task)`);
        const state = (after as typeof before).task?.state ?? 0;
        expect(state === TaskState.RUNNING, `DestroyTask(force = false) was ${refusal}, and then the task is ${TaskState[state]}: a refused destroy must leave it running`);
        expect(pid === undefined || !processGone(pid), `DestroyTask(force = false) was ${refusal}, yet the task's process ${pid} is gone: a refused destroy must leave it running`);
      }
      // As Nomad ends a task: StopTask, WaitTask's answer, then the destroy, here without force.
      await p.driver.stopTask({ taskId: task.id, signal: STOP_SIGNAL, timeout: { seconds: 10n } }, s.co());
      await settled(s, task);
      try {
        await p.driver.destroyTask({ taskId: task.id, force: false }, s.co());
      } catch (err) {
        if (err instanceof PluginShutdownError || s.signal.aborted) throw err;
        throw new CheckFailure(`DestroyTask(force = false) on the exited task failed: ${describe(err)} (an exited task needs no force)`);
      }
      task.destroyed = true;
      return `running: ${refusal}; exited: forgotten (InspectTask: ${await inspectForgotten(s, task)})`;
    },
  },
  {
    name: "shared-cpuset",
    title: "on cgroup v1, where cpuset_cgroup is shared by the node's tasks (Nomad's <parent>/share): StopTask and DestroyTask leave another process in it running",
    needs: ["start-task"],
    async run(s) {
      if (s.noCgroup !== undefined) throw new SkipCheck(`no task cgroup (${s.noCgroup})`);
      const p = running(s);
      const task = s.newTask("shared-cpuset");
      const cg = task.cgroup;
      if (cg === undefined || !cg.shared) {
        task.destroyed = true; // never started: its cgroup goes with the next release
        throw new SkipCheck(cg === undefined ? `no task cgroup (${s.noCgroup ?? "none made"})` : cg.cores.length > 0 ? "the tasks reserve cores (cores): cpuset_cgroup is the task's own" : "cgroup v2: cpuset_cgroup is the task's own");
      }
      // In the shared cpuset cgroup only, as another task's process is under Nomad.
      const other = spawn("sleep", ["1000"], { stdio: "ignore" });
      const exited = new Promise<void>((resolve) => {
        other.once("exit", () => resolve());
        other.once("error", () => resolve());
      });
      try {
        expect(other.pid !== undefined, "cannot start sleep, the process to share the task's cpuset cgroup");
        // Killed in the last-resort cleanup too, should the run end mid-check.
        s.learnPid(other.pid);
        writeFileSync(join(cg.path, "cgroup.procs"), `${other.pid}\n`);
        const survived = (call: string) =>
          expect(
            !processGone(other.pid!),
            `${call} killed pid ${other.pid}, a process of no task that was only in the task's cpuset_cgroup ${cg.path}: on cgroup v1 Nomad gives every ` +
              `task without reserved cores that one cpuset cgroup, so killing through it kills the node's other tasks; kill, limit and measure the task ` +
              `through its own cgroups, <controller>/<parent>/<alloc_id>.<task> (freezer, cpu, memory), as Nomad's executor does`,
          );
        await s.startTask(p, task);
        await p.driver.stopTask({ taskId: task.id, signal: STOP_SIGNAL, timeout: { seconds: 10n } }, s.co());
        await settled(s, task);
        survived("StopTask");
        await p.driver.destroyTask({ taskId: task.id, force: true }, s.co());
        task.destroyed = true;
        survived("DestroyTask");
        return `pid ${other.pid} in ${cg.path} outlived the task's StopTask and DestroyTask`;
      } finally {
        other.kill("SIGKILL");
        await exited;
      }
    },
  },
  {
    name: "stop-timeout",
    title: "StopTask with a 1 s timeout kills a task that ignores INT, TERM and HUP (Nomad's kill_timeout)",
    needs: ["start-task"],
    async run(s) {
      if (!s.defaultTask) throw new SkipCheck("needs the default task (a custom taskConfig cannot be made to ignore the stop signals)");
      const p = running(s);
      const task = s.newTask("stubborn", { taskConfig: stubbornTaskConfig(s.opts.execShell) });
      await s.startTask(p, task);
      const pid = await s.taskPid(task);
      // Deterministic: only an upper bound far above the 1 s timeout. StopTask may return before
      // the task is gone or only after it: the task must be gone in time either way.
      const t0 = performance.now();
      const stop = p.driver.stopTask({ taskId: task.id, signal: STOP_SIGNAL, timeout: { seconds: 1n } }, s.co()).then(
        () => undefined,
        (err: unknown) => err,
      );
      const destroy = () => p.driver.destroyTask({ taskId: task.id, force: true }, s.co()).then(() => void (task.destroyed = true));
      try {
        await waitUntil(() => processGone(pid), `task pid ${pid} to be gone`, 1000 + STOP_TIMEOUT_SLACK_MS, s.signal);
      } catch (err) {
        // The task still runs: the runner destroys it (force) as the check ends, as Nomad's task runner would.
        if (s.signal.aborted) throw err;
        throw new CheckFailure(`the task (pid ${pid}) ignores INT, TERM and HUP and still runs ${formatMs(1000 + STOP_TIMEOUT_SLACK_MS)} after StopTask(timeout 1 s): the driver never killed it`);
      }
      const ms = performance.now() - t0;
      const err = await stop;
      if (err instanceof PluginShutdownError) throw err;
      if (err !== undefined) throw new CheckFailure(`StopTask failed: ${describe(err)}`);
      const r = await settled(s, task);
      await destroy();
      expect(!succeeded(r), `the killed task is reported as ${describeExit(r)}: Nomad would count it as a success`);
      return `gone ${formatMs(ms)} after StopTask; ${describeExit(r)}`;
    },
  },
  {
    name: "network",
    title: "CreateNetwork/DestroyNetwork (when must_create_network): idempotent, tasks run inside",
    needs: ["capabilities", "task-config-schema"],
    async run(s) {
      if (!s.caps?.mustCreateNetwork) throw new SkipCheck("capabilities.must_create_network is false");
      const p = running(s);
      const task = s.newTask("net");
      const first = await p.driver.createNetwork({ allocId: task.allocId, hostname: "conformance" }, s.co());
      s.networks.set(task.allocId, first.isolationSpec);
      const spec = first.isolationSpec;
      expect(spec, "CreateNetwork returned no isolation_spec");
      expect(spec.mode === NetworkIsolationSpec_NetworkIsolationMode.GROUP, `mode ${NetworkIsolationSpec_NetworkIsolationMode[spec.mode]}, want GROUP`);
      expect(spec.path !== "", "isolation_spec.path is empty");
      expect(first.created, "created is false for a new allocation");
      const again = await p.driver.createNetwork({ allocId: task.allocId, hostname: "conformance" }, s.co());
      expect(!again.created, "a second CreateNetwork for the same allocation says created = true (must be idempotent)");
      expect(again.isolationSpec?.path === spec.path, `the second CreateNetwork returned path ${again.isolationSpec?.path}, want ${spec.path}`);
      const nsIno = statSync(spec.path).ino;
      task.config.networkIsolationSpec = spec;
      await s.startTask(p, task);
      let inside = "not checked (exec unsupported)";
      if (s.caps.exec) {
        const o = await exec(s, task, [setup(task, execCmd(s, "readlink /proc/self/ns/net"))]);
        const got = o.stdout.toString().trim();
        const want = `net:[${nsIno}]`;
        expect(got === want, `a process in the task is in ${got}, want ${want} (${spec.path})`);
        expect(got !== readlinkSync("/proc/self/ns/net"), "the task runs in the host's network namespace");
        inside = `task runs in ${got}`;
      }
      await p.driver.stopTask({ taskId: task.id, signal: STOP_SIGNAL, timeout: { seconds: 10n } }, s.co());
      await settled(s, task);
      await p.driver.destroyTask({ taskId: task.id, force: true }, s.co());
      task.destroyed = true;
      await p.driver.destroyNetwork({ allocId: task.allocId, isolationSpec: spec }, s.co());
      s.networks.delete(task.allocId);
      await p.driver.destroyNetwork({ allocId: task.allocId, isolationSpec: spec }, s.co());
      expect(!existsSync(spec.path) || statSync(spec.path).ino !== nsIno, `${spec.path} is still the namespace after DestroyNetwork`);
      return `${spec.path}; ${inside}; destroyed twice`;
    },
  },
  {
    name: "fingerprint-stream",
    title: "the Fingerprint stream stays open until Shutdown (Nomad takes its end or an error as a lost driver)",
    needs: ["init"],
    async run(s) {
      const faults = s.streamFaults.filter((f) => f.stream === "Fingerprint");
      expect(faults.length === 0, faults.map((f) => f.message).join("; "));
      return `open, ${s.fingerprints} response(s)`;
    },
  },
  {
    name: "task-events",
    title: "TaskEvents stream stays open until Shutdown; each event names a started task (task_id, alloc_id, task_name) and has a timestamp; with requireTaskEvents, at least one event",
    needs: ["init"],
    async run(s) {
      const required = s.opts.requireTaskEvents === true;
      if (s.events.unimplemented) {
        if (required) throw new CheckFailure("TaskEvents is unimplemented, and requireTaskEvents (--require-task-events) wants at least one event for a task the driver runs");
        throw new SkipCheck("TaskEvents is unimplemented");
      }
      if (required && s.events.count === 0) await awaitTaskEvent(s);
      const faults = s.streamFaults.filter((f) => f.stream === "TaskEvents");
      expect(faults.length === 0, faults.map((f) => f.message).join("; "));
      // Nomad routes an event to its task runner by alloc_id and task_name, and drops it otherwise.
      s.events.list.forEach((e, i) => {
        const what = `event ${i + 1} (${JSON.stringify(e.message)})`;
        const task = s.tasks.find((t) => t.id === e.taskId);
        expect(task, `${what}: task_id ${JSON.stringify(e.taskId)} is not a task the suite started`);
        expect(
          e.allocId === task.allocId && e.taskName === task.name,
          `${what}: alloc_id ${JSON.stringify(e.allocId)} and task_name ${JSON.stringify(e.taskName)} are not those of task ${task.id} ` +
            `(${JSON.stringify(task.allocId)}, ${JSON.stringify(task.name)})`,
        );
        expect(e.timestamp, `${what}: timestamp is missing`);
      });
      const first = s.events.list[0];
      return `open, ${s.events.count} event(s) received${first ? `, the first ${JSON.stringify(first.message)}` : ""}`;
    },
  },
  {
    name: "shutdown",
    title: "Driver.Shutdown, then every plugin process exits within 2 s of GRPCController.Shutdown",
    needs: ["init"],
    async run(s) {
      const p = running(s);
      let note = "Driver.Shutdown ok";
      // From here on the plugin is being stopped: its streams may end with it.
      s.expectExit(p);
      try {
        await p.driver.shutdown({}, s.co({ timeoutMs: s.opts.shutdownTimeoutMs }));
      } catch (err) {
        if (!isUnimplemented(err)) throw err;
        note = "Driver.Shutdown unimplemented (accepted)";
      }
      await s.kill(p, "run");
      const bad = s.kills.filter((k) => k.exit.signal === "SIGKILL");
      expect(bad.length === 0, `${bad.map((k) => `the ${k.label} process`).join(", ")} did not exit within ${s.opts.shutdownTimeoutMs} ms and was SIGKILLed`);
      const nonzero = s.kills.filter((k) => k.exit.code !== 0);
      expect(nonzero.length === 0, nonzero.map((k) => `the ${k.label} process exited with ${k.exit.code ?? k.exit.signal}`).join(", "));
      return `${note}; ${s.kills.map((k) => `${k.label} ${formatMs(k.ms)}`).join(", ")}`;
    },
  },
];
