/**
 * The driver authoring interface: what a TypeScript task driver implements. The SDK turns it into
 * Nomad's BasePlugin and Driver gRPC services (see `createDriverHandlers` / `serveDriver`).
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { NomadConfig } from "@nomadkit/protocol/base";
import type {
  CPUUsageSchema,
  DriverCapabilitiesSchema,
  FingerprintResponse_HealthState,
  MemoryUsageSchema,
  NetworkIsolationSpec,
  NetworkIsolationSpecSchema,
  NetworkOverrideSchema,
  TaskConfig,
  TaskHandle,
  TaskResourceUsageSchema,
  TaskState,
  TaskStats,
  TaskStatsSchema,
} from "@nomadkit/protocol/driver";
import type { HclSpec } from "../config/spec.js";
import type { ExecResult, ExecSession, ExecTaskStream } from "../exec/session.js";
import type { Logger } from "../log/index.js";
import type { HostCompute } from "../stats/host.js";
import { checkDriverMethods } from "./check-methods.js";

/** A task as `startTask` sees it: Nomad's `TaskConfig` plus its decoded, checked `config` block. */
export type DriverTask<TC> = TaskConfig & {
  /** The task's `config { ... }` block, decoded with the driver's `taskConfigSchema`. */
  readonly driverConfig: TC;
};

/** What `startTask` returns; everything is optional. */
export interface StartTaskResult {
  /**
   * State needed to re-attach after a restart (a pid, a container id, an executor address). Bytes
   * are stored as they are; anything else is stored as JSON. Nomad persists it in the task handle
   * and hands it back to `recoverTask`.
   */
  driverState?: unknown;
  /** Version of the `driverState` format (TaskHandle.version). Default 1. */
  handleVersion?: number;
  /** Address and port mapping the driver assigned, for service advertisement. */
  networkOverride?: MessageInitShape<typeof NetworkOverrideSchema>;
}

/**
 * A task handed back by Nomad after a restart (`RecoverTask`).
 *
 * After a restart of the Nomad agent (not only of the plugin) the handle comes from the agent's
 * state database, which does not keep the task's `config` block: `task.driverConfig` is then
 * undefined. Re-attach from what `startTask` put in `driverState`, as Nomad's own drivers do.
 *
 * @example
 * ```ts
 * async recoverTask({ task, state }) {
 *   const { pid } = state as { pid: number }; // not task.driverConfig: gone after an agent restart
 *   tasks.set(task.id, await reattach(pid));
 * }
 * ```
 */
export interface RecoveredTask<TC> {
  /**
   * The task as it was started. Its decoded config is there only when Nomad sent it (after a
   * restart of the plugin alone, not after one of the agent) and it still fits the task schema
   * (a plugin upgrade may have changed that; the SDK logs a warning).
   */
  readonly task: DriverTask<TC | undefined>;
  /** `driverState` as stored: the raw bytes. */
  readonly driverState: Uint8Array;
  /** `driverState` parsed as JSON (what `startTask` returned, if it was not bytes); undefined if not JSON. */
  readonly state: unknown;
  /** TaskHandle.version. */
  readonly version: number;
  /** The handle message as Nomad sent it. */
  readonly handle: TaskHandle;
}

/** How a task ended (`WaitTask`). */
export interface TaskExit {
  /** Exit status. */
  exitCode: number;
  /** Signal that ended the task (number or name), if any. */
  signal?: number | string | null | undefined;
  /** The kernel OOM killer ended the task. */
  oomKilled?: boolean | undefined;
  /** Waiting itself failed (WaitTaskResponse.err). */
  err?: string | undefined;
}

/** Lifecycle state in {@link TaskInspection}. */
export type TaskStateName = "unknown" | "running" | "exited";

/** Status of a task (`InspectTask`). Missing fields are filled from what the SDK saw. */
export interface TaskInspection {
  /** Current state. Default: "exited" once the SDK saw WaitTask return, else "running". */
  state?: TaskStateName | TaskState | undefined;
  /** When the task started. Default: when StartTask/RecoverTask was served. */
  startedAt?: Date | undefined;
  /** When the task exited. */
  completedAt?: Date | undefined;
  /** Exit result, once exited. */
  exit?: TaskExit | undefined;
  /** Driver-specific details shown to operators. */
  attributes?: Record<string, string> | undefined;
  /** Network override, if any. */
  networkOverride?: MessageInitShape<typeof NetworkOverrideSchema> | undefined;
}

/** CPU and memory usage of a task or process (`TaskResourceUsage` fields). */
export interface ResourceUsageInput {
  /** CPU usage; `totalTicks` is derived from `percent` when left out. */
  cpu?: MessageInitShape<typeof CPUUsageSchema> | undefined;
  /** Memory usage. */
  memory?: MessageInitShape<typeof MemoryUsageSchema> | undefined;
}

/**
 * One resource usage sample, in any of these shapes:
 * - `{ cpu, memory, byPid?, timestamp? }`;
 * - `{ agg, byPid?, timestamp? }` (what `@nomadkit/server/stats` samplers produce);
 * - a `TaskStats` message (or its init shape), e.g. forwarded from an executor.
 *
 * The SDK sets the task id, a timestamp when missing, cpu and memory when missing, and
 * `total_ticks` from `percent` when missing.
 */
export type TaskStatsInput =
  | (ResourceUsageInput & {
      /** When the sample was taken; default now. */
      timestamp?: Date | undefined;
      /** Usage per process, keyed by pid (as a string). */
      byPid?: Record<string, ResourceUsageInput | MessageInitShape<typeof TaskResourceUsageSchema>> | undefined;
    })
  | {
      /** When the sample was taken; default now. */
      timestamp?: Date | undefined;
      /** Usage of the whole task (`agg_resource_usage`). */
      agg: ResourceUsageInput | MessageInitShape<typeof TaskResourceUsageSchema>;
      /** Usage per process, keyed by pid (as a string). */
      byPid?: Record<string, ResourceUsageInput | MessageInitShape<typeof TaskResourceUsageSchema>> | undefined;
    }
  | TaskStats
  | MessageInitShape<typeof TaskStatsSchema>;

/** A node attribute value: strings, booleans, integers (int), other numbers (float), or explicit. */
export type AttributeValue =
  | string
  | boolean
  | number
  | bigint
  | {
      /** A float attribute, even for a whole number. */
      float: number;
      /** Unit Nomad shows and compares with, e.g. "MHz", "MiB"; default none. */
      unit?: string;
    }
  | {
      /** An int64 attribute. */
      int: number | bigint;
      /** Unit Nomad shows and compares with, e.g. "MHz", "MiB"; default none. */
      unit?: string;
    }
  | {
      /** A string attribute. */
      string: string;
      /** Unit Nomad shows and compares with; default none. */
      unit?: string;
    }
  | {
      /** A bool attribute. */
      bool: boolean;
      /** Unit Nomad shows and compares with; default none. */
      unit?: string;
    };

/** Driver health on this node. */
export type HealthName = "healthy" | "unhealthy" | "undetected";

/** What `fingerprint` returns. */
export interface Fingerprint {
  /** Whether the driver can run tasks here ("undetected": its runtime is absent). */
  health: HealthName | FingerprintResponse_HealthState;
  /** Human-readable reason, shown to operators. Default: "Healthy", "Unhealthy", "Undetected". */
  description?: string | undefined;
  /** Node attributes, conventionally `driver.<name>.<attribute>`. */
  attributes?: Record<string, AttributeValue> | undefined;
}

/** A task event (shown in the allocation's event list). */
export interface TaskEventInput {
  /** The task the event is about. */
  taskId: string;
  /** Human-readable text, e.g. "Downloading image". */
  message: string;
  /** Structured details. */
  annotations?: Record<string, string> | undefined;
  /** When it happened. Default: now. */
  timestamp?: Date | undefined;
  /** Allocation id; default from the task's config. */
  allocId?: string | undefined;
  /** Task name; default from the task's config. */
  taskName?: string | undefined;
}

/** Feeds Nomad's single TaskEvents stream. */
export interface TaskEventEmitter {
  /**
   * Queue an event for Nomad. Never blocks or throws; events emitted while Nomad has no stream open
   * are kept (a bounded backlog) and delivered when it reopens one.
   */
  emit(event: TaskEventInput): void;
}

/** Push fingerprint updates between the periodic ones. */
export interface FingerprintControl {
  /**
   * Send a new fingerprint now on every open Fingerprint stream (if it differs from the last one
   * sent). Without an argument, the driver's `fingerprint()` is called again, even if a call is
   * already running (it began before whatever the update is about, and its answer is not sent): a
   * driver calling it on every event while its `fingerprint()` is slow starts one call per update.
   */
  update(fingerprint?: Fingerprint): void;
}

/** What the SDK knows about a live task. */
export interface TaskInfo<TC = unknown> {
  /**
   * The task's config as Nomad sent it, with the decoded config block (undefined for a task
   * recovered after an agent restart: see {@link RecoveredTask}).
   */
  readonly task: DriverTask<TC | undefined>;
  /** When StartTask (or RecoverTask) was served. */
  readonly startedAt: Date;
  /** Set once the SDK has answered a WaitTask for it. */
  readonly exit?:
    | {
        /** The exit the driver's `waitTask` returned. */
        readonly result: TaskExit;
        /** When the SDK answered the WaitTask. */
        readonly at: Date;
      }
    | undefined;
}

/** Long-lived services the SDK gives a driver. */
export interface DriverContext<PC = unknown, TC = unknown> {
  /** The plugin's logger (hclog-compatible on stderr when served with `serveDriver`). */
  readonly logger: Logger;
  /** Task events for Nomad. */
  readonly events: TaskEventEmitter;
  /** Push fingerprint updates. */
  readonly fingerprint: FingerprintControl;
  /** The latest plugin config from SetConfig, decoded; undefined until SetConfig (never, after a reattach). */
  readonly config: PC | undefined;
  /** The latest `nomad_config` from SetConfig (client port range, CPU topology). */
  readonly nomadConfig: NomadConfig | undefined;
  /** Host compute capacity used for `total_ticks` (Nomad's topology when given, else /proc/cpuinfo). */
  readonly hostCompute: HostCompute;
  /** Tasks the SDK has started or recovered and not yet destroyed, by id. */
  readonly tasks: ReadonlyMap<string, TaskInfo<TC>>;
  /** Aborts when the plugin shuts down (reason: an Error "plugin shutting down"). */
  readonly lifetime: AbortSignal;
}

/** Per-call context: the driver context plus the call's abort signal. */
export interface CallContext<PC = unknown, TC = unknown> extends DriverContext<PC, TC> {
  /** Aborts when Nomad cancels the call (or it times out). */
  readonly signal: AbortSignal;
}

/**
 * The context of a `taskStats` call: the call context plus the stream's `collection_interval`. A
 * sample should cover the whole interval (Nomad's drivers open their executor's Stats stream with
 * it, so CPU percent averages the interval, not the last second of it).
 *
 * @example
 * ```ts
 * taskStats(taskId, ctx) {
 *   // An ExecutorStatsFeed (@nomadkit/server/executor): one executor Stats stream per interval.
 *   return tasks.get(taskId)!.stats.next(ctx);
 * },
 * ```
 */
export interface TaskStatsContext<PC = unknown, TC = unknown> extends CallContext<PC, TC> {
  /** The stream's `collection_interval` in milliseconds, as the SDK schedules the calls (default 1000 when Nomad sent none). */
  readonly intervalMs: number;
}

/** Options of `stopTask`. */
export interface StopTaskOptions {
  /** Signal to send first, canonical name ("SIGINT" when Nomad sent none, like Nomad's executors). */
  signal: string;
  /**
   * The job set no `kill_signal`, so `signal` is the SIGINT default. A driver whose workloads bring
   * their own stop signal (a container image's STOPSIGNAL) sends that instead, as Go drivers do.
   */
  signalDefaulted: boolean;
  /** Grace period after the signal before killing the task, in milliseconds. */
  timeoutMs: number;
}

/** Options of `destroyTask`. */
export interface DestroyTaskOptions {
  /** Kill the task first if it is still running. Without it, destroying a running task should fail. */
  force: boolean;
}

/** Options of `execTask`. */
export interface ExecTaskOptions {
  /** Kill the command after this many milliseconds (0: no limit), and answer with its output and exit code. */
  timeoutMs: number;
  /** Aborts when Nomad cancels the call, or 1 s after the timeout if execTask has not answered by then. */
  signal: AbortSignal;
}

/** Result of `execTask`. */
export interface ExecTaskResult {
  /** Everything the command wrote to stdout. */
  stdout: Uint8Array;
  /** Everything the command wrote to stderr. */
  stderr: Uint8Array;
  /** Exit status; a process killed by signal N reports 128+N. */
  exitCode: number;
  /** Signal that killed the command, if any. */
  signal?: number | string | null | undefined;
}

/** The network namespace of an allocation (`CreateNetworkResponse`), as `NetworkManager.create` returns it. */
export interface CreateNetworkResult {
  /** Isolation spec passed to every task of the allocation. */
  spec: MessageInitShape<typeof NetworkIsolationSpecSchema>;
  /** False when the namespace already existed. */
  created: boolean;
}

/** The features Nomad adapts to (`DriverCapabilities` fields). */
export type Capabilities = MessageInitShape<typeof DriverCapabilitiesSchema>;

/**
 * A Nomad task driver. Implement the lifecycle methods; everything marked optional may be left out
 * and then answers the way Nomad expects (Unimplemented where Nomad tolerates it, sensible defaults
 * elsewhere). Task methods are only called with ids the SDK knows (started or recovered, not yet
 * destroyed): unknown ids are answered NotFound before reaching the driver.
 *
 * `PC` is the decoded plugin config, `TC` the decoded task config; {@link defineDriver} infers both
 * from the schemas.
 *
 * @example
 * ```ts
 * const driver = defineDriver({
 *   name: "hello",
 *   version: "0.1.0",
 *   taskConfigSchema: spec.object({ command: spec.attr("string", { required: true }) }),
 *   async startTask(task) { run(task.driverConfig.command); },
 *   async waitTask(taskId) { return { exitCode: await exitOf(taskId) }; },
 *   async stopTask(taskId, { signal }) { kill(taskId, signal); },
 *   async destroyTask(taskId) { forget(taskId); },
 * });
 * ```
 */
export interface Driver<PC = unknown, TC = unknown> {
  /** Plugin name: the job's `driver = "..."`. */
  readonly name: string;
  /** Plugin version, semver (e.g. "0.1.0"). */
  readonly version: string;
  /** Schema of the agent's `plugin "<name>" { config { ... } }` block. Default: empty. */
  readonly configSchema?: HclSpec<PC, boolean> | undefined;
  /** Schema of a task's `config { ... }` block. Default: empty. */
  readonly taskConfigSchema?: HclSpec<TC, boolean> | undefined;
  /**
   * Capabilities, merged over the SDK's defaults: `sendSignals` when `signalTask` exists, `exec`
   * when an exec method exists, `mustCreateNetwork` when `createNetwork` exists, filesystem
   * isolation NONE, network modes HOST (plus GROUP with `createNetwork`), and mounts NO_MOUNTS
   * (the wire's default, 0, means ANY_MOUNTS: Nomad would accept volumes for a driver that ignores
   * `TaskConfig.mounts`; set `mountConfigs: DriverCapabilities_MountConfigs.ANY_MOUNTS` when the
   * driver makes them). Read on every Capabilities call; give a function of the plugin config when
   * they depend on it.
   *
   * @example
   * ```ts
   * capabilities: (config) => ({ mustCreateNetwork: config?.create_network ?? false }),
   * ```
   */
  readonly capabilities?: Capabilities | ((config: PC | undefined) => Capabilities) | undefined;

  /** SetConfig: Nomad may call it several times, or not at all after reattaching to a running plugin. */
  setConfig?(config: PC, ctx: CallContext<PC, TC>): void | Promise<void>;
  /** Init, called on every dispense (after SetConfig). */
  init?(ctx: CallContext<PC, TC>): void | Promise<void>;
  /** Driver.Shutdown (Nomad allows 2 s) and plugin shutdown: release global resources. Called once. */
  shutdown?(ctx: DriverContext<PC, TC>): void | Promise<void>;
  /**
   * Health and node attributes. Called when a Fingerprint stream opens and then periodically
   * (`fingerprintIntervalMs`, default 30 s); push changes with `ctx.fingerprint.update()`.
   * Default: healthy. A throw reports the driver unhealthy with the error.
   */
  fingerprint?(ctx: DriverContext<PC, TC>): Fingerprint | Promise<Fingerprint>;

  /** Start a task. Throw `RecoverableError` to tell Nomad whether a retry may help. */
  startTask(task: DriverTask<TC>, ctx: CallContext<PC, TC>): Promise<StartTaskResult | void> | StartTaskResult | void;
  /** Block until the task exits (resolve at once for an exited task). When Nomad stops waiting, the SDK answers the call at once, as Nomad's Go shim does, whether or not this settles; `ctx.signal` aborts then. */
  waitTask(taskId: string, ctx: CallContext<PC, TC>): Promise<TaskExit> | TaskExit;
  /** Send `signal`, wait up to `timeoutMs`, then kill. Do not release resources (that is destroyTask). */
  stopTask(taskId: string, options: StopTaskOptions, ctx: CallContext<PC, TC>): Promise<void> | void;
  /** Release the task's resources; the SDK forgets the task afterwards. */
  destroyTask(taskId: string, options: DestroyTaskOptions, ctx: CallContext<PC, TC>): Promise<void> | void;
  /** Status of a task. Default: built from what the SDK saw (start time, WaitTask result). */
  inspectTask?(taskId: string, ctx: CallContext<PC, TC>): Promise<TaskInspection> | TaskInspection;
  /** Re-attach to a task after a restart. Without it, RecoverTask answers Unimplemented and Nomad restarts the task. */
  recoverTask?(recovered: RecoveredTask<TC>, ctx: CallContext<PC, TC>): Promise<void> | void;
  /** Deliver a signal (canonical name, e.g. "SIGHUP"). */
  signalTask?(taskId: string, signal: string, ctx: CallContext<PC, TC>): Promise<void> | void;
  /**
   * Run a command to completion (script checks). Default when only `execTaskStreaming` exists: run it
   * through that with empty stdin and collect the output.
   */
  execTask?(taskId: string, command: readonly string[], options: ExecTaskOptions, ctx: CallContext<PC, TC>): Promise<ExecTaskResult>;
  /** Interactive exec, high-level form (see `ExecSession`, `runExecCommand`). */
  execTaskStreaming?(session: ExecSession, ctx: CallContext<PC, TC>): Promise<ExecResult>;
  /** Interactive exec, raw form: preferred over `execTaskStreaming` when both exist. */
  execTaskStreamingRaw?(stream: ExecTaskStream, ctx: CallContext<PC, TC>): Promise<void>;
  /**
   * One resource usage sample; the SDK calls it every `collection_interval` (`ctx.intervalMs`), with
   * the same `ctx.signal` for every call of one stream. Return `undefined` once the task has exited:
   * the stream then ends cleanly, as Nomad's own drivers end it (their executor is gone) and Nomad
   * reopens it with a backoff; an error instead is logged by Nomad's client at ERROR level. Throw
   * `RecoverableError` as for start.
   */
  taskStats?(taskId: string, ctx: TaskStatsContext<PC, TC>): Promise<TaskStatsInput | undefined> | TaskStatsInput | undefined;
  /** Create (or find) the allocation's network namespace; must be idempotent (`created: false` when it existed). */
  createNetwork?(allocId: string, hostname: string, ctx: CallContext<PC, TC>): Promise<CreateNetworkResult>;
  /** Remove the allocation's network namespace; succeed when it is already gone. */
  destroyNetwork?(allocId: string, spec: NetworkIsolationSpec | undefined, ctx: CallContext<PC, TC>): Promise<void> | void;
}

/**
 * Identity helper that infers a driver's config types from its schemas, so method parameters are
 * typed without annotations.
 *
 * @example
 * ```ts
 * const driver = defineDriver({
 *   name: "hello", version: "0.1.0",
 *   taskConfigSchema: spec.object({ command: spec.attr("string", { required: true }) }),
 *   startTask(task) { task.driverConfig.command; }, // string
 *   // ...
 * });
 * ```
 */
export function defineDriver<PC = undefined, TC = undefined>(driver: Driver<PC, TC>): Driver<PC, TC> {
  // A plain JS driver gets no type check: a missing method fails here, not on Nomad's first call.
  checkDriverMethods(driver);
  return driver;
}
