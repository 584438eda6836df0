// Test helpers: launch nomadkit-rawexec exactly as Nomad does (launchPlugin on the plugin_dir
// executable), build TaskConfigs like Nomad's task runner, and wait on observable conditions.
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { encode } from "@msgpack/msgpack";
import {
  createTaskCgroup,
  createTaskDirs,
  launchPlugin,
  nomadTaskConfig,
  TaskCgroupUnavailableError,
  type PluginClient,
  type TaskCgroup,
} from "@nomadkit/client";

type Driver = PluginClient["driver"];
/** TaskConfig in init form, as StartTask takes it. */
export type TaskConfigInit = NonNullable<Parameters<Driver["startTask"]>[0]["task"]>;
/** The handle Nomad persists. */
export type TaskHandle = NonNullable<Awaited<ReturnType<Driver["startTask"]>>["handle"]>;
/** An ExecTaskStreaming request in init form. */
export type ExecRequest = Parameters<Driver["execTaskStreaming"]>[0] extends AsyncIterable<infer R> ? R : never;

export const PLUGIN = fileURLToPath(new URL("../bin/nomadkit-rawexec", import.meta.url));
export const isRoot = process.getuid?.() === 0;

/** Every plugin a test launched, killed by {@link cleanup}. */
const plugins: PluginClient[] = [];
/** Directories to remove. */
const dirs: string[] = [];
/** Executor and task pids from every handle, killed by {@link cleanup} if a test left them running. */
const pids: number[] = [];
/** Task cgroups made by {@link newTask}, removed by {@link cleanup}. */
const cgroups: TaskCgroup[] = [];
/** Parent of the tasks' cgroups: the test process's own, `nomadkit-test-*` like every test cgroup. */
export const CGROUP_PARENT = `nomadkit-test-${process.pid}`;

/** Launches the plugin as Nomad's "run" dispense does: start, SetConfig (msgpack), Init. */
export async function startPlugin(config: { create_network?: boolean; [option: string]: unknown } = {}, env?: NodeJS.ProcessEnv): Promise<PluginClient> {
  const p = await launchPlugin(PLUGIN, [], {
    env,
    logger: process.env.NOMADKIT_TEST_LOGS ? (e) => process.stderr.write(`[plugin] ${e.level} ${e.message} ${JSON.stringify(e.fields)}\n`) : undefined,
  });
  plugins.push(p);
  await p.basePlugin.setConfig({ msgpackConfig: encode({ create_network: false, ...config }), pluginApiVersion: "v0.1.0" });
  await p.driver.init({});
  return p;
}

/** An allocation: its id and a directory for it (the tasks' directories are made by newTask). */
export function newAlloc(): { allocId: string; allocDir: string } {
  const root = mkdtempSync(join(tmpdir(), "nk-rawexec-"));
  dirs.push(root);
  const allocId = randomUUID();
  return { allocId, allocDir: join(root, allocId) };
}

export interface TestTask {
  id: string;
  name: string;
  allocId: string;
  allocDir: string;
  taskDir: string;
  stdoutPath: string;
  stderrPath: string;
  config: TaskConfigInit;
  /** The cgroup made for it as Nomad's client makes one (resources.linux_resources.cpuset_cgroup), when it has one. */
  cgroup?: TaskCgroup | undefined;
}

/**
 * The TaskConfig Nomad sends for a task whose `config` block is `driverConfig`, its directories made,
 * and its cgroup, as Nomad's client makes one for every task, where this host can make it
 * (`cgroup: true` requires one: a test that needs it skips where it cannot be made, see
 * {@link cgroupsUnavailable}; `cgroup: false` asks for none).
 */
export function newTask(
  driverConfig: Record<string, unknown>,
  extra: Partial<TaskConfigInit> & { alloc?: { allocId: string; allocDir: string }; cgroup?: boolean; cores?: number[] } = {},
): TestTask {
  const { alloc = newAlloc(), cgroup: withCgroup, cores, ...rest } = extra;
  const name = rest.name ?? "web";
  const taskDirs = createTaskDirs(alloc.allocDir, name);
  const cgroup = (withCgroup ?? cgroupsUnavailable() === undefined) ? createTaskCgroup({ allocId: alloc.allocId, task: name, parent: CGROUP_PARENT, cores }) : undefined;
  if (cgroup) cgroups.push(cgroup);
  const stdoutPath = join(taskDirs.logsDir, `${name}.stdout.0`);
  const stderrPath = join(taskDirs.logsDir, `${name}.stderr.0`);
  const config = {
    ...nomadTaskConfig({
      name,
      dirs: taskDirs,
      allocId: alloc.allocId,
      // Nomad's HCL decoder fills every attribute of the schema before encoding.
      msgpackDriverConfig: encode({ args: [], ...driverConfig }),
      stdoutPath,
      stderrPath,
      memoryMb: 64,
      cpusetCgroup: cgroup?.path,
      cgroupParent: cgroup?.parent,
      cores,
    }),
    ...rest,
  } as TaskConfigInit;
  return { id: config.id!, name, allocId: alloc.allocId, allocDir: alloc.allocDir, taskDir: taskDirs.taskDir, stdoutPath, stderrPath, config, cgroup };
}

let unavailable: { reason: string | undefined } | undefined;

/** Why this host cannot make task cgroups (not root, no writable cgroupfs), or undefined when it can. Probed once. */
export function cgroupsUnavailable(): string | undefined {
  if (!unavailable) {
    try {
      cgroups.push(createTaskCgroup({ allocId: "probe", task: "probe", parent: CGROUP_PARENT }));
      unavailable = { reason: undefined };
    } catch (err) {
      if (!(err instanceof TaskCgroupUnavailableError)) throw err;
      unavailable = { reason: err.reason };
    }
  }
  return unavailable.reason;
}

/** `/bin/sh -c script` as a task config. */
export function sh(script: string): Record<string, unknown> {
  return { command: "/bin/sh", args: ["-c", script] };
}

/** StartTask; returns the handle Nomad would persist. */
export async function start(p: PluginClient, t: TestTask): Promise<TaskHandle> {
  const res = await p.driver.startTask({ task: t.config });
  if (!res.handle) throw new Error("StartTask returned no handle");
  const state = JSON.parse(new TextDecoder().decode(res.handle.driverState)) as { executor: { pid: number }; driver: { pid: number } };
  pids.push(state.driver.pid, state.executor.pid);
  return res.handle;
}

/** Reads a file, "" when missing. */
export function read(path: string): string {
  return existsSync(path) ? readFileSync(path, "utf8") : "";
}

/**
 * Polls until `cond` holds (an observable effect, not a timed sleep), failing with `what` after a
 * generous bound so a broken driver fails the test instead of hanging it.
 */
export async function until<T>(cond: () => T | undefined | false | Promise<T | undefined | false>, what: string, boundMs = 60_000): Promise<T> {
  const deadline = Date.now() + boundMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** True while the process exists and is not a zombie. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

/** One ExecTaskStreaming call, host-style (request side kept open until the plugin ends the call). */
export async function execStream(
  p: PluginClient,
  requests: ExecRequest[],
): Promise<{ stdout: string; stderr: string; exitCode: number | undefined; exited: number; stdoutCloses: number; stderrCloses: number }> {
  let release!: () => void;
  const done = new Promise<void>((r) => (release = r));
  async function* input() {
    yield* requests;
    await done;
  }
  const out = { stdout: "", stderr: "", exitCode: undefined as number | undefined, exited: 0, stdoutCloses: 0, stderrCloses: 0 };
  const dec = new TextDecoder();
  try {
    for await (const m of p.driver.execTaskStreaming(input(), { timeoutMs: 60_000 })) {
      if (m.stdout?.data.length) out.stdout += dec.decode(m.stdout.data);
      if (m.stderr?.data.length) out.stderr += dec.decode(m.stderr.data);
      if (m.stdout?.close) out.stdoutCloses++;
      if (m.stderr?.close) out.stderrCloses++;
      if (m.exited) {
        out.exited++;
        out.exitCode ??= m.result?.exitCode ?? 0;
      }
    }
  } finally {
    release();
  }
  return out;
}

/** Stdin bytes as a request. */
export function stdin(text: string): ExecRequest {
  return { stdin: { data: new TextEncoder().encode(text) } };
}

/** Kills every plugin the tests launched (and whatever a failed test left running) and removes their directories. */
export async function cleanup(): Promise<void> {
  for (const p of plugins.splice(0)) if (!p.exitSignal.aborted) await p.kill();
  for (const pid of pids.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone, as it should be
    }
  }
  const failed: unknown[] = [];
  for (const cg of cgroups.splice(0)) await cg.destroy().catch((err: unknown) => failed.push(err));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  if (failed.length > 0) throw new AggregateError(failed, "cleanup: task cgroups left behind");
}
