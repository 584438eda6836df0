import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { constants, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  createTaskCgroup,
  createTaskDirs,
  formatCpuList,
  launchPlugin,
  nomadAgentConfig,
  nomadTaskConfig,
  openTaskLogs,
  removePluginSocketDir,
  type CallOptions,
  type PluginClient,
  type PluginExit,
  type TaskCgroup,
  TaskCgroupUnavailableError,
  type TaskLogs,
} from "@nomadkit/client";
import type { PluginInfoResponse } from "@nomadkit/protocol/base";
import {
  DriverCapabilities_FSIsolation,
  TaskState,
  type DriverCapabilities,
  type DriverTaskEvent,
  type InspectTaskResponse,
  type NetworkIsolationSpec,
  type TaskConfigSchema,
  type TaskHandle,
  type WaitTaskResponse,
} from "@nomadkit/protocol/driver";
import type { Spec } from "@nomadkit/protocol/hclspec";
import { ConfigRefusedError, encodeCheckedConfig } from "./config.js";
import type { ConformanceOptions } from "./types.js";
import { LostOutput, describe, descendants, hasProc, isUnimplemented, killProcess, procInfo, processGone, waitUntil } from "./util.js";
import { anySignal } from "@nomadkit/client/runtime";
import { inPluginSocketDir, unixSocketPaths } from "./exit-cleanup.js";

/** Options with every default applied. */
export interface ResolvedOptions extends ConformanceOptions {
  args: readonly string[];
  pluginConfig: Record<string, unknown>;
  execShell: string;
  signal: string;
  callTimeoutMs: number;
  checkTimeoutMs: number;
  fingerprintTimeoutMs: number;
  shutdownTimeoutMs: number;
}

/**
 * The tasks' memory in MB without `memoryMb`: small, as many tasks may run at once.
 *
 * @example
 * ```ts
 * await runConformance({ plugin, memoryMaxMb: DEFAULT_MEMORY_MB * 2 });
 * ```
 */
export const DEFAULT_MEMORY_MB = 128;

/** Marker lines of the default task (see {@link defaultTaskConfig}). */
export const START_MARKER = "conformance-start";
export const TICK_MARKER = "conformance-tick";
export const SIGNAL_MARKER = "conformance-signal";

/**
 * The signals the signal-task check sends to the default task, as SignalTask names them: `signal`
 * (the `signal` option) and SIGUSR1 and SIGUSR2, without repeats. Several, so a driver that sends
 * one fixed signal, or maps names to the wrong numbers, is caught; the two user signals, so Linux
 * numbers confused with another system's (10/12 against 30/31) show.
 */
export function defaultTaskSignals(signal: string): string[] {
  const names = [signalToken(signal), "USR1", "USR2"];
  return [...new Set(names)].map((n) => (/^\d+$/.test(n) ? n : `SIG${n}`));
}

/** How the default task's trap (and its marker line) names a signal: `HUP` for `SIGHUP`, `hup` or `1`. */
export function signalToken(signal: string): string {
  const t = signal.trim().toUpperCase().replace(/^SIG/, "");
  if (!/^\d+$/.test(t)) return t;
  const name = Object.entries(constants.signals).find(([, n]) => n === Number(t))?.[0];
  return name ? name.replace(/^SIG/, "") : t;
}

/**
 * The default task: a shell loop that prints its pid once, a tick ten times a second, and a line
 * `conformance-signal <NAME>` for each signal the signal-task check sends it (trapped, so the task
 * survives them and says which one it got): `signal`, SIGUSR1 and SIGUSR2.
 *
 * @example
 * ```ts
 * defaultTaskConfig("/bin/sh", "SIGHUP");
 * // { command: "/bin/sh", args: ["-c", "trap 'echo conformance-signal HUP' HUP; trap 'echo conformance-signal USR1' USR1; ..."] }
 * ```
 */
export function defaultTaskConfig(shell: string, signal: string): Record<string, unknown> {
  const traps = defaultTaskSignals(signal)
    .map(signalToken)
    .map((t) => `trap 'echo ${SIGNAL_MARKER} ${t}' ${t}; `)
    .join("");
  return {
    command: shell,
    args: [
      "-c",
      `${traps}echo "${START_MARKER} $$"; i=0; ` + `while :; do i=$((i+1)); echo "${TICK_MARKER} $i"; sleep 0.1; done`,
    ],
  };
}

/**
 * A task that ignores the usual stop signals (INT, TERM, HUP: the drivers' defaults when the job
 * sets no kill_signal): only the kill after StopTask's timeout ends it. It prints its pid as the
 * default task does.
 */
export function stubbornTaskConfig(shell: string): Record<string, unknown> {
  return { command: shell, args: ["-c", `trap '' INT TERM HUP; echo "${START_MARKER} $$"; while :; do sleep 0.1; done`] };
}

/**
 * A task that keeps one core busy until destroyed, in user and in kernel mode (a builtin `echo` to
 * /dev/null opens, writes and closes: system calls), for the task-stats check's CPU use. It prints
 * its pid as the default task does, and a tick now and then: once nobody reads its output (the
 * suite is gone) the write fails and ends it, so it never spins on unattended.
 */
export function burnTaskConfig(shell: string): Record<string, unknown> {
  return {
    command: shell,
    args: [
      "-c",
      `echo "${START_MARKER} $$"; while :; do i=0; while [ $i -lt 2000 ]; do i=$((i+1)); echo x >/dev/null; done; echo ${TICK_MARKER}; done`,
    ],
  };
}

/** A task the suite started. */
export interface SuiteTask {
  id: string;
  name: string;
  allocId: string;
  allocDir: string;
  /** The output FIFOs the driver was given (TaskConfig.stdout_path, stderr_path). */
  stdoutPath: string;
  stderrPath: string;
  /** What was read from them, as Nomad's logmon reads them. */
  logs: TaskLogs;
  /** The cgroup made for it, as Nomad's client makes one (TaskConfig.resources.linux_resources.cpuset_cgroup). */
  cgroup?: TaskCgroup | undefined;
  config: MessageInitShape<typeof TaskConfigSchema>;
  handle?: TaskHandle;
  startedAt?: Date | undefined;
  /** A WaitTask call in flight (resolves with the response or the error). */
  waiting?: Promise<WaitTaskResponse | Error>;
  destroyed: boolean;
}

/** How a plugin process the suite stopped ended. */
export interface KillRecord {
  label: string;
  exit: PluginExit;
  ms: number;
}

/** How long cleanupSync may spend on the tasks' cgroups, all of them together. */
const EXIT_CGROUPS_MS = 300;

const FS_ISOLATION: Partial<Record<DriverCapabilities_FSIsolation, "none" | "chroot" | "image" | "unveil">> = {
  [DriverCapabilities_FSIsolation.NONE]: "none",
  [DriverCapabilities_FSIsolation.CHROOT]: "chroot",
  [DriverCapabilities_FSIsolation.IMAGE]: "image",
  [DriverCapabilities_FSIsolation.UNVEIL]: "unveil",
};

/** State shared by the checks of one run. */
export class Suite {
  readonly root: string;
  readonly plugins: PluginClient[] = [];
  readonly kills: KillRecord[] = [];
  readonly tasks: SuiteTask[] = [];
  readonly networks = new Map<string, NetworkIsolationSpec | undefined>();
  /** Whether the default task config is in use (its output markers are then checked). */
  readonly defaultTask: boolean;
  /**
   * The running check's signal, in the check's view of the suite (`checkView`): it fires when the
   * check times out, is interrupted or ends. Never aborted on the suite itself (cleanup's calls).
   */
  readonly signal: AbortSignal = new AbortController().signal;
  /** Name of the check being run. */
  current = "";
  /** The FIFOs whose output after EOF a check's result reported (once is enough). */
  readonly lateReported = new Set<string>();
  /** Plugins the suite stopped on purpose. */
  private readonly intentional = new Set<PluginClient>();
  /** Plugins that died on their own: during which check, and how. */
  readonly deaths = new Map<PluginClient, { during: string; exit: PluginExit }>();
  /** When each plugin was launched (epoch ms), to recognise the socket directory it made. */
  /** Aborted when cleanup begins: launches in flight give up, and no plugin or task starts after. */
  private readonly closing = new AbortController();
  /** Launches and StartTask calls in flight; cleanup waits for them before it looks at what exists. */
  private readonly inflight = new Set<Promise<unknown>>();
  /**
   * Processes of the run's tasks (and of the drivers' helpers, such as executors) for the last-resort
   * kill: pid -> start time (clock ticks since boot; undefined without /proc), so a reused pid is
   * never mistaken for one of them.
   */
  private readonly known = new Map<number, number | undefined>();
  /** Tasks whose cgroup releaseCgroups has tried to remove. */
  private readonly released = new Set<SuiteTask>();
  /** Start time of the earliest plugin process: no process of the run started before it. */
  private floor: number | undefined;

  load?: PluginClient;
  run?: PluginClient;
  info?: PluginInfoResponse;
  configSpec?: Spec | undefined;
  taskSpec?: Spec | undefined;
  caps?: DriverCapabilities | undefined;
  main?: SuiteTask;
  firstFingerprint?: Promise<{ health: number; description: string; attributes: number } | Error>;
  /** Fingerprint responses received, over every run plugin. */
  fingerprints = 0;
  /** What the TaskEvents streams sent (the first hundred events are kept for the check). */
  events = { count: 0, list: [] as DriverTaskEvent[], unimplemented: false };
  /**
   * How a long-lived stream ended or failed while its plugin was meant to run: Nomad keeps both open
   * for the plugin's whole life, and takes an end or an error of Fingerprint as a lost driver.
   */
  readonly streamFaults: { stream: "Fingerprint" | "TaskEvents"; message: string }[] = [];
  /** Why tasks get no cgroup (set once creating one failed, or taskCgroup is false); undefined while they get one. */
  noCgroup?: string;

  constructor(readonly opts: ResolvedOptions) {
    this.root = mkdtempSync(join(opts.workDir ?? tmpdir(), "nomadkit-conformance-"));
    this.defaultTask = opts.taskConfig === undefined;
    if (opts.taskCgroup === false) this.noCgroup = "turned off: taskCgroup false, --no-task-cgroup";
  }

  /** Per-call options: the call deadline and the check's abort signal. */
  co(extra: CallOptions = {}): CallOptions {
    return { timeoutMs: this.opts.callTimeoutMs, signal: this.signal, ...extra };
  }

  /**
   * Starts a plugin process exactly as Nomad does. The launch is given up (the process killed) when
   * the check is abandoned (timeout, interruption) or cleanup begins; once cleanup has begun no
   * plugin is started any more.
   */
  async launch(): Promise<PluginClient> {
    this.refuseWhenClosing("start a plugin");
    return this.track(this.spawn(anySignal([this.signal, this.closing.signal])));
  }

  private async spawn(signal?: AbortSignal): Promise<PluginClient> {
    const o = this.opts;
    const p = await launchPlugin(o.plugin, o.args, {
      env: o.env,
      logger: o.logger,
      killTimeoutMs: o.shutdownTimeoutMs,
      startTimeoutMs: o.startTimeoutMs,
      autoMTLS: o.autoMTLS,
      signal,
    });
    this.plugins.push(p);
    const info = procInfo(p.pid);
    if (info) this.floor = Math.min(this.floor ?? info.start, info.start);
    void p.exited.then((exit) => {
      if (!this.intentional.has(p)) this.deaths.set(p, { during: this.current, exit });
    });
    return p;
  }

  /** Registers an operation that may start something, so cleanup can wait for it. */
  private track<T>(op: Promise<T>): Promise<T> {
    this.inflight.add(op);
    const done = () => void this.inflight.delete(op);
    op.then(done, done);
    return op;
  }

  /**
   * An abandoned check that goes on after cleanup began must not start anything cleanup misses, nor
   * one that goes on after it ended anything the runner's destroy of its tasks misses.
   */
  private refuseWhenClosing(what: string): void {
    if (this.closing.signal.aborted) throw new Error(`the run is over: the suite does not ${what} any more`);
    if (this.signal.aborted) throw new Error(`the check is over: it does not ${what} any more`);
  }

  /**
   * Records the processes under a live plugin (its tasks, executors, helpers) while they can still
   * be told apart as its descendants: a plugin that dies leaves them to init.
   */
  rememberProcesses(p: PluginClient): void {
    if (p.exitSignal.aborted) return;
    for (const [pid, info] of descendants(p.pid)) this.known.set(pid, info.start);
  }

  /** Records a pid a plugin or a task reported for a task of the run (verified with /proc when possible). */
  learnPid(pid: number): void {
    if (!Number.isSafeInteger(pid) || pid <= 1 || pid === process.pid || pid === process.ppid) return;
    // Without /proc nothing tells a reused pid apart: no last-resort kill then.
    if (!hasProc) return;
    const info = procInfo(pid);
    // Only a process that started during the run can be one of the run's.
    if (!info || this.floor === undefined || info.start < this.floor) return;
    this.known.set(pid, info.start);
  }

  /**
   * Pids in InspectTask's driver attributes (`pid`, `executor_pid`: Nomad's exec drivers report
   * them), of a running task only: an exited task's pid may be another process's by now.
   */
  learnFromInspect(r: InspectTaskResponse): void {
    if (r.task?.state !== TaskState.RUNNING) return;
    for (const [key, value] of Object.entries(r.driver?.attributes ?? {})) {
      if (/(^|[_.-])pid$/i.test(key) && /^\d+$/.test(value.trim())) this.learnPid(Number(value));
    }
  }

  /**
   * SIGKILLs the processes of the run the suite knows of that no live plugin of the suite has
   * under it any more (orphans of dead plugins; after the last plugin exited, all of them).
   * Returns how many it killed.
   */
  killOrphans(): number {
    const keep = new Set<number>();
    for (const p of this.plugins) {
      if (p.exitSignal.aborted) continue;
      keep.add(p.pid);
      for (const pid of descendants(p.pid).keys()) keep.add(pid);
    }
    let n = 0;
    for (const [pid, start] of this.known) {
      if (keep.has(pid) || processGone(pid)) continue;
      const info = procInfo(pid);
      // Same pid, another process: the one the suite knew is gone.
      if (start !== undefined && info?.start !== start) continue;
      killProcess(pid, info === undefined || info.pgid === pid);
      n++;
    }
    return n;
  }

  /** Marks a plugin as stopped on purpose (its exit is not a crash). */
  expectExit(p: PluginClient): void {
    this.intentional.add(p);
  }

  /** Why the running plugin is gone, for messages. */
  whyGone(p: PluginClient | undefined): string {
    const d = p && this.deaths.get(p);
    if (!d) return "the plugin process is not running";
    const how = d.exit.signal ? `on signal ${d.exit.signal}` : `with status ${d.exit.code}`;
    const lines = p.recentStderr().split("\n").map((l) => l.trim()).filter(Boolean);
    const errors = lines.filter((l) => /error|panic|exception|fatal/i.test(l));
    const tail = (errors.length > 0 ? errors : lines).slice(-2).join(" | ");
    return `the plugin process exited ${how} during ${d.during}${tail ? `; last log lines: ${tail}` : ""}`;
  }

  /** Stops a plugin like Nomad (GRPCController.Shutdown, wait, SIGKILL) and records how it went. */
  async kill(p: PluginClient, label: string): Promise<KillRecord> {
    const t0 = performance.now();
    this.rememberProcesses(p);
    this.expectExit(p);
    const exit = await p.kill();
    const rec = { label, exit, ms: performance.now() - t0 };
    this.kills.push(rec);
    return rec;
  }

  /** The plugin config as Nomad would encode it for this plugin's schema. */
  pluginConfigBytes(): Uint8Array {
    // A config that does not fit tests the operator's input, not the plugin (which would ignore a
    // mistyped key): the check fails saying so, as Nomad would refuse it.
    return encodeCheckedConfig(
      this.configSpec,
      this.opts.pluginConfig,
      "the plugin config (pluginConfig, --plugin-config) does not fit the plugin's ConfigSchema",
    );
  }

  /** SetConfig as Nomad's "run" dispense sends it. */
  async setConfig(p: PluginClient): Promise<void> {
    await p.basePlugin.setConfig(
      {
        msgpackConfig: this.pluginConfigBytes(),
        pluginApiVersion: "v0.1.0",
        nomadConfig: nomadAgentConfig(),
      },
      this.co(),
    );
  }

  /** Init; Unimplemented counts as success, as in Nomad. */
  async init(p: PluginClient): Promise<string> {
    try {
      await p.driver.init({}, this.co());
      return "ok";
    } catch (err) {
      if (isUnimplemented(err)) return "unimplemented (accepted)";
      throw err;
    }
  }

  /**
   * Opens the two long-lived streams Nomad keeps on a driver, Fingerprint (the first response is
   * remembered) and TaskEvents, and reads them for the plugin's whole life. An end or an error
   * before the suite stops the plugin (Shutdown, kill, cleanup) is recorded in `streamFaults`; one
   * caused by that stop is the stream ending with its plugin, as it must.
   */
  openStreams(p: PluginClient): void {
    const fault = (stream: "Fingerprint" | "TaskEvents", err?: unknown) => {
      if (this.intentional.has(p) || this.closing.signal.aborted) return;
      const how = err === undefined ? "ended" : "failed";
      this.streamFaults.push({ stream, message: `the ${stream} stream ${how} during ${this.current}${err === undefined ? "" : `: ${describe(err)}`}` });
    };
    let first!: (r: { health: number; description: string; attributes: number } | Error) => void;
    this.firstFingerprint = new Promise((res) => (first = res));
    void (async () => {
      let n = 0;
      try {
        for await (const r of p.driver.fingerprint({}, { signal: p.exitSignal })) {
          this.fingerprints++;
          if (n++ === 0) first({ health: r.health, description: r.healthDescription, attributes: Object.keys(r.attributes).length });
        }
        first(new Error("the Fingerprint stream ended without a response"));
        fault("Fingerprint");
      } catch (err) {
        first(err instanceof Error ? err : new Error(String(err)));
        fault("Fingerprint", err);
      }
    })();
    void (async () => {
      try {
        for await (const e of p.driver.taskEvents({}, { signal: p.exitSignal })) {
          this.events.count++;
          if (this.events.list.length < 100) this.events.list.push(e);
        }
        fault("TaskEvents");
      } catch (err) {
        if (isUnimplemented(err)) this.events.unimplemented = true;
        else fault("TaskEvents", err);
      }
    })();
  }

  /** Creates an allocation directory and the TaskConfig Nomad would send for a new task. */
  newTask(name: string, opts: { allocId?: string; network?: NetworkIsolationSpec | undefined; taskConfig?: Record<string, unknown> } = {}): SuiteTask {
    // Cleanup closes the readers of the tasks it knows: none may be opened after it.
    this.refuseWhenClosing("start a task");
    const allocId = opts.allocId ?? randomUUID();
    const dirs = createTaskDirs(join(this.root, allocId), name);
    const allocDir = dirs.allocDir;
    const taskConfig = opts.taskConfig ?? this.opts.taskConfig ?? defaultTaskConfig(this.opts.execShell, this.opts.signal);
    // Without the user's taskConfig the task is the default shell loop (or a check's variant of it):
    // a driver whose tasks are not {command, args} is not at fault, it needs a task of its own.
    const given = this.opts.taskConfig !== undefined;
    const source = given
      ? "the task config (taskConfig, --task-config) does not fit the plugin's TaskConfigSchema"
      : `the default task config (${JSON.stringify({ command: this.opts.execShell, args: ["-c"] }).replace(/\]\}$/, ",<loop>]}")}) does not fit the plugin's TaskConfigSchema`;
    let msgpackDriverConfig: Uint8Array;
    try {
      msgpackDriverConfig = encodeCheckedConfig(this.taskSpec, taskConfig, source);
    } catch (err) {
      if (!given && err instanceof ConfigRefusedError) err.message += "; give a long-running task this driver accepts with taskConfig (--task-config)";
      throw err;
    }
    // Logmon's FIFOs, read from before StartTask until EOF: a driver must open them for writing
    // (a regular file would let it reopen, truncate or seek). What comes after EOF is reported by
    // the check during which it is noticed (lostOutput).
    const cgroup = this.taskCgroup(allocId, name);
    let logs: TaskLogs;
    try {
      logs = openTaskLogs(dirs, name);
    } catch (err) {
      cgroup?.destroySync();
      throw err;
    }
    const { stdoutPath, stderrPath } = logs;
    const config = nomadTaskConfig({
      name,
      dirs,
      allocId,
      msgpackDriverConfig,
      stdoutPath,
      stderrPath,
      jobName: "conformance",
      groupName: "conformance",
      user: this.opts.user ?? "",
      cpuMhz: this.opts.cpuMhz,
      memoryMb: this.opts.memoryMb ?? DEFAULT_MEMORY_MB,
      memoryMaxMb: this.opts.memoryMaxMb,
      // The cgroup's list: the task config and the cgroup name the same CPUs.
      cores: cgroup?.cores,
      networkIsolation: opts.network,
      // As Nomad's task dir hook: the directories as the driver shows them to its task.
      fsIsolation: FS_ISOLATION[this.caps?.fsIsolation ?? DriverCapabilities_FSIsolation.NONE] ?? "none",
      cpusetCgroup: cgroup?.path,
      cgroupParent: cgroup?.parent,
    });
    const id = config.id;
    const task: SuiteTask = { id, name, allocId, allocDir, stdoutPath, stderrPath, logs, cgroup, config, destroyed: false };
    this.tasks.push(task);
    return task;
  }

  /**
   * The task's cgroup, as Nomad's client makes it before StartTask; none when the option is off or
   * this host does not allow it (the first refusal is remembered, not retried for every task).
   */
  private taskCgroup(allocId: string, task: string): TaskCgroup | undefined {
    const cores = this.opts.cores ?? [];
    // Reserved cores are a cpuset cgroup of the task's own: a task without one would not have them.
    const needed = (why: string) => new Error(`cores ${formatCpuList(cores)}: reserved cores need the task's cgroup, which this host cannot make: ${why}`);
    if (this.noCgroup !== undefined) {
      if (cores.length > 0) throw needed(this.noCgroup);
      return undefined;
    }
    try {
      return createTaskCgroup({ allocId, task, parent: this.opts.cgroupParent, cores });
    } catch (err) {
      if (!(err instanceof TaskCgroupUnavailableError)) throw err;
      this.noCgroup = err.reason;
      if (cores.length > 0) throw needed(err.reason);
      return undefined;
    }
  }

  /**
   * The last resort when this process ends mid-run (a test runner's teardown): synchronously, as
   * an "exit" listener must, SIGKILLs the live plugins, every process under them and the processes
   * the suite knows of, removes the tasks' cgroups (and the parent levels the run made, left
   * empty), the socket directories of the dead go-plugin servers and the temp dir.
   */
  cleanupSync(): void {
    const victims = new Map<number, number | undefined>(this.known);
    for (const p of this.plugins) {
      if (p.exitSignal.aborted) continue;
      victims.set(p.pid, procInfo(p.pid)?.start);
      for (const [pid, info] of descendants(p.pid)) victims.set(pid, info.start);
    }
    for (const t of this.tasks) for (const pid of t.cgroup?.pids() ?? []) victims.set(pid, procInfo(pid)?.start);
    victims.delete(process.pid);
    const live = [...victims].filter(([pid, start]) => !processGone(pid) && (start === undefined || procInfo(pid)?.start === start));
    const sockets = unixSocketPaths(live.map(([pid]) => pid));
    for (const [pid] of live) {
      const info = procInfo(pid);
      // A plugin shares this process's group: only a group the process leads is killed whole.
      killProcess(pid, info !== undefined && info.pgid === pid && info.pgid !== procInfo(process.pid)?.pgid);
    }
    // The killed stay in their cgroups until the kernel is done with them: destroySync kills again
    // and retries, with the parent levels the run made. One bound for all, well inside a test
    // runner's grace between SIGTERM and SIGKILL (vitest's is 500 ms).
    // A first pass kills in every cgroup and removes what it can at once, so that one slow
    // cgroup cannot take the others' share of the time.
    const until = Date.now() + EXIT_CGROUPS_MS;
    for (const pass of [0, 1]) {
      for (const t of this.tasks) {
        if (t.cgroup === undefined) continue;
        try {
          t.cgroup.destroySync({ timeoutMs: pass === 0 ? 0 : Math.max(0, until - Date.now()) });
          t.cgroup = undefined;
        } catch {
          // a process that would not die in time: the other cgroups still go
        }
      }
    }
    const keep = [this.opts.env?.PLUGIN_UNIX_SOCKET_DIR, process.env.PLUGIN_UNIX_SOCKET_DIR, process.env.TMPDIR];
    const bases = this.plugins.filter((p) => p.network === "unix").map((p) => dirname(dirname(p.address)));
    for (const p of this.plugins) if (p.network === "unix") sockets.push(p.address);
    for (const socket of new Set(sockets)) if (inPluginSocketDir(socket, bases)) removePluginSocketDir(socket, 0, keep);
    rmSync(this.root, { recursive: true, force: true });
  }

  /**
   * Destroys a task's cgroup, forgetting it only once it is gone: a process ending mid-destroy
   * (cleanupSync) or a kill that failed leaves it for the next attempt.
   */
  private async destroyCgroup(t: SuiteTask): Promise<void> {
    const cg = t.cgroup;
    if (cg === undefined) return;
    try {
      await cg.destroy();
      if (t.cgroup === cg) t.cgroup = undefined;
    } catch {
      // left for cleanupSync, or the next cleanup
    }
  }

  /**
   * Removes the cgroups of the destroyed tasks, as Nomad's client does once a task is gone: after
   * the check that destroyed them, so that check saw what the driver alone did. What is left in
   * them is killed.
   */
  async releaseCgroups(): Promise<void> {
    for (const t of this.tasks) {
      // Once per task: one that failed (up to destroy's 10 s) waits for the final cleanup rather
      // than adding its time to every later check.
      if (!t.destroyed || !t.cgroup || this.released.has(t)) continue;
      this.released.add(t);
      await this.destroyCgroup(t);
    }
  }

  /** StartTask, then a WaitTask in the background, as Nomad's task runner does. */
  async startTask(p: PluginClient, task: SuiteTask): Promise<TaskHandle> {
    this.refuseWhenClosing("start a task");
    const res = await this.track(p.driver.startTask({ task: task.config }, this.co()));
    this.rememberProcesses(p);
    if (!res.handle) throw new Error("StartTask returned no handle");
    task.handle = res.handle;
    this.watch(p, task);
    // The default task prints its pid as it starts and then runs on: learn it (with its start time)
    // now, while it is certainly that task. Learned later, after the task ended, the pid could be
    // another process's.
    if (this.defaultTask) this.learnStartPid(task);
    return res.handle;
  }

  private learnStartPid(task: SuiteTask): void {
    const until = Date.now() + this.opts.callTimeoutMs;
    const poll = () => {
      const pid = this.startPids(task)[0];
      if (pid !== undefined) this.learnPid(pid);
      else if (Date.now() < until && !this.closing.signal.aborted) setTimeout(poll, 20).unref();
    };
    poll();
  }

  /** Starts a WaitTask call without a deadline (it blocks until the task exits). */
  watch(p: PluginClient, task: SuiteTask): void {
    task.waiting = p.driver
      .waitTask({ taskId: task.id }, { signal: p.exitSignal })
      .catch((err: unknown) => (err instanceof Error ? err : new Error(String(err))));
  }

  /** The task's stdout read so far. */
  stdout(task: SuiteTask): string {
    return task.logs.stdout();
  }

  /** Pids printed by the default task's start marker. */
  startPids(task: SuiteTask): number[] {
    const re = new RegExp(`^${START_MARKER} (\\d+)$`, "gm");
    return [...this.stdout(task).matchAll(re)].map((m) => Number(m[1]));
  }

  /** The signals the default task reported, in order (their trap names: `HUP`, `USR1`). */
  signalsReceived(task: SuiteTask): string[] {
    const re = new RegExp(`^${SIGNAL_MARKER} (\\S+)$`, "gm");
    return [...this.stdout(task).matchAll(re)].map((m) => m[1]!);
  }

  /** Waits for the default task's start marker and returns its pid. */
  async taskPid(task: SuiteTask): Promise<number> {
    await this.waitForOutput(task, () => this.startPids(task).length > 0, `the task's start line in ${task.logs.stdoutFile}`);
    return this.startPids(task)[0]!;
  }

  /**
   * Waits until `cond` holds of what the task wrote; fails at once (LostOutput) when some of its
   * output went to a FIFO after its EOF: what is waited for may be in it, and would never come.
   */
  async waitForOutput(task: SuiteTask, cond: () => boolean, what: string): Promise<void> {
    const ready = () => {
      if (cond()) return true;
      const lost = this.lostOutput([task]);
      if (lost) throw lost;
      return false;
    };
    await waitUntil(ready, what, this.opts.callTimeoutMs, this.signal);
  }

  /**
   * The output written to these tasks' FIFOs after their EOF that no check's result has reported
   * yet (read now), as the failure to report; undefined when there is none.
   */
  lostOutput(tasks: readonly SuiteTask[] = this.tasks): LostOutput | undefined {
    const late = tasks.flatMap((t) => t.logs.lateOutput()).filter((l) => !this.lateReported.has(l.fifo));
    if (late.length === 0) return undefined;
    return new LostOutput(
      late.map((l) => l.fifo),
      late.map((l) => l.message).join("; "),
    );
  }

  /** Waits until a pid is gone (or a zombie). */
  async pidGone(pid: number, what: string): Promise<void> {
    await waitUntil(() => processGone(pid), what, this.opts.callTimeoutMs, this.signal);
  }

  /** Size of a file, 0 when missing. */
  size(path: string): number {
    try {
      return statSync(path).size;
    } catch {
      return 0;
    }
  }

  /**
   * Best-effort cleanup, however the run ended: everything the suite started goes.
   *
   * 1. No plugin or task is started any more, and the launches and StartTask calls in flight (of a
   *    check abandoned by an interruption) end first: their plugin is killed, their task destroyed.
   * 2. Every task the suite started and did not destroy is destroyed (force) through the live run
   *    plugin; a task that plugin does not know is recovered into it first. When the run plugin is
   *    gone, a fresh one recovers the tasks and destroys them, as Nomad would.
   * 3. Networks are destroyed (through a fresh plugin too, when the run plugin is gone), every plugin
   *    process is stopped (Shutdown, then SIGKILL).
   * 4. Last resort, for tasks no plugin could destroy (a driver that cannot recover tasks that
   *    outlived their plugin): the processes the suite learned belong to the run are SIGKILLed —
   *    the plugins' descendants seen while they lived (Linux), pids from InspectTask's driver
   *    attributes and TaskStats, and the default task's own pid.
   * 5. The tasks' cgroups go (with what is left in them), then the socket directories of plugins
   *    that died without removing them, and the temp dir.
   */
  async cleanup(): Promise<void> {
    this.closing.abort();
    await Promise.allSettled([...this.inflight]);
    const quick: CallOptions = { timeoutMs: 10_000 };
    for (const pl of this.plugins) this.rememberProcesses(pl);
    let p = this.run && !this.run.exitSignal.aborted ? this.run : undefined;
    const leftovers = this.tasks.filter((t) => !t.destroyed);
    // Networks too: only a plugin destroys them (Nomad's network hook calls DestroyNetwork on the
    // plugin it restarts), and a plugin that died under StartTask left no task with a handle.
    if (!p && (leftovers.some((t) => t.handle) || this.networks.size > 0)) {
      try {
        p = await this.spawn();
        this.expectExit(p);
        await p.basePlugin.setConfig({ msgpackConfig: this.pluginConfigBytes(), pluginApiVersion: "v0.1.0" }, quick);
        await p.driver.init({}, quick).catch(() => undefined);
      } catch {
        // the plugin cannot even start: fall back to killing what we know
      }
    }
    for (const t of leftovers) {
      if (p && !p.exitSignal.aborted) await this.destroyOn(p, t, quick);
    }
    if (p && !p.exitSignal.aborted) {
      for (const [allocId, spec] of this.networks) {
        await p.driver.destroyNetwork({ allocId, isolationSpec: spec }, quick).catch(() => undefined);
      }
    }
    for (const pl of this.plugins) this.rememberProcesses(pl);
    await Promise.all(this.plugins.filter((pl) => !pl.exitSignal.aborted).map((pl) => pl.kill().catch(() => undefined)));
    // (@nomadkit/client removes the socket directory of each plugin it saw die.)
    this.killOrphans();
    // Like Nomad's client when a task is gone; it kills what no plugin or kill above ended.
    await Promise.all(
      this.tasks.map((t) => this.destroyCgroup(t)),
    );
    // The tasks are gone: what they wrote has been read.
    await Promise.all(this.tasks.map((t) => t.logs.close(0)));
    if (existsSync(this.root)) rmSync(this.root, { recursive: true, force: true });
  }

  /**
   * DestroyTask(force), through the run plugin while it lives, of the tasks a check made and left:
   * every one when the check did not finish (timed out), all but the run's main task otherwise (the
   * checks that follow use it). Each call has its own deadline, not the check's signal, which has
   * fired by now. What fails here is left to {@link cleanup}.
   */
  async destroyLeft(made: readonly SuiteTask[], finished: boolean): Promise<void> {
    const p = this.run;
    const quick: CallOptions = { timeoutMs: this.opts.callTimeoutMs };
    for (const t of made) {
      if (t.destroyed || (finished && t === this.main)) continue;
      if (!p || p.exitSignal.aborted || this.closing.signal.aborted) return;
      await this.destroyOn(p, t, quick);
    }
  }

  /** DestroyTask(force) through `p`; when `p` does not know the task, RecoverTask first. */
  private async destroyOn(p: PluginClient, t: SuiteTask, quick: CallOptions): Promise<void> {
    const destroy = async () => {
      const r = await p.driver.inspectTask({ taskId: t.id }, quick).catch(() => undefined);
      if (r) this.learnFromInspect(r);
      await p.driver.destroyTask({ taskId: t.id, force: true }, quick);
      t.destroyed = true;
    };
    try {
      await destroy();
      return;
    } catch {
      // not known to this plugin (or it failed): recover it first
    }
    if (!t.handle) return;
    try {
      await p.driver.recoverTask({ taskId: t.id, handle: t.handle }, quick);
      await destroy();
    } catch {
      // the last resort in cleanup() ends its processes
    }
  }
}
