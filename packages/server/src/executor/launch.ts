import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import type * as net from "node:net";
import { dirname, join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import type { PluginClient, PluginLogger } from "@nomadkit/client";
import { ExecutorClient } from "@nomadkit/client/gen/hashicorp/nomad/plugins/executor/proto/executor_nomadkit.js";
import { PluginShutdownError } from "@nomadkit/client/runtime";
import { withoutGoPluginVariables } from "../goplugin/env.js";
import { ownFile } from "../runtime/own-file.js";
import { timerDelayMs } from "../runtime/timer-delay.js";
import { capMallocArenas } from "./malloc-arenas.js";

// The go-plugin host runtime (process launch, handshake parsing, HTTP/2 connections) is loaded when
// the first executor is launched or reattached, not when a driver starts: plugin start-up stays short.
type GoPluginHost = typeof import("@nomadkit/client");
let goPluginHost: Promise<GoPluginHost> | undefined;
const loadGoPluginHost = (): Promise<GoPluginHost> => (goPluginHost ??= import("@nomadkit/client"));
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
  /**
   * Extra environment for the executor process. go-plugin's variables are launchExecutor's to set
   * and the driver's own are never passed on, with one exception: a `PLUGIN_UNIX_SOCKET_DIR` given
   * here is honoured, and the executor makes its socket's private directory under it (e.g. where a
   * temp-dir cleaner does not reach; it must exist). Tasks do not inherit it.
   *
   * @example
   * ```ts
   * await launchExecutor({ env: { PLUGIN_UNIX_SOCKET_DIR: "/run/my-driver" } });
   * ```
   */
  env?: NodeJS.ProcessEnv;
  /**
   * Receives the executor's log (hclog JSON on its stderr, parsed like `launchPlugin` does) while this
   * process lives; with `config.logFile` set the log goes to that file instead.
   */
  logger?: PluginLogger;
  /** How long to wait for the handshake; default 60 s (go-plugin's). */
  startTimeoutMs?: number;
}

/** Options for {@link reattachExecutor}. */
export interface ReattachExecutorOptions {
  /** How often to check whether the executor is still alive; default 500 ms (reattachPlugin's). */
  pollIntervalMs?: number;
}

/**
 * Absolute path of the executor entry file shipped in `@nomadkit/server`
 * (`dist/cjs/executor/bin.js`), which a driver runs with `process.execPath`. Found from this
 * module's own location (works from dist and from sources, and from a bundle with `@nomadkit/server`
 * installed next to it); `NOMADKIT_EXECUTOR_PATH` overrides it.
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
    // A bundled driver carries the SDK inside its bundle: use the @nomadkit/server installed next
    // to it (Node's resolution from the bundle's directory).
    try {
      return join(dirname(createRequire(file).resolve("@nomadkit/server/package.json")), "dist", "cjs", "executor", "bin.js");
    } catch {
      // not installed next to it either
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
 * Checks and converts the driver's own part of a `driver_state` ({@link decodeExecutorState}):
 * returns it typed, or calls `invalid` (which throws) naming the bad field.
 *
 * @example
 * ```ts
 * const parsePid: DriverStateParser<{ pid: number }> = (v, invalid) => {
 *   const pid = (v as { pid?: unknown } | null)?.pid;
 *   return typeof pid === "number" ? { pid } : invalid("pid", "must be a number");
 * };
 * const { driver } = decodeExecutorState(handle.driverState, parsePid);
 * ```
 */
export type DriverStateParser<D> = (value: unknown, invalid: (field: string, problem: string) => never) => D;

/**
 * Parses `TaskHandle.driver_state` written by {@link encodeExecutorState}. Throws
 * InvalidArgument naming `driver_state` (and the bad key) for anything else. The driver's own part
 * is returned as it is, unless `parseDriver` is given: it then checks and converts that part (when
 * present), and what it refuses is InvalidArgument naming the field too
 * (`driver_state: driver.pid must be ...`), not a failure somewhere later. Accept there every
 * shape an earlier build of the driver wrote: Nomad hands those back after an upgrade.
 *
 * @example
 * ```ts
 * import { decodeExecutorState, reattachExecutor } from "@nomadkit/server/executor";
 * const { executor, driver } = decodeExecutorState(req.handle!.driverState, (v, invalid) => {
 *   const pid = (v as { pid?: unknown })?.pid;
 *   if (!Number.isInteger(pid)) invalid("pid", "must be an integer");
 *   return { pid: pid as number };
 * });
 * const handle = await reattachExecutor(executor);
 * ```
 */
export function decodeExecutorState<D = unknown>(
  bytes: Uint8Array,
  parseDriver?: DriverStateParser<D>,
): {
  /** Where to reattach to the executor ({@link reattachExecutor}). */
  executor: ExecutorReattach;
  /** The driver's own state passed to {@link encodeExecutorState}, if any (checked by `parseDriver` if given). */
  driver: D | undefined;
} {
  let parsed: { executor?: Partial<ExecutorReattach>; driver?: unknown };
  const text = new TextDecoder().decode(bytes);
  try {
    parsed = JSON.parse(text) as typeof parsed;
  } catch {
    // Quoted, so that garbage (control characters, a terminal's escapes) is shown, not obeyed.
    const start = text.length > 40 ? `${text.slice(0, 40)}…` : text;
    throw new ConnectError(`driver_state: not JSON (${bytes.byteLength} bytes: ${JSON.stringify(start)})`, Code.InvalidArgument);
  }
  const e = parsed?.executor;
  if (!e || typeof e !== "object") throw new ConnectError("driver_state: missing executor", Code.InvalidArgument);
  if (!Number.isInteger(e.pid) || (e.pid as number) <= 0) throw new ConnectError("driver_state: executor.pid must be a positive integer", Code.InvalidArgument);
  if (e.network !== "unix" && e.network !== "tcp") throw new ConnectError('driver_state: executor.network must be "unix" or "tcp"', Code.InvalidArgument);
  if (typeof e.address !== "string" || e.address === "") throw new ConnectError("driver_state: executor.address must be a non-empty string", Code.InvalidArgument);
  const executor: ExecutorReattach = { pid: e.pid!, network: e.network, address: e.address };
  if (parseDriver === undefined || parsed.driver === undefined) return { executor, driver: parsed.driver as D | undefined };
  const invalid = (field: string, problem: string): never => {
    throw new ConnectError(`driver_state: driver${field ? `.${field}` : ""} ${problem}`, Code.InvalidArgument);
  };
  let driver: D;
  try {
    driver = parseDriver(parsed.driver, invalid);
  } catch (err) {
    if (err instanceof ConnectError) throw err;
    throw new ConnectError(`driver_state: driver: ${(err as Error).message}`, Code.InvalidArgument);
  }
  return { executor, driver };
}

/**
 * A connection to one executor process: the typed {@link @nomadkit/client!index.ExecutorClient}, the reattach config
 * for `driver_state`, and lifecycle helpers, over `@nomadkit/client`'s go-plugin host runtime
 * (`reattachPlugin`). Closing the handle never stops an executor that has launched its task; only
 * Shutdown (the RPC) or {@link ExecutorHandle.kill} do. One that never launched a task exits once
 * its last connection is closed (its driver died during StartTask: nobody could reattach to it).
 *
 * @example
 * ```ts
 * import { launchExecutor } from "@nomadkit/server/executor";
 * const exe = await launchExecutor();
 * await exe.client.launch({ cmd: "/bin/sleep", args: ["60"] });
 * await exe.shutdownTask("SIGTERM", 5000); // the executor exits after this
 * exe.close();
 * ```
 */
export class ExecutorHandle {
  /** Typed Executor client; failures after the executor died reject with `PluginShutdownError`. */
  readonly client: ExecutorClient;
  /** What to store to reattach later. */
  readonly reattach: ExecutorReattach;
  /** The underlying go-plugin connection (health, controller, runtime). */
  readonly plugin: PluginClient;

  /** @internal use {@link launchExecutor} or {@link reattachExecutor} */
  constructor(plugin: PluginClient) {
    this.plugin = plugin;
    this.reattach = { pid: plugin.pid, network: plugin.network, address: plugin.address };
    this.client = new ExecutorClient(plugin.runtime);
  }

  /** Executor process id. */
  get pid(): number {
    return this.reattach.pid;
  }

  /** Aborts once the executor process is known to be gone. */
  get exited(): AbortSignal {
    return this.plugin.exitSignal;
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
    await this.plugin.kill();
  }

  /**
   * Shutdown RPC (signal, grace period, then SIGKILL of the task), tolerating the executor
   * exiting right after it answered, which it does by design. Resolves once the task is stopped.
   */
  async shutdownTask(signal = "", gracePeriodMs = 0): Promise<void> {
    try {
      await this.client.shutdown({ signal, gracePeriod: BigInt(Math.round(gracePeriodMs)) * 1_000_000n });
    } catch (err) {
      if (!(err instanceof PluginShutdownError)) throw err;
    }
  }

  /**
   * Drops the connection; the executor keeps running, unless no task was ever launched in it and
   * this was its last connection (it then exits, as when its driver dies before Launch).
   */
  close(): void {
    this.plugin.close();
  }
}

/**
 * Reconnects to a running executor from its reattach config (e.g. after a driver restart, from
 * `driver_state`), through `@nomadkit/client`'s `reattachPlugin`: rejects with
 * `PluginLaunchError` when the process is gone or does not answer. The executor's liveness is then
 * polled, so calls fail with `PluginShutdownError` once it dies.
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
  const { reattachPlugin } = await loadGoPluginHost();
  const opts: Parameters<typeof reattachPlugin>[1] = {};
  if (options.pollIntervalMs !== undefined) opts.pollIntervalMs = options.pollIntervalMs;
  const plugin = await reattachPlugin({ pid: reattach.pid, network: reattach.network, address: reattach.address }, opts);
  return new ExecutorHandle(plugin);
}

/**
 * Starts a detached executor process for one task and connects to it. The executor runs in its
 * own session and process group with no stdio tied to this process after the go-plugin
 * handshake, so the driver may exit or be killed (even SIGKILL) while the executor and its task
 * keep running; reattach with {@link reattachExecutor} from `handle.reattach`. An executor whose
 * driver goes (its connections closed) before a Launch succeeded exits instead: with no handle
 * returned, nobody could ever reattach to it. Unless the
 * environment sets `MALLOC_ARENA_MAX`, the executor runs with glibc's malloc arenas capped at 2
 * (~1 MiB less memory per task); its tasks do not inherit that setting.
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
  const host = await loadGoPluginHost();
  const { NOMAD_PLUGIN_COOKIE } = host;
  const entry = options.executorPath ?? executorBinPath();
  // The driver's own go-plugin variables (e.g. AutoMTLS's) must not leak into the executor; where
  // to put its socket is the one the caller may choose (as go-plugin hosts may for their plugins).
  const env: NodeJS.ProcessEnv = withoutGoPluginVariables({ ...process.env, ...options.env });
  const socketDir = options.env?.PLUGIN_UNIX_SOCKET_DIR;
  if (socketDir) env.PLUGIN_UNIX_SOCKET_DIR = socketDir;
  env[NOMAD_PLUGIN_COOKIE.key] = NOMAD_PLUGIN_COOKIE.value;
  env.PLUGIN_PROTOCOL_VERSIONS = "2";
  env.PLUGIN_MIN_PORT = "0";
  env.PLUGIN_MAX_PORT = "0";
  capMallocArenas(env);
  const args = [...(options.nodeArgs ?? []), entry, JSON.stringify(options.config ?? {})];
  const child = spawn(options.nodePath ?? process.execPath, args, {
    env,
    stdio: ["ignore", "pipe", "pipe"],
    // New session: no SIGHUP/SIGINT from the driver's terminal, not killed with its process group.
    detached: true,
    cwd: "/",
  });
  const reattach = await readHandshake(child, options, host);
  // Nothing ties the driver's lifetime (or event loop) to the executor any more.
  child.unref();
  (child.stdout as net.Socket).destroy();
  const stderr = child.stderr as net.Socket;
  if (options.logger) stderr.unref();
  else stderr.destroy();
  try {
    return await reattachExecutor(reattach);
  } catch (err) {
    killGroup(child.pid!);
    throw err;
  }
}

function killGroup(pid: number): void {
  try {
    process.kill(-pid, "SIGKILL");
  } catch {
    // gone
  }
}

function readHandshake(child: ChildProcess, options: LaunchExecutorOptions, host: GoPluginHost): Promise<ExecutorReattach> {
  const { LineReader, PluginLaunchError, parseHandshake, parseLogLine } = host;
  return new Promise((resolve, reject) => {
    const cannotStart = (err: Error) => new PluginLaunchError(`cannot start the nomadkit executor: ${err.message}`);
    // A spawn without a free file descriptor has no stdio: its error event (unheard, it would crash
    // the driver) is all there is.
    if (child.stdout == null || child.stderr == null) {
      child.once("error", (err) => reject(cannotStart(err)));
      return;
    }
    let out = "";
    const log = options.logger;
    // As go-plugin's host reads it: a character split between two reads is decoded whole.
    const stderr = new LineReader((line) => {
      if (log && line) log(parseLogLine(line));
    });
    const errText = () => stderr.recent().trim().slice(-4000);
    const timer = setTimeout(() => fail(new PluginLaunchError(`nomadkit executor did not complete the go-plugin handshake within ${options.startTimeoutMs ?? 60_000} ms`, errText())), timerDelayMs(options.startTimeoutMs ?? 60_000));
    const onErr = (b: Buffer) => stderr.push(b);
    child.stderr!.on("data", onErr);
    if (log) child.stderr!.once("end", () => stderr.end());
    const onOut = (b: Buffer) => {
      out += b.toString("utf8");
      const nl = out.indexOf("\n");
      if (nl < 0) return;
      let hs: ReturnType<typeof parseHandshake>;
      try {
        hs = parseHandshake(out.slice(0, nl), [2], "nomadkit executor");
      } catch (err) {
        return fail(err as Error);
      }
      if (hs.serverCert) return fail(new PluginLaunchError("nomadkit executor unexpectedly enabled TLS"));
      done();
      resolve({ pid: child.pid!, network: hs.network, address: hs.address });
    };
    child.stdout!.on("data", onOut);
    const onExit = (code: number | null, sig: NodeJS.Signals | null) =>
      fail(new PluginLaunchError(`nomadkit executor exited before the handshake (${sig ?? `exit ${code}`})`, errText()));
    child.once("exit", onExit);
    child.once("error", (err) => fail(cannotStart(err)));
    function done() {
      clearTimeout(timer);
      child.stdout!.off("data", onOut);
      child.off("exit", onExit);
      if (!log) child.stderr!.off("data", onErr);
    }
    function fail(err: Error) {
      done();
      if (child.pid !== undefined) killGroup(child.pid);
      reject(err);
    }
  });
}
