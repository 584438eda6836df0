import type { PluginLogger } from "@nomadkit/client";

/** Outcome of one check. */
export type CheckStatus = "pass" | "fail" | "skip";

/** One row of the conformance report. */
export interface CheckResult {
  /** Stable identifier, e.g. `exec-streaming-tty` (usable with {@link ConformanceOptions.checks}). */
  name: string;
  /** One-line description of what the check proves. */
  title: string;
  /** PASS, FAIL, or SKIP (not applicable, or a check it needs did not pass). */
  status: CheckStatus;
  /** Wall time of the check in milliseconds (informational only; no check asserts on it). */
  durationMs: number;
  /** What was observed: details on success, the reason on failure or skip. */
  message: string;
}

/** Everything {@link runConformance} found. */
export interface ConformanceReport {
  /** The plugin command line that was tested. */
  plugin: string;
  /** One row per check that ran or was skipped, in run order. */
  results: CheckResult[];
  /** Number of passed checks. */
  passed: number;
  /** Number of failed checks. */
  failed: number;
  /** Number of skipped checks. */
  skipped: number;
  /** True when no check failed and the run was not interrupted. */
  ok: boolean;
  /** True when {@link ConformanceOptions.abortSignal} stopped the run before every check ran. */
  interrupted: boolean;
  /** Wall time of the whole run in milliseconds. */
  durationMs: number;
}

/** Options of {@link runConformance}. */
export interface ConformanceOptions {
  /** Path of the plugin executable, as it would sit in Nomad's `plugin_dir`. */
  plugin: string;
  /** Arguments for the plugin (Nomad passes none). */
  args?: readonly string[];
  /** Extra environment for the plugin processes. */
  env?: NodeJS.ProcessEnv;
  /**
   * The plugin's agent config (the `plugin "<name>" { config { ... } }` block) as JSON. Encoded as
   * msgpack shaped by the plugin's ConfigSchema, like Nomad does (missing attributes become their
   * default or null). Default `{}`.
   */
  pluginConfig?: Record<string, unknown>;
  /**
   * A task's `config { ... }` block as JSON; the task must keep running until stopped. Default: a
   * raw_exec-style `{ command: "/bin/sh", args: ["-c", <loop>] }` whose output the suite also uses
   * to prove that the task survives a plugin restart, receives signals and dies when stopped.
   */
  taskConfig?: Record<string, unknown>;
  /** Shell used inside tasks for the exec vectors (`<shell> -c <script>`); default `/bin/sh`. */
  execShell?: string;
  /**
   * The first signal the signal-task check sends; default `SIGHUP`, or `SIGCONT` with a custom
   * `taskConfig`. To the default task it then sends SIGUSR1 and SIGUSR2 too: the task traps each and
   * prints which one it got, and each must arrive as itself. With a custom `taskConfig` only this
   * signal is sent, and only SignalTask's success is checked (the task's output is not known); the
   * task must survive it, since the checks after it need it running (SIGCONT changes nothing for a
   * running process, where SIGHUP ends one that does not trap it).
   */
  signal?: string;
  /**
   * `user` of the tasks (Nomad's task `user`); default none. The start-task check then reads the
   * default task's uid, gid and groups from /proc and wants the user's (`id -u/-g/-G`), unless the
   * driver isolates the filesystem.
   */
  user?: string;
  /**
   * Make TaskEvents required: the `task-events` check then fails unless the driver sends at least
   * one TaskEvent (on a stream Nomad can route: task_id, alloc_id, task_name of a task it runs), and
   * fails an Unimplemented TaskEvents instead of skipping. When the run started no task (a selection
   * of checks without start-task), the check starts one of its own; it waits up to `callTimeoutMs`
   * for the first event. Default false: Nomad accepts a driver that never sends one.
   */
  requireTaskEvents?: boolean;
  /** Expected plugin name (the job's `driver = "..."`); default: any non-empty name. */
  name?: string;
  /** Run only these checks (and the checks they depend on); the rest are skipped. */
  checks?: readonly string[];
  /** Deadline of each RPC in ms; default 30000. */
  callTimeoutMs?: number;
  /**
   * Upper bound of one check in ms; default 120000. A check that reaches it fails and is stopped:
   * its calls in flight are cancelled, it makes no further call, and the tasks it started are
   * destroyed (force) before the next check runs.
   */
  checkTimeoutMs?: number;
  /** How long the first Fingerprint may take, in ms; default 10000 ("promptly"). */
  fingerprintTimeoutMs?: number;
  /** How long a plugin may take to exit after GRPCController.Shutdown before SIGKILL; default 2000 (Nomad's). */
  shutdownTimeoutMs?: number;
  /** Directory for the allocation directories the suite creates; default the OS temp dir. */
  workDir?: string;
  /**
   * Create each task's cgroup before StartTask and name it in `resources.linux_resources.cpuset_cgroup`,
   * as Nomad's client (>= 1.7) does (`createTaskCgroup` of `@nomadkit/client`); it is removed after
   * the check that destroyed the task, or in cleanup. Default true. Where cgroups cannot be made
   * (not root, a read-only or missing cgroup filesystem) tasks start without one and the
   * `start-task` row says why.
   */
  taskCgroup?: boolean;
  /** Parent of the tasks' cgroups; default `nomadkit.slice` (cgroup v2) or `nomadkit` (v1), apart from a Nomad agent's. */
  cgroupParent?: string;
  /**
   * The tasks' `cpu` in MHz (cpu_shares, NOMAD_CPU_LIMIT); default 100, Nomad's. Not with `cores`:
   * Nomad refuses a task that asks for both.
   */
  cpuMhz?: number;
  /** The tasks' `memory` in MB (NOMAD_MEMORY_LIMIT), at least 10, Nomad's minimum; default 128. */
  memoryMb?: number;
  /**
   * The tasks' `memory_max` in MB (memory oversubscription: the hard limit, NOMAD_MEMORY_MAX_LIMIT),
   * not below `memoryMb` (Nomad refuses that); -1 for no hard limit. Default none.
   */
  memoryMaxMb?: number;
  /**
   * CPUs every task reserves (`resources { cores = N }`, as the scheduler picked them); default none.
   * Each task then gets its own cpuset cgroup in Nomad's reserve partition and
   * `linux_resources.cpuset_cpus` (see `createTaskCgroup`'s `cores`), so they need the task cgroups:
   * refused with `taskCgroup: false`, and a task fails to start, saying why, where the host cannot
   * make its cgroup.
   *
   * @example
   * ```ts
   * await runConformance({ plugin: "./bin/my-driver", cores: [1], memoryMb: 256, memoryMaxMb: 512 });
   * ```
   */
  cores?: readonly number[];
  /** How long to wait for each plugin's go-plugin handshake, in ms; default 60000 (go-plugin's). */
  startTimeoutMs?: number;
  /** Talk go-plugin AutoMTLS (`PLUGIN_CLIENT_CERT`) as non-Nomad hosts do; default false, like Nomad. */
  autoMTLS?: boolean;
  /** Receives every log line of the plugin processes (hclog stderr, parsed). */
  logger?: PluginLogger;
  /** Called after each check, e.g. to print progress. */
  onResult?(result: CheckResult): void;
  /**
   * Stops the run early (Ctrl-C in a CLI): the running check is abandoned, no further check runs,
   * and everything the suite started is cleaned up as at the end; the report then lists the checks
   * that finished and has `interrupted` set.
   */
  abortSignal?: AbortSignal;
}

/** Every check the suite knows, in run order, with its one-line title. */
export interface CheckInfo {
  /** Identifier, as used in {@link ConformanceOptions.checks}. */
  name: string;
  /** What the check proves. */
  title: string;
  /** Checks that must pass first. */
  needs: readonly string[];
}
