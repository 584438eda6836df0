// nomadkit-rawexec: a raw_exec-style Nomad task driver built only on @nomadkit/server's public API.
// Each task runs under its own executor process, so tasks outlive plugin restarts and RecoverTask
// re-attaches from the reattach info kept in TaskHandle.driver_state.
import { isAbsolute, join } from "node:path";
import { defineDriver, failedPrecondition, invalidArgument, spec, taskNotFound, unrecoverable, type CallContext, type Driver, type Fingerprint, type TaskStatsContext, type SpecValue } from "@nomadkit/server";
import {
  decodeExecutorState,
  forwardExecStream,
  isProcessAlive,
  launchExecutor,
  reattachExecutor,
  resolveUser,
  signalNumber,
  type ExecutorHandle,
} from "@nomadkit/server/executor";
import { LinuxNetnsManager, type NetworkManager } from "@nomadkit/server/network";
import { checkEnvPatterns, withoutDeniedEnv } from "./denied-envvars.js";
import { checkTaskIds, parseIdRanges, type IdRange, type TaskIds } from "./denied-ids.js";
import {
  RawExecTask,
  bootId,
  killOrphanedTask,
  killTaskCgroups,
  killUnreachableExecutor,
  parseRawExecState,
  processStart,
  type RawExecCgroups,
  type RawExecState,
} from "./task.js";

/** The plugin's name: the job's `driver = "nomadkit-rawexec"`. */
export const PLUGIN_NAME = "nomadkit-rawexec";
/** The plugin's version. */
export const PLUGIN_VERSION = "0.1.0";

/** Agent config: `plugin "nomadkit-rawexec" { config { create_network = true } }`. */
export const pluginConfigSchema = spec.object({
  /**
   * raw_exec's switch. Default true, unlike raw_exec's false: raw_exec is built into every agent,
   * while this plugin runs only where an operator installed it. False reports the driver
   * undetected ("disabled") and refuses StartTask, as raw_exec does.
   */
  enabled: spec.attr("bool", { default: true }),
  /** Create each allocation's network namespace in the driver (must_create_network) instead of Nomad. */
  create_network: spec.attr("bool", { default: false }),
  /**
   * Host uids no task may run as, e.g. `"0-100,200"` (raw_exec's; the syntax of Nomad's validators).
   * A task without `user` is checked as the plugin's own user, as raw_exec checks the agent's.
   */
  denied_host_uids: spec.attr("string", { default: "" }),
  /** Host gids (primary or supplementary) no task may run with, same syntax. */
  denied_host_gids: spec.attr("string", { default: "" }),
  /** Variables removed from every task's environment: names, `*` for any run of characters (`"AWS_*"`, `"*_TOKEN"`). */
  denied_envvars: spec.attr("list(string)", { default: [] }),
});

/** Task config: `config { command = "/bin/sleep" args = ["300"] }`, the names raw_exec uses. */
export const taskConfigSchema = spec.object({
  command: spec.attr("string", { required: true }),
  args: spec.attr("list(string)", { default: [] }),
  /** A cgroup v2 directory to run the task in instead of the one Nomad made (absolute, or under /sys/fs/cgroup). */
  cgroup_v2_override: spec.attr("string", { default: "" }),
  /** cgroup v1 controller → directory to run the task in instead of Nomad's (absolute, or under /sys/fs/cgroup/<controller>). */
  cgroup_v1_override: spec.attr("map(string)", { default: {} }),
  /** The task's `/proc/<pid>/oom_score_adj`: 0 (the default) to 1000; raw_exec refuses negative values. */
  oom_score_adj: spec.attr("number", { default: 0 }),
  /** The task's working directory (absolute), for the task and exec into it; default the task directory. */
  work_dir: spec.attr("string", { default: "" }),
  /** Variables removed from this task's environment, besides the plugin's `denied_envvars`; same patterns. */
  denied_envvars: spec.attr("list(string)", { default: [] }),
});

export type PluginConfig = SpecValue<typeof pluginConfigSchema>;
export type TaskConfig = SpecValue<typeof taskConfigSchema>;

/**
 * Stops the task and executor a `driver_state` names when only its driver part is unusable (the
 * executor part checked as usual); nothing when the executor part is bad or the executor unreachable.
 */
async function stopTaskOfState(driverState: Uint8Array): Promise<void> {
  let exe: ExecutorHandle;
  try {
    exe = await reattachExecutor(decodeExecutorState(driverState).executor);
  } catch {
    return;
  }
  await exe.shutdownTask("SIGKILL", 0).catch(() => undefined);
  await exe.kill().catch(() => undefined);
}

/** Options of {@link createRawExecDriver} (for tests and embedding). */
export interface RawExecDriverOptions {
  /** Network manager for `create_network`; default the Linux named-netns manager. */
  network?: NetworkManager;
}

type Ctx = CallContext<PluginConfig, TaskConfig>;

/**
 * The task's environment as `KEY=value` strings, without the variables `denied_envvars` names
 * (as raw_exec's buildEnvList: the executor keeps it, so exec into the task sees the same). Refuses
 * a list that leaves nothing: the executor runs a task given no variables with its own environment,
 * the agent's, the very variables the list is there to keep out.
 */
function taskEnvironment(map: Record<string, string>, denied: readonly string[]): string[] {
  const kept = Object.entries(withoutDeniedEnv(map, denied)).map(([k, v]) => `${k}=${v}`);
  if (kept.length === 0 && Object.keys(map).length > 0)
    throw invalidArgument("denied_envvars", `removes every variable of the task's environment (${Object.keys(map).length}); the executor would run the task with its own environment instead`);
  return kept;
}

/**
 * Nomad's raw_exec refuses a negative `oom_score_adj` (a task must not make itself the last the
 * OOM killer picks); the kernel takes up to 1000, and only whole numbers.
 */
function checkOomScoreAdj(value: number): void {
  if (!Number.isInteger(value)) throw invalidArgument("config.oom_score_adj", `${value} is not a whole number`);
  if (value < 0) throw invalidArgument("config.oom_score_adj", `must not be negative (got ${value})`);
  if (value > 1000) throw invalidArgument("config.oom_score_adj", `must be at most 1000 (got ${value})`);
}

/** The plugin config's denied id ranges (InvalidArgument naming the option when malformed). */
function deniedRanges(config: PluginConfig | undefined): { uids: IdRange[]; gids: IdRange[] } {
  return { uids: parseIdRanges(config?.denied_host_uids ?? "", "denied_host_uids"), gids: parseIdRanges(config?.denied_host_gids ?? "", "denied_host_gids") };
}

/**
 * Where the executor finds the task's cgroups (its LaunchRequest's fields, and the task name from
 * the environment it was given), for killTaskCgroups once it is gone; undefined when it has none.
 */
function taskCgroups(v2: string, v1: Record<string, string>, cpuset: string | undefined, env: readonly string[]): RawExecCgroups | undefined {
  if (v2 === "" && Object.keys(v1).length === 0 && !cpuset) return undefined;
  const taskName = env.find((e) => e.startsWith("NOMAD_TASK_NAME="))?.slice("NOMAD_TASK_NAME=".length);
  return {
    ...(v2 !== "" && { cgroupV2Override: v2 }),
    ...(Object.keys(v1).length > 0 && { cgroupV1Override: { ...v1 } }),
    ...(cpuset && { cpusetCgroup: cpuset }),
    ...(taskName !== undefined && { taskName }),
  };
}

/**
 * An executor call's error, or, when the executor is gone (killed, crashed), FailedPrecondition
 * saying so: the client's own error would tell Nomad's user "plugin is shut down", which reads as
 * this driver plugin stopping.
 */
function executorGone(t: RawExecTask, err: unknown): unknown {
  if (!t.exe.exited.aborted && isProcessAlive(t.exe.pid)) return err;
  return failedPrecondition(`task ${t.id}: its executor (pid ${t.exe.pid}) is gone`);
}

/** The ids a task runs with: its user's (uid and groups), or without one this process's, which it inherits. */
async function taskIds(user: string): Promise<TaskIds> {
  if (user !== "") {
    const u = await resolveUser(user, "user");
    return { who: `user ${JSON.stringify(user)}`, uid: u.uid, gids: u.groups ?? [u.gid] };
  }
  return { who: "the plugin's own user, which the task runs as", uid: process.getuid?.() ?? 0, gids: [process.getgid?.() ?? 0, ...(process.getgroups?.() ?? [])] };
}

/**
 * Builds the nomadkit-rawexec driver.
 *
 * @example
 * ```ts
 * import { serveDriver } from "@nomadkit/server";
 * await serveDriver(createRawExecDriver());
 * ```
 */
export function createRawExecDriver(options: RawExecDriverOptions = {}): Driver<PluginConfig, TaskConfig> {
  const tasks = new Map<string, RawExecTask>();
  let nets: NetworkManager | undefined = options.network;
  const networks = (): NetworkManager => (nets ??= new LinuxNetnsManager({ labels: { "nomadkit.driver": PLUGIN_NAME } }));

  const get = (taskId: string): RawExecTask => {
    const t = tasks.get(taskId);
    if (!t) throw taskNotFound(taskId);
    return t;
  };

  return defineDriver<PluginConfig, TaskConfig>({
    name: PLUGIN_NAME,
    version: PLUGIN_VERSION,
    configSchema: pluginConfigSchema,
    taskConfigSchema,
    // must_create_network follows the agent's plugin config (the SDK asks on every call).
    capabilities: (config) => ({ sendSignals: true, exec: true, mustCreateNetwork: config?.create_network ?? false }),

    setConfig(config) {
      // Refused here, the agent's plugin config fails to load (the previous one stays).
      deniedRanges(config);
      checkEnvPatterns(config?.denied_envvars ?? [], "denied_envvars");
    },

    fingerprint(ctx): Fingerprint {
      // As raw_exec's: undetected, without the driver attribute, so Nomad places no task here.
      if (ctx.config?.enabled === false) return { health: "undetected", description: "disabled", attributes: {} };
      return {
        health: "healthy",
        description: "Healthy",
        attributes: { [`driver.${PLUGIN_NAME}`]: true, [`driver.${PLUGIN_NAME}.version`]: PLUGIN_VERSION },
      };
    },

    async startTask(task, ctx: Ctx) {
      if (ctx.config?.enabled === false) throw failedPrecondition(`${PLUGIN_NAME} is disabled (plugin config enabled = false)`);
      const { command, args, cgroup_v2_override, cgroup_v1_override, oom_score_adj, work_dir, denied_envvars } = task.driverConfig;
      if (command.trim() === "") throw invalidArgument("config.command", "must not be empty");
      checkOomScoreAdj(oom_score_adj);
      // As raw_exec's validate: a host has one cgroup mode, so only one override can apply.
      if (cgroup_v2_override !== "" && Object.keys(cgroup_v1_override).length > 0)
        throw invalidArgument("config.cgroup_v1_override", "only one of cgroup_v1_override and cgroup_v2_override may be set");
      // As raw_exec's: absolute. The executor would take a relative one from the task directory,
      // which raw_exec does not; that the directory exists is the executor's check (work_dir: ...).
      if (work_dir !== "" && !isAbsolute(work_dir)) throw invalidArgument("config.work_dir", `${JSON.stringify(work_dir)} is not an absolute path`);
      checkEnvPatterns(denied_envvars, "config.denied_envvars");
      const taskEnv = taskEnvironment(task.env, [...(ctx.config?.denied_envvars ?? []), ...denied_envvars]);
      const taskDir = join(task.allocDir, task.name);
      // Only root can switch users. Nomad's raw_exec fails such a task (its executor cannot set the
      // user); running it as the plugin's user would give it that user's access instead of the one asked for.
      if (task.user && process.getuid?.() !== 0)
        throw unrecoverable(`task user ${JSON.stringify(task.user)} needs the plugin to run as root (it runs as uid ${process.getuid?.()})`);
      const user = task.user ?? "";
      // Before the executor starts: a denied user never gets a process.
      const denied = deniedRanges(ctx.config);
      if (denied.uids.length > 0 || denied.gids.length > 0) checkTaskIds(await taskIds(user), denied.uids, denied.gids);
      // The executor keeps serving after Shutdown (as Nomad's does) so Wait reports the exit of a
      // stopped task; destroyTask ends it.
      // The agent's compute (from SetConfig's topology), as Nomad hands its executors: total_ticks match Nomad's.
      const { totalComputeMhz, numCores } = ctx.hostCompute;
      const exe: ExecutorHandle = await launchExecutor({
        config: { logFile: join(taskDir, "executor.out"), exitAfterShutdown: false, totalComputeMhz, numCores },
      });
      let pid: number;
      try {
        const res = await exe.client.launch(
          {
            cmd: command,
            args: [...args],
            env: taskEnv,
            user,
            taskDir,
            stdoutPath: task.stdoutPath,
            stderrPath: task.stderrPath,
            resources: task.resources,
            cgroupV2Override: cgroup_v2_override,
            cgroupV1Override: cgroup_v1_override,
            oomScoreAdj: oom_score_adj,
            workDir: work_dir,
            networkIsolation: task.networkIsolationSpec?.path ? task.networkIsolationSpec : undefined,
          },
          { signal: ctx.signal },
        );
        pid = res.process?.pid ?? 0;
      } catch (err) {
        // A Launch the caller gave up on may still be starting the task: the executor's Shutdown
        // waits for it and stops it before the executor goes.
        await exe.shutdownTask("SIGKILL", 0).catch(() => undefined);
        await exe.kill().catch(() => undefined);
        throw err;
      }
      const state: RawExecState = { startedAt: new Date().toISOString(), pid, pidStart: processStart(pid), bootId: bootId() };
      const cgroups = taskCgroups(cgroup_v2_override, cgroup_v1_override, task.resources?.linuxResources?.cpusetCgroup, taskEnv);
      if (cgroups) state.cgroups = cgroups;
      tasks.set(task.id, new RawExecTask(task.id, exe, state, task.allocId));
      ctx.events.emit({ taskId: task.id, message: `Started ${command} (pid ${pid}) under executor ${exe.pid}`, annotations: { pid: String(pid), executor_pid: String(exe.pid) } });
      // driver_state: the executor's reattach info plus our own fields, as JSON bytes.
      return { driverState: exe.driverState(state) };
    },

    async recoverTask({ task, driverState }, ctx: Ctx) {
      if (tasks.has(task.id)) return;
      let decoded: ReturnType<typeof decodeExecutorState<RawExecState>>;
      try {
        decoded = decodeExecutorState(driverState, parseRawExecState);
      } catch (err) {
        // Nomad starts the task again when recovery fails: a task whose executor part was sound
        // must not run on beside it.
        await stopTaskOfState(driverState);
        throw err;
      }
      const { executor, driver } = decoded;
      let exe: ExecutorHandle;
      try {
        exe = await reattachExecutor(executor);
      } catch (err) {
        // Nomad starts the task again when recovery fails: the old one must not run on beside it.
        const killed = driver !== undefined && killOrphanedTask(driver, task.allocId);
        killUnreachableExecutor(executor.pid, join(task.allocDir, task.name, "executor.out"));
        if (driver !== undefined) await killTaskCgroups(driver, task.allocId);
        throw failedPrecondition(
          `recover task ${task.id}: cannot reattach to its executor (pid ${executor.pid}): ${(err as Error).message}${killed ? `; its task (pid ${driver.pid}) was killed` : ""}`,
        );
      }
      const state: RawExecState = driver ?? { startedAt: new Date().toISOString(), pid: 0 };
      tasks.set(task.id, new RawExecTask(task.id, exe, state, task.allocId));
      ctx.events.emit({ taskId: task.id, message: `Reattached to executor ${executor.pid} (task pid ${state.pid})` });
    },

    // The SDK answers a WaitTask Nomad gave up on by itself; the exit promise need not watch ctx.signal.
    async waitTask(taskId) {
      return get(taskId).exited;
    },

    async stopTask(taskId, { signal, timeoutMs }) {
      const t = get(taskId);
      // The executor sends the signal, waits up to the timeout, then SIGKILLs the process group;
      // the pending Wait reports the exit.
      if (!t.exit) await t.exe.shutdownTask(signal, timeoutMs);
      await t.exited;
    },

    async destroyTask(taskId, { force }) {
      const t = get(taskId);
      if (!t.exit && !force) throw failedPrecondition(`cannot destroy running task ${taskId}: stop it first or use force`);
      if (isProcessAlive(t.exe.pid)) {
        // Kill the task (if still running) and anything it left in its process group, then the executor.
        await t.exe.shutdownTask("SIGKILL", 0).catch(() => undefined);
        await t.exe.kill();
      } else {
        killOrphanedTask(t.state, t.allocId);
        await killTaskCgroups(t.state, t.allocId);
      }
      t.detach();
      tasks.delete(taskId);
    },

    inspectTask(taskId) {
      const t = get(taskId);
      return {
        state: t.exit ? "exited" : "running",
        startedAt: t.startedAt,
        completedAt: t.exit?.at,
        exit: t.exit,
        attributes: { pid: String(t.state.pid), executor_pid: String(t.exe.pid) },
      };
    },

    async signalTask(taskId, signal) {
      const t = get(taskId);
      if (t.exit) throw failedPrecondition(`task ${taskId} has already exited`);
      await t.exe.client.signal({ signal: signalNumber(signal) });
    },

    async execTask(taskId, command, { timeoutMs, signal }) {
      const t = get(taskId);
      const deadline = timeoutMs > 0 ? Date.now() + timeoutMs : undefined;
      const res = await t.exe.client
        .exec(
          {
            cmd: command[0]!,
            args: command.slice(1),
            deadline: deadline === undefined ? undefined : { seconds: BigInt(Math.floor(deadline / 1000)), nanos: (deadline % 1000) * 1e6 },
          },
          { signal },
        )
        .catch((err: unknown) => Promise.reject(executorGone(t, err)));
      // The executor interleaves stdout and stderr, as Nomad's raw_exec does.
      return { stdout: res.output, stderr: new Uint8Array(), exitCode: res.exitCode };
    },

    execTaskStreamingRaw(stream) {
      // The executor starts the command in the task's context; without a tty its output is handed
      // to this process to read (one hop to Nomad), otherwise relayed message for message.
      const t = get(stream.taskId);
      return forwardExecStream(stream, t.exe).catch((err: unknown) => Promise.reject(executorGone(t, err)));
    },

    async taskStats(taskId, ctx: TaskStatsContext<PluginConfig, TaskConfig>) {
      // The executor samples at the stream's interval, so CPU percent covers all of it.
      return get(taskId).stats.next(ctx);
    },

    async createNetwork(allocId, hostname) {
      return networks().create(allocId, hostname);
    },

    async destroyNetwork(allocId, spec) {
      await networks().destroy(allocId, spec);
    },

    shutdown() {
      // Tasks keep running under their executors; Nomad recovers them after the restart.
      for (const t of tasks.values()) t.detach();
      tasks.clear();
    },
  });
}
