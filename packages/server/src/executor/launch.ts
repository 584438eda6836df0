import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import * as net from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import { ClientRuntime, ExecutorClient, GRPCControllerClient, PluginShutdownError } from "@nomadkit/client";
import type { ExecutorConfig } from "./main.js";

/**
 * Where a running executor listens: everything needed to reconnect to it after the driver
 * restarts. Store it in `TaskHandle.driver_state` ({@link encodeExecutorState}).
 */
export interface ExecutorReattach {
  /** Executor process id. */
  pid: number;
  /** `unix` or `tcp`. */
  network: "unix" | "tcp";
  /** Socket path, or `127.0.0.1:port`. */
  address: string;
}

/** Minimal logger for the executor's stderr lines (compatible with `@nomadkit/server`'s Logger). */
export interface ExecutorLogSink {
  debug(message: string, fields?: Record<string, unknown>): void;
}

/** Options for {@link launchExecutor}. */
export interface LaunchExecutorOptions {
  /** Executor configuration (log file, log level, compute override), passed as a JSON argument. */
  config?: ExecutorConfig;
  /** JS entry file of the executor; default {@link executorBinPath}() (or `NOMADKIT_EXECUTOR_PATH`). */
  executorPath?: string;
  /** Node binary; default `process.execPath`. */
  nodePath?: string;
  /** Extra arguments for node before the entry file (e.g. `--max-old-space-size=64`). */
  nodeArgs?: string[];
  /** Extra environment for the executor process (go-plugin variables are always set by us). */
  env?: NodeJS.ProcessEnv;
  /** Receives the executor's stderr lines (its log when `config.logFile` is not set) while this process lives. */
  logger?: ExecutorLogSink;
  /** How long to wait for the handshake; default 60 s (go-plugin's). */
  startTimeoutMs?: number;
}

/** Options for {@link reattachExecutor}. */
export interface ReattachExecutorOptions {
  /** How often to check whether a reattached executor is still alive; default 1000 ms. */
  livenessIntervalMs?: number;
}

const COOKIE_KEY = "NOMAD_PLUGIN_MAGIC_COOKIE";
const COOKIE_VALUE = "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255";
const GO_PLUGIN_ENV = /^(NOMAD_PLUGIN_MAGIC_COOKIE|PLUGIN_[A-Z_]+)$/;
/** go-plugin's Kill: how long the host waits after GRPCController.Shutdown before SIGKILL. */
const KILL_GRACE_MS = 2000;

function ownFile(): string | undefined {
  // CommonJS build: __filename is defined. ESM build (no import.meta allowed): our own frame.
  if (typeof __filename === "string") return __filename;
  const stack = new Error().stack ?? "";
  const m = /(file:\/\/\/[^\s)]+?):\d+:\d+/.exec(stack) ?? /\((\/[^\s)]+?):\d+:\d+\)/.exec(stack);
  if (!m) return undefined;
  return m[1]!.startsWith("file:") ? fileURLToPath(m[1]!) : m[1];
}

/**
 * Absolute path of the executor entry file shipped in `@nomadkit/server`
 * (`dist/cjs/executor/bin.js`), which a driver runs with `process.execPath`. Found from this
 * module's own location (works from dist and from sources); `NOMADKIT_EXECUTOR_PATH` overrides it
 * (bundled drivers).
 *
 * @example
 * ```ts
 * import { spawn } from "node:child_process";
 * import { executorBinPath } from "@nomadkit/server/executor";
 * console.log(process.execPath, executorBinPath());
 * ```
 */
export function executorBinPath(): string {
  const override = process.env.NOMADKIT_EXECUTOR_PATH;
  if (override) return override;
  const file = ownFile();
  if (file) {
    for (let dir = dirname(file); ; dir = dirname(dir)) {
      const pkg = join(dir, "package.json");
      if (existsSync(pkg)) {
        try {
          if ((JSON.parse(readFileSync(pkg, "utf8")) as { name?: string }).name === "@nomadkit/server") {
            return join(dir, "dist", "cjs", "executor", "bin.js");
          }
        } catch {
          // keep walking
        }
      }
      if (dirname(dir) === dir) break;
    }
  }
  throw new Error("cannot locate the nomadkit executor entry file; set NOMADKIT_EXECUTOR_PATH or pass executorPath");
}

/**
 * Serialises a reattach config as `TaskHandle.driver_state` bytes (JSON), optionally with the
 * driver's own fields next to it under `driver`.
 *
 * @example
 * ```ts
 * import { encodeExecutorState } from "@nomadkit/server/executor";
 * handle.driverState = encodeExecutorState(executor.reattach, { startedAt: Date.now() });
 * ```
 */
export function encodeExecutorState(reattach: ExecutorReattach, driver?: unknown): Uint8Array {
  const state: Record<string, unknown> = { executor: { pid: reattach.pid, network: reattach.network, address: reattach.address } };
  if (driver !== undefined) state.driver = driver;
  return new TextEncoder().encode(JSON.stringify(state));
}

/**
 * Parses `TaskHandle.driver_state` written by {@link encodeExecutorState}. Throws
 * InvalidArgument naming `driver_state` (and the bad key) for anything else.
 *
 * @example
 * ```ts
 * import { decodeExecutorState, reattachExecutor } from "@nomadkit/server/executor";
 * const { executor, driver } = decodeExecutorState(req.handle!.driverState);
 * const handle = await reattachExecutor(executor);
 * ```
 */
export function decodeExecutorState<D = unknown>(bytes: Uint8Array): { executor: ExecutorReattach; driver: D | undefined } {
  let parsed: { executor?: Partial<ExecutorReattach>; driver?: D };
  try {
    parsed = JSON.parse(new TextDecoder().decode(bytes)) as typeof parsed;
  } catch (err) {
    throw new ConnectError(`driver_state: not JSON: ${(err as Error).message}`, Code.InvalidArgument);
  }
  const e = parsed?.executor;
  if (!e || typeof e !== "object") throw new ConnectError("driver_state: missing executor", Code.InvalidArgument);
  if (!Number.isInteger(e.pid) || (e.pid as number) <= 0) throw new ConnectError("driver_state: executor.pid must be a positive integer", Code.InvalidArgument);
  if (e.network !== "unix" && e.network !== "tcp") throw new ConnectError('driver_state: executor.network must be "unix" or "tcp"', Code.InvalidArgument);
  if (typeof e.address !== "string" || e.address === "") throw new ConnectError("driver_state: executor.address must be a non-empty string", Code.InvalidArgument);
  return { executor: { pid: e.pid!, network: e.network, address: e.address }, driver: parsed.driver };
}

/** True while a process with this pid exists and is not a zombie. */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return true; // no procfs: trust kill(0)
  }
}

/**
 * A connection to one executor process: the typed {@link ExecutorClient}, the reattach config
 * for `driver_state`, and lifecycle helpers. Closing the handle never stops the executor; only
 * Shutdown (the RPC) or {@link ExecutorHandle.kill} do.
 */
export class ExecutorHandle {
  /** Typed Executor client; failures after the executor died reject with `PluginShutdownError`. */
  readonly client: ExecutorClient;
  /** What to store to reattach later. */
  readonly reattach: ExecutorReattach;
  /** Aborts once the executor process is known to be gone. */
  readonly exited: AbortSignal;
  private readonly runtime: ClientRuntime;
  private readonly sessions: Http2SessionManager;
  private readonly stopWatch: () => void;
  private readonly exitController: AbortController;

  /** @internal */
  constructor(reattach: ExecutorReattach, exitController: AbortController, stopWatch: () => void) {
    this.reattach = reattach;
    this.exitController = exitController;
    this.exited = exitController.signal;
    this.stopWatch = stopWatch;
    const { transport, sessions } = transportTo(reattach);
    this.sessions = sessions;
    this.runtime = new ClientRuntime(transport, { pluginExited: this.exited });
    this.client = new ExecutorClient(this.runtime);
  }

  /** Executor process id. */
  get pid(): number {
    return this.reattach.pid;
  }

  /** `TaskHandle.driver_state` bytes for this executor (see {@link encodeExecutorState}). */
  driverState(driver?: unknown): Uint8Array {
    return encodeExecutorState(this.reattach, driver);
  }

  /**
   * Stops the executor process the way go-plugin's Kill does: GRPCController.Shutdown, up to 2 s
   * for it to exit, then SIGKILL. The task is NOT stopped by this: call `client.shutdown` first.
   */
  async kill(): Promise<void> {
    if (!this.exited.aborted) {
      const ctl = new GRPCControllerClient(this.runtime);
      await ctl.shutdown({}, { timeoutMs: KILL_GRACE_MS }).catch(() => undefined);
      await waitUntil(this.exited, KILL_GRACE_MS);
      if (!this.exited.aborted) {
        try {
          process.kill(this.reattach.pid, "SIGKILL");
        } catch {
          // gone
        }
        await waitUntil(this.exited, KILL_GRACE_MS);
      }
    }
    this.close();
  }

  /**
   * Shutdown RPC that tolerates the executor exiting right after answering (it does, by design):
   * resolves once the task is stopped.
   */
  async shutdownTask(signal = "", gracePeriodMs = 0): Promise<void> {
    try {
      await this.client.shutdown({ signal, gracePeriod: BigInt(Math.round(gracePeriodMs)) * 1_000_000n });
    } catch (err) {
      if (!(err instanceof PluginShutdownError)) throw err;
    }
  }

  /** Drops the connection and liveness watch; the executor keeps running. */
  close(): void {
    this.stopWatch();
    this.sessions.abort();
  }

  /** @internal marks the executor as gone */
  markExited(): void {
    this.exitController.abort(new Error(`executor ${this.reattach.pid} exited`));
  }
}

function waitUntil(signal: AbortSignal, ms: number): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

function transportTo(r: ExecutorReattach): { transport: Transport; sessions: Http2SessionManager } {
  const sessions =
    r.network === "unix"
      ? new Http2SessionManager("http://localhost", undefined, { createConnection: () => net.connect(r.address) })
      : new Http2SessionManager(`http://${r.address}`);
  const transport = createGrpcTransport({
    baseUrl: r.network === "unix" ? "http://localhost" : `http://${r.address}`,
    acceptCompression: [],
    sessionManager: sessions,
  });
  return { transport, sessions };
}

function pollLiveness(pid: number, intervalMs: number, onGone: () => void): () => void {
  const timer = setInterval(() => {
    if (!isProcessAlive(pid)) {
      clearInterval(timer);
      onGone();
    }
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * Reconnects to a running executor from its reattach config (e.g. after a driver restart, from
 * `driver_state`). Fails with `PluginShutdownError` when the process is gone. Liveness is then
 * polled so calls fail fast (`PluginShutdownError`) if the executor dies.
 *
 * @example
 * ```ts
 * import { decodeExecutorState, reattachExecutor } from "@nomadkit/server/executor";
 * const { executor } = decodeExecutorState(handle.driverState);
 * const exe = await reattachExecutor(executor);
 * const { process } = await exe.client.wait({});
 * ```
 */
export async function reattachExecutor(reattach: ExecutorReattach, options: ReattachExecutorOptions = {}): Promise<ExecutorHandle> {
  if (!isProcessAlive(reattach.pid)) throw new PluginShutdownError({ cause: new Error(`executor process ${reattach.pid} is gone`) });
  const ac = new AbortController();
  let handle: ExecutorHandle | undefined;
  const stop = pollLiveness(reattach.pid, options.livenessIntervalMs ?? 1000, () => handle?.markExited());
  handle = new ExecutorHandle({ ...reattach }, ac, stop);
  return handle;
}

/**
 * Starts a detached executor process for one task and connects to it. The executor runs in its
 * own session and process group with no stdio tied to this process after the go-plugin
 * handshake, so the driver may exit or be killed (even SIGKILL) while the executor and its task
 * keep running; reattach with {@link reattachExecutor} from `handle.reattach`.
 *
 * @example
 * ```ts
 * import { launchExecutor } from "@nomadkit/server/executor";
 * const exe = await launchExecutor({ config: { logFile: `${taskDir}/executor.log` } });
 * await exe.client.launch({ cmd: "/bin/sleep", args: ["3600"], env: ["PATH=/bin"], stdoutPath, stderrPath });
 * taskHandle.driverState = exe.driverState();
 * ```
 */
export async function launchExecutor(options: LaunchExecutorOptions = {}): Promise<ExecutorHandle> {
  const entry = options.executorPath ?? executorBinPath();
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries({ ...process.env, ...options.env })) {
    // The driver's own go-plugin variables (e.g. AutoMTLS) must not leak into the executor.
    if (!GO_PLUGIN_ENV.test(k)) env[k] = v;
  }
  env[COOKIE_KEY] = COOKIE_VALUE;
  env.PLUGIN_PROTOCOL_VERSIONS = "2";
  env.PLUGIN_MIN_PORT = "0";
  env.PLUGIN_MAX_PORT = "0";
  const args = [...(options.nodeArgs ?? []), entry, JSON.stringify(options.config ?? {})];
  const child = spawn(options.nodePath ?? process.execPath, args, {
    env,
    stdio: ["ignore", "pipe", "pipe"],
    // New session: no SIGHUP/SIGINT from the driver's terminal, not killed with its process group.
    detached: true,
    cwd: "/",
  });
  const ac = new AbortController();
  let handle: ExecutorHandle | undefined;
  child.once("exit", () => {
    ac.abort(new Error(`executor ${child.pid} exited`));
    handle?.markExited();
  });
  const reattach = await readHandshake(child, options);
  // Nothing ties the driver's lifetime (or event loop) to the executor any more.
  child.unref();
  (child.stdout as net.Socket).destroy();
  const stderr = child.stderr as net.Socket;
  if (options.logger) stderr.unref();
  else stderr.destroy();
  handle = new ExecutorHandle(reattach, ac, () => undefined);
  if (ac.signal.aborted) handle.markExited();
  return handle;
}

function readHandshake(child: ChildProcess, options: LaunchExecutorOptions): Promise<ExecutorReattach> {
  return new Promise((resolve, reject) => {
    let out = "";
    let errText = "";
    const timer = setTimeout(() => fail(new Error(`executor did not complete the go-plugin handshake within ${options.startTimeoutMs ?? 60_000} ms`)), options.startTimeoutMs ?? 60_000);
    const log = options.logger;
    let partial = "";
    const onErr = (b: Buffer) => {
      if (errText.length < 16_384) errText += b.toString("utf8");
      if (log) {
        const lines = (partial + b.toString("utf8")).split("\n");
        partial = lines.pop() ?? "";
        for (const line of lines) if (line) log.debug(line, { executor_pid: child.pid });
      }
    };
    child.stderr!.on("data", onErr);
    const onOut = (b: Buffer) => {
      out += b.toString("utf8");
      const nl = out.indexOf("\n");
      if (nl < 0) return;
      const line = out.slice(0, nl).trim();
      const parts = line.split("|");
      if (parts.length < 5 || parts[0] !== "1" || parts[4] !== "grpc" || (parts[2] !== "unix" && parts[2] !== "tcp")) {
        return fail(new Error(`executor wrote an invalid handshake line: ${JSON.stringify(line.slice(0, 200))}`));
      }
      if (parts[5]) return fail(new Error("executor unexpectedly enabled TLS"));
      done();
      resolve({ pid: child.pid!, network: parts[2] as "unix" | "tcp", address: parts[3]! });
    };
    child.stdout!.on("data", onOut);
    const onExit = (code: number | null, sig: NodeJS.Signals | null) =>
      fail(new Error(`executor exited before the handshake (${sig ?? `exit ${code}`}): ${errText.trim().slice(-2000)}`));
    child.once("exit", onExit);
    child.once("error", (err) => fail(new Error(`cannot start the executor: ${err.message}`)));
    function done() {
      clearTimeout(timer);
      child.stdout!.off("data", onOut);
      child.off("exit", onExit);
      if (!log) child.stderr!.off("data", onErr);
    }
    function fail(err: Error) {
      done();
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // gone
      }
      reject(err);
    }
  });
}
