/**
 * Driver → gRPC handlers: turns a {@link Driver} into the `BasePluginHandlers` and `DriverHandlers`
 * the generated `registerBasePlugin` / `registerDriver` serve. Request validation (unknown task
 * ids, bad signal names, missing fields) happens here, once, so every driver answers bad requests
 * the same way; error mapping (RecoverableError, cancellation) is the server runtime's job.
 */
import { setMaxListeners } from "node:events";
import { Readable, Writable } from "node:stream";
import { finished } from "node:stream/promises";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate, type Duration } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { PluginType, type NomadConfig } from "@nomadkit/protocol/base";
import {
  DriverCapabilities_FSIsolation,
  DriverCapabilities_MountConfigs,
  DriverCapabilitiesSchema,
  ExecTaskStreamingRequestSchema,
  ExitResultSchema,
  NetworkIsolationSpec_NetworkIsolationMode,
  TaskState,
  type ExecTaskStreamingRequest,
  type ExecTaskStreamingResponse,
  type TaskConfig,
} from "@nomadkit/protocol/driver";
import { SpecSchema, type Spec } from "@nomadkit/protocol/hclspec";
import { decodeConfig } from "../config/decode.js";
import { execStreaming, toExitResult, type ExecSession } from "../exec/session.js";
import { TerminalResizes } from "../exec/resize.js";
import { CHECK_OUTPUT_LIMIT, OutputTail } from "../exec/output-tail.js";
import { signalName, signalNumber } from "../executor/signals.js";
import type { BasePluginHandlers } from "../gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js";
import type { DriverHandlers } from "../gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { createLogger, type Logger } from "../log/index.js";
import { untilAborted } from "../runtime/until-aborted.js";
import { hostCompute, type HostCompute } from "../stats/host.js";
import { checkDriverMethods } from "./check-methods.js";
import { invalidArgument, taskNotFound } from "./errors.js";
import { TaskEventHub } from "./events.js";
import { DEFAULT_FINGERPRINT_INTERVAL_MS, FingerprintSource } from "./fingerprint.js";
import { computeFromTopology, statsIntervalMs, normalizeTaskStats } from "./stats.js";
import type {
  CallContext,
  Driver,
  DriverContext,
  DriverTask,
  ExecTaskResult,
  TaskExit,
  TaskInfo,
  TaskInspection,
  TaskStateName,
  TaskStatsContext,
  TaskStatsInput,
} from "./types.js";
import { anySignal, StreamWaits } from "./util.js";
import { checkProcessEnv, checkProcessStrings } from "../runtime/process-strings.js";
import { timerDelayMs } from "../runtime/timer-delay.js";

/** The plugin API version Nomad negotiates for drivers. */
export const DRIVER_PLUGIN_API_VERSION = "v0.1.0";

/** Options of {@link createDriverHandlers} (and `serveDriver`). */
export interface DriverHandlerOptions {
  /** Logger handed to the driver as `ctx.logger`. Default: discard. */
  logger?: Logger | undefined;
  /** Period of fingerprint re-sends. Default 30 s. */
  fingerprintIntervalMs?: number | undefined;
  /** Host compute capacity for `total_ticks`. Default: Nomad's topology from SetConfig, else /proc/cpuinfo. */
  hostCompute?: HostCompute | undefined;
  /** Largest exec output payload per message. Default 1 MiB. */
  maxExecChunkSize?: number | undefined;
  /**
   * Output kept per stream by the default buffered ExecTask (built on execTaskStreaming): the last
   * this many bytes. Default 4 KiB, what Nomad's executor keeps for a script check.
   */
  execTaskOutputLimit?: number | undefined;
}

/** A driver's handlers plus the state behind them. */
export interface DriverHost<PC = unknown, TC = unknown> {
  /** Handlers for `registerBasePlugin`. */
  readonly base: Partial<BasePluginHandlers>;
  /** Handlers for `registerDriver`; methods the driver lacks are left out (Unimplemented). */
  readonly driver: Partial<DriverHandlers>;
  /** The context the driver's methods receive. */
  readonly context: DriverContext<PC, TC>;
  /** End the long-lived streams and call the driver's `shutdown` (once). */
  close(): Promise<void>;
}

interface TaskRecord<TC> {
  task: DriverTask<TC>;
  startedAt: Date;
  exit?: { result: TaskExit; at: Date } | undefined;
  /** The driver's startTask or recoverTask while it runs: DestroyTask waits for it. */
  starting?: Promise<unknown> | undefined;
}

/**
 * Driver calls that act on tasks or networks. Once the plugin shuts down (Driver.Shutdown, the
 * controller's Shutdown, SIGTERM) the driver has let go of its tasks: such a call would act on what
 * it no longer manages (a task started then is left running by a plugin about to exit), and a Go
 * plugin's stopped server refuses every call. The streams (Fingerprint, TaskEvents, TaskStats) end.
 */
const REFUSED_WHILE_SHUTTING_DOWN = [
  "init", "startTask", "recoverTask", "waitTask", "stopTask", "destroyTask", "inspectTask", "signalTask",
  "execTask", "execTaskStreaming", "createNetwork", "destroyNetwork",
] as const satisfies readonly (keyof DriverHandlers)[];

/** Codes a call may fail with because the plugin's shutdown took what it was using away. */
const SHUTDOWN_CASUALTY = new Set([Code.Canceled, Code.Unknown, Code.Internal, Code.Aborted, Code.Unavailable]);

function shuttingDown(cause?: unknown): ConnectError {
  return new ConnectError("plugin shutting down", Code.Unavailable, undefined, undefined, cause);
}

/**
 * Wraps the calls above: refused with Unavailable once `lifetime` ended, which Nomad (with the
 * process gone) takes for the plugin shutting down; and one in flight that fails then fails the
 * same way, rather than with what the teardown did to it (an exec whose executor connection the
 * driver closed: Canceled "the connection to the plugin was closed on this side").
 */
function refuseWhileShuttingDown(handlers: Partial<DriverHandlers>, lifetime: AbortSignal): void {
  const casualty = (err: unknown): unknown =>
    lifetime.aborted && SHUTDOWN_CASUALTY.has(ConnectError.from(err).code) ? shuttingDown(err) : err;
  const table = handlers as Record<string, ((req: unknown, hc: HandlerContext) => unknown) | undefined>;
  for (const name of REFUSED_WHILE_SHUTTING_DOWN) {
    const fn = table[name];
    if (fn === undefined) continue;
    table[name] = (req, hc) => {
      if (lifetime.aborted) throw shuttingDown();
      const out = fn(req, hc);
      if (out instanceof Promise) return out.catch((err: unknown) => Promise.reject(casualty(err)));
      const it = (out as AsyncIterable<unknown>)[Symbol.asyncIterator]();
      // A plain iterator, not an async generator around it: one promise per message, as the
      // runtime's own guard (exec output is the hot path).
      return {
        [Symbol.asyncIterator]() {
          return {
            next: (v?: unknown) => it.next(v).catch((err: unknown) => Promise.reject(casualty(err))),
            return: (v?: unknown) => (it.return !== undefined ? it.return(v) : Promise.resolve({ done: true, value: v })),
          };
        },
      };
    };
  }
}

const SEMVER = /^v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$/;
const EMPTY_SPEC: Spec = create(SpecSchema, { block: { case: "object", value: { attributes: {} } } });
const utf8 = new TextDecoder();
const encoder = new TextEncoder();
/** Go's zero `time.Time` as a Timestamp (0001-01-01T00:00:00Z): "not completed" on Nomad's wire. */
const GO_ZERO_TIME = { seconds: -62135596800n, nanos: 0 };

/** A host's timeout in whole ms a timer can hold (see timer-delay.ts); 0 when unset. */
/** How long after an ExecTask timeout a driver's execTask is cancelled if it has not answered. */
const EXEC_TIMEOUT_GRACE_MS = 1000;

function durationMs(d: Duration | undefined): number {
  if (d === undefined) return 0;
  return timerDelayMs(Number(d.seconds) * 1000 + d.nanos / 1e6);
}

/** A signal name or number as its canonical name; InvalidArgument naming `field` otherwise. */
function canonicalSignal(signal: string, field: string): string {
  const n = signalNumber(signal, field);
  return signalName(n) ?? String(n);
}

function signalNum(s: number | string | null | undefined): number {
  if (s === undefined || s === null || s === "" || s === 0) return 0;
  try {
    return signalNumber(s);
  } catch {
    return 0;
  }
}

function taskExitResult(e: TaskExit): MessageInitShape<typeof ExitResultSchema> {
  return { exitCode: e.exitCode, signal: signalNum(e.signal), oomKilled: e.oomKilled === true };
}

/** A schema's message; a plain object where a `spec` belongs says so (not "toProto is not a function"). */
function schemaProto(schema: { toProto(): Spec } | undefined, field: string): Spec {
  if (schema === undefined) return EMPTY_SPEC;
  if (typeof (schema as { toProto?: unknown }).toProto !== "function") {
    throw new TypeError(`driver.${field} must be built with spec (spec.object({ ... })), got ${JSON.stringify(schema)?.slice(0, 100)}`);
  }
  return schema.toProto();
}

/**
 * Capabilities that encode, else an Internal error naming the driver's `capabilities`: protobuf-es
 * refuses `fsIsolation: "chroot"` only when serializing ("invalid int32: NaN").
 */
function checkedCapabilities(caps: MessageInitShape<typeof DriverCapabilitiesSchema>): MessageInitShape<typeof DriverCapabilitiesSchema> {
  try {
    toBinary(DriverCapabilitiesSchema, create(DriverCapabilitiesSchema, caps));
  } catch (err) {
    throw new ConnectError(
      `capabilities: ${(err as Error).message} (enum fields take the generated enums, such as DriverCapabilities_FSIsolation.CHROOT)`,
      Code.Internal,
    );
  }
  return caps;
}

/**
 * CreateNetwork's hostname, as Nomad lets it through: its job check (`dns.IsDomainName`, "extremely
 * liberal") limits lengths only and is skipped for interpolated values (`${NOMAD_ALLOC_NAME}` gives
 * `web.cache[0]`). Refused besides: what would add a line, field or comment to a hosts file a driver
 * writes from it.
 */
function checkHostname(hostname: string): void {
  const name = hostname.endsWith(".") ? hostname.slice(0, -1) : hostname;
  let why: string | undefined;
  if (/[\s\p{Cc}#]/u.test(name)) why = "whitespace, control characters and '#' are not allowed";
  else if (name.length > 253) why = "longer than 253 characters";
  else if (name.split(".").some((label) => label.length > 63)) why = "a label is longer than 63 characters";
  if (why !== undefined) throw invalidArgument("hostname", `${JSON.stringify(hostname.slice(0, 300))} is not a host name: ${why}`);
}

/**
 * What a driver method returned as a TaskExit, checked: a plain JS driver resolving `5` or
 * `{ code: 5 }` would otherwise report exit 0, a failed task as a success. Internal naming `from`.
 */
function checkedExit(e: unknown, from: string): TaskExit {
  if (typeof e === "object" && e !== null && Number.isInteger((e as TaskExit).exitCode)) return e as TaskExit;
  throw new ConnectError(`${from}: expected a TaskExit ({ exitCode: <integer>, signal?, oomKilled?, err? }), got ${shown(e)}`, Code.Internal);
}

/** A driver-given Date, checked (an ISO string would fail deep in timestampFromDate). */
function checkedDate(d: unknown, from: string): Date {
  if (d instanceof Date && !Number.isNaN(d.getTime())) return d;
  throw new ConnectError(`${from}: expected a valid Date, got ${shown(d)}`, Code.Internal);
}

function shown(v: unknown): string {
  if (v === undefined) return "undefined (a missing return?)";
  if (v instanceof Date) return "an invalid Date";
  try {
    return JSON.stringify(v)?.slice(0, 200) ?? String(v);
  } catch {
    return typeof v;
  }
}

const STATE: Record<TaskStateName, TaskState> = {
  unknown: TaskState.UNKNOWN,
  running: TaskState.RUNNING,
  exited: TaskState.EXITED,
};

function encodeDriverState(state: unknown): Uint8Array {
  if (state === undefined) return new Uint8Array();
  if (state instanceof Uint8Array) return state;
  return encoder.encode(JSON.stringify(state));
}

function parseDriverState(bytes: Uint8Array): unknown {
  if (bytes.byteLength === 0) return undefined;
  try {
    return JSON.parse(utf8.decode(bytes)) as unknown;
  } catch {
    return undefined;
  }
}

/** A Writable that keeps the last `limit` bytes and drops (but drains) what came before. */
function collector(limit: number): { stream: Writable; bytes: () => Uint8Array } {
  const tail = new OutputTail(limit);
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      tail.push(chunk);
      cb();
    },
  });
  return { stream, bytes: () => tail.bytes() };
}

/**
 * ExecTask through an exec session (a driver that only has the raw form): the setup and an empty,
 * closed stdin are sent, the last `limit` bytes of each stream are kept, and the request side stays
 * open until the session ends, as Nomad's own exec sessions do. Past the timeout the session is
 * cancelled (which kills the command) and the answer is the output so far with exit code -1, as
 * Nomad's executor answers.
 */
async function bufferedRawExec(
  taskId: string,
  command: readonly string[],
  limit: number,
  signal: AbortSignal,
  timedOut: () => boolean,
  run: (requests: AsyncIterable<ExecTaskStreamingRequest>) => AsyncIterable<ExecTaskStreamingResponse>,
): Promise<ExecTaskResult> {
  let ended!: () => void;
  const done = new Promise<void>((resolve) => (ended = resolve));
  async function* requests(): AsyncGenerator<ExecTaskStreamingRequest> {
    yield create(ExecTaskStreamingRequestSchema, { setup: { taskId, command: [...command], tty: false } });
    yield create(ExecTaskStreamingRequestSchema, { stdin: { close: true } });
    await done;
  }
  const out = collector(limit);
  const err = collector(limit);
  let result: ExecTaskStreamingResponse["result"];
  let exited = false;
  try {
    for await (const m of run(requests())) {
      if (m.stdout?.data.length) out.stream.write(m.stdout.data);
      if (m.stderr?.data.length) err.stream.write(m.stderr.data);
      if (m.exited) {
        exited = true;
        result = m.result;
      }
    }
  } catch (e) {
    if (!timedOut()) throw e;
    // What Nomad's ExecTask answers for a command it killed at the timeout (executor ExecScript:
    // WaitStatus.ExitStatus() of a signalled process, no signal in the result).
    return { stdout: out.bytes(), stderr: err.bytes(), exitCode: -1, signal: 0 };
  } finally {
    ended();
  }
  if (!exited) {
    signal.throwIfAborted();
    throw new ConnectError("exec: the session ended without reporting the command's exit", Code.Internal);
  }
  return { stdout: out.bytes(), stderr: err.bytes(), exitCode: result?.exitCode ?? 0, signal: result?.signal ?? 0 };
}

/**
 * Build the gRPC handlers for `driver`. `serveDriver` does this for you; use it directly to serve a
 * driver on your own connect router (tests, custom transports).
 *
 * @example
 * ```ts
 * const host = createDriverHandlers(myDriver, { logger });
 * const handler = createPluginHandler((router) => {
 *   registerBasePlugin(router, host.base, runtime);
 *   registerDriver(router, host.driver, runtime);
 * });
 * ```
 */
export function createDriverHandlers<PC, TC>(driver: Driver<PC, TC>, options: DriverHandlerOptions = {}): DriverHost<PC, TC> {
  if (typeof driver.name !== "string" || driver.name === "") throw new TypeError("driver.name must be a non-empty string");
  if (typeof driver.version !== "string" || !SEMVER.test(driver.version)) {
    throw new TypeError(`driver.version must be a semantic version such as "0.1.0", got ${JSON.stringify(driver.version)}`);
  }
  checkDriverMethods(driver);
  // createNetwork makes the plugin the owner of each allocation's network (must_create_network):
  // Nomad calls DestroyNetwork when the allocation ends, and without it every namespace stays.
  if (driver.createNetwork !== undefined && driver.destroyNetwork === undefined) {
    throw new TypeError("driver.createNetwork needs driver.destroyNetwork too: Nomad calls DestroyNetwork when the allocation ends, and without it every network namespace the driver creates stays behind");
  }
  // The other way round Nomad creates the namespaces itself and never calls destroyNetwork: a
  // driver that has it most likely forgot createNetwork, and would not get to create them.
  if (driver.destroyNetwork !== undefined && driver.createNetwork === undefined) {
    throw new TypeError("driver.destroyNetwork needs driver.createNetwork too: Nomad calls DestroyNetwork only for networks the driver created (must_create_network), so without createNetwork it is never called");
  }
  // Build the schema messages now: a broken schema fails at startup, not on Nomad's first call.
  const configSpec = schemaProto(driver.configSchema, "configSchema");
  const taskSpec = schemaProto(driver.taskConfigSchema, "taskConfigSchema");

  const logger = options.logger ?? createLogger({ level: "error", destination: { write: () => true } });
  const lifetime = new AbortController();
  // Every open Fingerprint, TaskEvents and TaskStats stream listens on it: Nomad keeps one TaskStats
  // per task, so 8 tasks passed Node's default of 10 and it warned of a leak on stderr.
  setMaxListeners(0, lifetime.signal);
  const tasks = new Map<string, TaskRecord<TC | undefined>>();
  let config: PC | undefined;
  let nomadConfig: NomadConfig | undefined;
  let compute: HostCompute | undefined = options.hostCompute;
  let configQueue: Promise<unknown> = Promise.resolve();

  const events = new TaskEventHub((id) => {
    const t = tasks.get(id);
    return t && { allocId: t.task.allocId, name: t.task.name };
  }, logger);
  const fingerprint = new FingerprintSource(
    driver.fingerprint !== undefined ? () => driver.fingerprint!(context) : undefined,
    options.fingerprintIntervalMs ?? DEFAULT_FINGERPRINT_INTERVAL_MS,
    logger,
  );

  const context: DriverContext<PC, TC> = {
    logger,
    events,
    fingerprint,
    get config() {
      return config;
    },
    get nomadConfig() {
      return nomadConfig;
    },
    get hostCompute() {
      compute ??= hostCompute();
      return compute;
    },
    tasks: tasks as ReadonlyMap<string, TaskInfo<TC>>,
    lifetime: lifetime.signal,
  };
  // A call's context is the driver's context (its prototype) plus the call's signal, read through
  // a getter so the signal is only created if the driver uses it. A class: one small object per
  // call, where Object.create plus defineProperty cost ~20× more on every unary call.
  class DriverCallContext {
    readonly #hc: HandlerContext;
    constructor(hc: HandlerContext) {
      this.#hc = hc;
    }
    get signal(): AbortSignal {
      return this.#hc.signal;
    }
  }
  Object.setPrototypeOf(DriverCallContext.prototype, context);
  const call = (hc: HandlerContext): CallContext<PC, TC> => new DriverCallContext(hc) as unknown as CallContext<PC, TC>;

  const requireTask = (taskId: string, field = "task_id"): TaskRecord<TC | undefined> => {
    if (taskId === "") throw invalidArgument(field, "must not be empty");
    const t = tasks.get(taskId);
    if (t === undefined) throw taskNotFound(taskId);
    return t;
  };

  const decodeTask = (cfg: TaskConfig): DriverTask<TC> => {
    const driverConfig =
      driver.taskConfigSchema !== undefined ? decodeConfig(driver.taskConfigSchema, cfg.msgpackDriverConfig, "task config") : (undefined as TC);
    return { ...cfg, driverConfig };
  };

  // A plain Error: constructing a ConnectError loads the WHATWG Headers implementation (undici),
  // about 25 ms on the way out of every plugin process.
  const endLifetime = () => {
    if (!lifetime.signal.aborted) lifetime.abort(new Error("plugin shutting down"));
  };
  let shutdown: Promise<void> | undefined;
  const shutdownOnce = (): Promise<void> => {
    shutdown ??= (async () => {
      await driver.shutdown?.(context);
    })();
    return shutdown;
  };

  const base: Partial<BasePluginHandlers> = {
    pluginInfo: () => ({
      type: PluginType.DRIVER,
      pluginApiVersions: [DRIVER_PLUGIN_API_VERSION],
      pluginVersion: driver.version,
      name: driver.name,
    }),
    configSchema: () => ({ spec: configSpec }),
    setConfig(req, hc) {
      // One at a time, in the order they came (Nomad sends them so): a refused config's rollback
      // then restores exactly what it replaced.
      const applied = configQueue.then(() => applyConfig(req, hc));
      configQueue = applied.catch(() => undefined);
      return applied;
    },
  };

  async function applyConfig(req: Parameters<NonNullable<BasePluginHandlers["setConfig"]>>[0], hc: HandlerContext): Promise<Record<string, never>> {
    // Its caller gave up while it waited for its turn: it must not take effect behind their back.
    if (hc.signal.aborted) throw new ConnectError("SetConfig cancelled by the caller before it was applied", Code.Canceled);
    const decoded = driver.configSchema !== undefined ? decodeConfig(driver.configSchema, req.msgpackConfig, "plugin config") : (undefined as PC);
    const before = { config, nomadConfig, compute };
    config = decoded;
    nomadConfig = req.nomadConfig;
    if (options.hostCompute === undefined) compute = computeFromTopology(req.nomadConfig?.driver?.Topology) ?? compute;
    try {
      await driver.setConfig?.(decoded, call(hc));
    } catch (err) {
      // A config the driver refuses does not take effect: the previous one stays.
      ({ config, nomadConfig, compute } = before);
      throw err;
    }
    return {};
  }

  const hasExec = driver.execTaskStreamingRaw !== undefined || driver.execTaskStreaming !== undefined;
  const defaultCaps = {
    sendSignals: driver.signalTask !== undefined,
    exec: hasExec || driver.execTask !== undefined,
    fsIsolation: DriverCapabilities_FSIsolation.NONE,
    // Not the wire default (0 is ANY_MOUNTS): Nomad then accepts host and CSI volumes for the task
    // and, if the driver ignores TaskConfig.mounts, the task runs without them. A driver that makes
    // mounts says so.
    mountConfigs: DriverCapabilities_MountConfigs.NO_MOUNTS,
    networkIsolationModes:
      driver.createNetwork !== undefined
        ? [NetworkIsolationSpec_NetworkIsolationMode.HOST, NetworkIsolationSpec_NetworkIsolationMode.GROUP]
        : [NetworkIsolationSpec_NetworkIsolationMode.HOST],
    mustCreateNetwork: driver.createNetwork !== undefined,
  };
  // Asked on every call, not once: capabilities may follow the plugin config, which only arrives
  // with SetConfig (e.g. must_create_network from an agent option).
  const capabilitiesNow = () => {
    const own = typeof driver.capabilities === "function" ? driver.capabilities(config) : driver.capabilities;
    return checkedCapabilities({ ...defaultCaps, ...own });
  };
  // A fixed object is checked now: the plugin then fails as it starts, not at Nomad's first task.
  if (typeof driver.capabilities !== "function") {
    try {
      capabilitiesNow();
    } catch (err) {
      throw new TypeError((err as ConnectError).rawMessage);
    }
  }

  const handlers: Partial<DriverHandlers> = {
    async init(_req, hc) {
      await driver.init?.(call(hc));
      return {};
    },
    taskConfigSchema: () => ({ spec: taskSpec }),
    capabilities: () => ({ capabilities: capabilitiesNow() }),
    fingerprint: (_req, hc) => fingerprint.stream(hc.signal, lifetime.signal),
    taskEvents: (_req, hc) => events.stream(hc.signal, lifetime.signal),
    async shutdown() {
      // As Nomad's own drivers cancel their context: Fingerprint, TaskEvents and TaskStats end.
      endLifetime();
      await shutdownOnce();
      return {};
    },

    async startTask(req, hc) {
      const cfg = req.task;
      if (cfg === undefined) throw invalidArgument("task", "required");
      if (cfg.id === "") throw invalidArgument("task.id", "must not be empty");
      if (tasks.has(cfg.id)) throw new ConnectError(`task with id ${JSON.stringify(cfg.id)} already started`, Code.AlreadyExists);
      checkProcessEnv(cfg.env, (k) => `task.env[${JSON.stringify(k)}]`);
      const record: TaskRecord<TC> = { task: decodeTask(cfg), startedAt: new Date() };
      tasks.set(cfg.id, record);
      let res;
      try {
        res = await (record.starting = Promise.resolve(driver.startTask(record.task, call(hc))));
      } catch (err) {
        if (tasks.get(cfg.id) === record) tasks.delete(cfg.id);
        throw err;
      } finally {
        record.starting = undefined;
      }
      let driverState: Uint8Array;
      try {
        driverState = encodeDriverState(res?.driverState);
      } catch (err) {
        // Without a handle Nomad would never destroy the task it does not know is running: undo the start.
        if (tasks.get(cfg.id) === record) tasks.delete(cfg.id);
        await Promise.resolve(driver.destroyTask(cfg.id, { force: true }, call(hc))).catch(() => undefined);
        throw new ConnectError(`startTask returned a driverState that is neither bytes nor JSON: ${(err as Error).message}`, Code.Internal);
      }
      return {
        handle: { version: res?.handleVersion ?? 1, config: cfg, state: TaskState.RUNNING, driverState },
        networkOverride: res?.networkOverride,
      };
    },

    async waitTask(req, hc) {
      const record = requireTask(req.taskId);
      // Like Nomad's Go shim: answer as soon as Nomad stops waiting, even if the driver's waitTask
      // does not watch ctx.signal (a task's exit promise rarely does).
      const exit = checkedExit(await untilAborted(Promise.resolve(driver.waitTask(req.taskId, call(hc))), hc.signal), "waitTask");
      // An exit that comes while the plugin shuts down may be the shutdown's own doing (a driver
      // whose wait ends when it lets go of its task): Nomad would take it for the task's end and
      // start it again beside the one still running. Unavailable is what it takes for the plugin
      // going away, and it recovers the task and waits again.
      if (lifetime.signal.aborted) throw shuttingDown();
      record.exit = { result: exit, at: new Date() };
      return { result: taskExitResult(exit), err: exit.err ?? "" };
    },

    async stopTask(req, hc) {
      requireTask(req.taskId);
      // Nomad's executors default to SIGINT when the job sets no kill_signal.
      const signalDefaulted = req.signal === "";
      const signal = signalDefaulted ? "SIGINT" : canonicalSignal(req.signal, "signal");
      await driver.stopTask(req.taskId, { signal, signalDefaulted, timeoutMs: durationMs(req.timeout) }, call(hc));
      return {};
    },

    async destroyTask(req, hc) {
      const starting = requireTask(req.taskId).starting;
      if (starting !== undefined) {
        // Destroyed while its start (or recovery) still runs: after it, so the driver destroys the
        // task it started rather than this record being dropped beside a task that keeps running.
        await starting.catch(() => undefined);
        requireTask(req.taskId);
      }
      await driver.destroyTask(req.taskId, { force: req.force }, call(hc));
      tasks.delete(req.taskId);
      return {};
    },

    async inspectTask(req, hc) {
      const record = requireTask(req.taskId);
      const r: TaskInspection = driver.inspectTask !== undefined ? await driver.inspectTask(req.taskId, call(hc)) : {};
      const stateIn = r.state ?? (record.exit !== undefined ? "exited" : "running");
      const state = typeof stateIn === "number" ? stateIn : STATE[stateIn];
      // null as undefined: a plain JS driver's "none" (as `??` took it before these checks).
      const exit = r.exit != null ? checkedExit(r.exit, "inspectTask: exit") : record.exit?.result;
      const completedAt = r.completedAt != null ? checkedDate(r.completedAt, "inspectTask: completedAt") : record.exit?.at;
      return {
        task: {
          id: req.taskId,
          name: record.task.name,
          state,
          startedAt: timestampFromDate(r.startedAt != null ? checkedDate(r.startedAt, "inspectTask: startedAt") : record.startedAt),
          // Always both, as Nomad's Go server sends them (Go's zero time, an empty result): its client
          // fails on a missing timestamp and dereferences the result.
          completedAt: completedAt !== undefined ? timestampFromDate(completedAt) : GO_ZERO_TIME,
          result: exit !== undefined ? taskExitResult(exit) : {},
        },
        driver: { attributes: { ...(r.attributes ?? {}) } },
        networkOverride: r.networkOverride,
      };
    },

    async recoverTask(req, hc) {
      const handle = req.handle;
      if (handle === undefined) throw invalidArgument("handle", "required");
      const cfg = handle.config;
      if (cfg === undefined) throw invalidArgument("handle.config", "required");
      const taskId = req.taskId !== "" ? req.taskId : cfg.id;
      if (taskId === "") throw invalidArgument("task_id", "must not be empty");
      // Already managed (Nomad re-sends RecoverTask after its own restart): nothing to do, once a
      // start or recovery still under way has succeeded (its failure is this call's too).
      const existing = tasks.get(taskId);
      if (existing !== undefined) {
        await existing.starting;
        return {};
      }
      if (driver.recoverTask === undefined) {
        throw new ConnectError(`driver ${JSON.stringify(driver.name)} cannot recover tasks`, Code.Unimplemented);
      }
      // Nomad's state database drops the config block (TaskConfig.rawDriverConfig is unexported in
      // Go): after an agent restart the handle has none, and that must not fail the recovery.
      // A block that no longer fits the schema (the plugin was upgraded) must not fail it either:
      // Nomad would start the task again beside the running one.
      let task: DriverTask<TC | undefined> = { ...cfg, id: taskId, driverConfig: undefined };
      if (cfg.msgpackDriverConfig.byteLength > 0) {
        try {
          task = decodeTask(task);
        } catch (err) {
          logger.warn("recover task: its config block does not fit the task schema; recovering without it", { task_id: taskId, error: (err as Error).message });
        }
      }
      const record: TaskRecord<TC | undefined> = { task, startedAt: new Date() };
      tasks.set(taskId, record);
      try {
        await (record.starting = Promise.resolve(
          driver.recoverTask(
            { task, driverState: handle.driverState, state: parseDriverState(handle.driverState), version: handle.version, handle },
            call(hc),
          ),
        ));
      } catch (err) {
        if (tasks.get(taskId) === record) tasks.delete(taskId);
        throw err;
      } finally {
        record.starting = undefined;
      }
      return {};
    },
  };

  if (driver.taskStats !== undefined) {
    const taskStats = driver.taskStats.bind(driver);
    // The sample is only ever an argument here, never a local of the generator below.
    const normalizeOrEnd = (taskId: string, sample: TaskStatsInput | undefined, host: HostCompute) => {
      if (sample === undefined) return undefined;
      try {
        return normalizeTaskStats(taskId, sample, host);
      } catch (err) {
        // `{ cpu: 5 }` from a plain JS driver: protobuf-es's message names no method.
        throw new ConnectError(`taskStats: a sample of the wrong shape (${(err as Error).message}): ${shown(sample)}`, Code.Internal);
      }
    };
    // A subclass, not Object.create(call(hc)): the signal getter reads a private field of its receiver.
    class DriverStatsContext extends DriverCallContext {
      constructor(
        hc: HandlerContext,
        readonly intervalMs: number,
      ) {
        super(hc);
      }
    }
    handlers.taskStats = async function* (req, hc) {
      // Opened after the plugin began to shut down (Nomad reopens a stream that ended): ends at once,
      // as the open ones did; the driver may have let go of its tasks.
      if (lifetime.signal.aborted) return;
      requireTask(req.taskId);
      const intervalMs = statsIntervalMs(req.collectionInterval);
      const ctx = new DriverStatsContext(hc, intervalMs) as unknown as TaskStatsContext<PC, TC>;
      const waits = new StreamWaits(hc.signal, lifetime.signal);
      try {
        for (;;) {
          // Held only until it is sent, not by this frame while it waits for the next interval: a
          // suspended generator keeps its live local variables (the driver's sample) alive.
          const stats = normalizeOrEnd(req.taskId, await taskStats(req.taskId, ctx), context.hostCompute);
          if (stats === undefined) return; // the task exited: end the stream (OK), as Go drivers do
          yield { stats };
          if (!(await waits.next(intervalMs))) return;
          // Destroyed meanwhile: the stream ends as it does for an exited task, not NotFound (an
          // ERROR line in Nomad's log for every task destroyed while its stats were collected).
          if (!tasks.has(req.taskId)) return;
        }
      } finally {
        waits.close();
      }
    };
  }

  if (driver.signalTask !== undefined) {
    handlers.signalTask = async (req, hc) => {
      requireTask(req.taskId);
      if (req.signal === "") throw invalidArgument("signal", "must not be empty");
      await driver.signalTask!(req.taskId, canonicalSignal(req.signal, "signal"), call(hc));
      return {};
    };
  }

  if (driver.execTask !== undefined || hasExec) {
    const limit = options.execTaskOutputLimit ?? CHECK_OUTPUT_LIMIT;
    handlers.execTask = async (req, hc) => {
      requireTask(req.taskId);
      if (req.command.length === 0 || req.command[0] === "") throw invalidArgument("command", "must not be empty");
      checkProcessStrings(req.command, (i) => `command[${i}]`);
      const timeoutMs = durationMs(req.timeout);
      // A driver's own execTask ends the command at the timeout and answers with what it got (as
      // Nomad's executor does); the signal only stops one that does not, a moment later. Run
      // through execTaskStreaming, the signal is what ends the command.
      const backstopMs = driver.execTask !== undefined ? timerDelayMs(timeoutMs + EXEC_TIMEOUT_GRACE_MS) : timeoutMs;
      const timeout = timeoutMs > 0 ? AbortSignal.timeout(backstopMs) : undefined;
      const { signal, dispose } = anySignal(hc.signal, timeout);
      try {
        const ctx = call(hc);
        if (driver.execTask !== undefined) {
          const r = await driver.execTask(req.taskId, req.command, { timeoutMs, signal }, ctx);
          return { stdout: r.stdout, stderr: r.stderr, result: toExitResult({ exitCode: r.exitCode, signal: r.signal }) };
        }
        const timedOut = () => timeout?.aborted === true && !hc.signal.aborted;
        let r: ExecTaskResult;
        try {
          if (driver.execTaskStreaming === undefined) {
            // Only the raw form: run it as a session without a terminal or input.
            const raw = driver.execTaskStreamingRaw!.bind(driver);
            r = await bufferedRawExec(req.taskId, req.command, limit, signal, timedOut, (requests) =>
              execStreaming(requests, { raw: (st) => raw(st, ctx) }, { signal, maxChunkSize: options.maxExecChunkSize }),
            );
          } else {
            const out = collector(limit);
            const err = collector(limit);
            const resize = new TerminalResizes();
            resize.close();
            const session: ExecSession = {
              taskId: req.taskId,
              command: req.command,
              tty: false,
              stdin: Readable.from([]),
              stdout: out.stream,
              stderr: err.stream,
              resize,
              signal,
            };
            let res: { exitCode: number; signal?: string | number | null | undefined };
            try {
              res = await driver.execTaskStreaming!(session, ctx);
            } catch (e) {
              if (!timedOut()) throw e;
              res = { exitCode: -1 };
            }
            for (const w of [out.stream, err.stream]) if (!w.writableEnded) w.end();
            await Promise.all([finished(out.stream), finished(err.stream)]);
            r = { stdout: out.bytes(), stderr: err.bytes(), exitCode: res.exitCode, signal: res.signal };
          }
        } catch (e) {
          // Run as an exec session, whose checks name the setup message's fields: ExecTaskRequest's
          // own is `command`.
          const ce = e instanceof ConnectError ? e : undefined;
          if (ce === undefined || !ce.rawMessage.startsWith("setup.command")) throw e;
          throw new ConnectError(ce.rawMessage.slice("setup.".length), ce.code, ce.metadata, undefined, ce.cause);
        }
        // Nomad's ExecScript: a command killed by a signal (its timeout's too) exits -1, without a signal.
        const killed = timedOut() || toExitResult({ exitCode: 0, signal: r.signal }).signal !== 0;
        return { stdout: r.stdout, stderr: r.stderr, result: killed ? { exitCode: -1, signal: 0, oomKilled: false } : toExitResult(r) };
      } finally {
        dispose();
      }
    };
  }

  if (hasExec) {
    const raw = driver.execTaskStreamingRaw?.bind(driver);
    const high = driver.execTaskStreaming?.bind(driver);
    handlers.execTaskStreaming = (requests, hc) => {
      const ctx = call(hc);
      return execStreaming(
        requests,
        { raw: raw && ((s) => raw(s, ctx)), exec: high && ((s) => high(s, ctx)) },
        {
          signal: hc.signal,
          maxChunkSize: options.maxExecChunkSize,
          checkSetup: (setup) => void requireTask(setup.taskId, "setup.task_id"),
        },
      );
    };
  }

  if (driver.createNetwork !== undefined) {
    handlers.createNetwork = async (req, hc) => {
      if (req.allocId === "") throw invalidArgument("alloc_id", "must not be empty");
      checkHostname(req.hostname);
      const r = await driver.createNetwork!(req.allocId, req.hostname, call(hc));
      return { isolationSpec: r.spec, created: r.created };
    };
  }
  if (driver.destroyNetwork !== undefined) {
    handlers.destroyNetwork = async (req, hc) => {
      if (req.allocId === "") throw invalidArgument("alloc_id", "must not be empty");
      await driver.destroyNetwork!(req.allocId, req.isolationSpec, call(hc));
      return {};
    };
  }

  refuseWhileShuttingDown(handlers, lifetime.signal);

  return {
    base,
    driver: handlers,
    context,
    async close() {
      endLifetime();
      await shutdownOnce();
    },
  };
}
