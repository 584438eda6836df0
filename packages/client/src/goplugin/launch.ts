import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { procInfo, processDescendants } from "../process-tree.js";
import * as net from "node:net";
import * as tls from "node:tls";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import {
  Http2SessionManager,
  createGrpcTransport,
} from "@connectrpc/connect-node";
import { ClientRuntime } from "../runtime/client-runtime.js";
import { registerPluginSessions } from "../runtime/h2-call.js";
import { answeredByPlugin } from "../runtime/normalize.js";
import { markCalls, PluginSessionManager } from "../runtime/sessions.js";
import { checkUnixSocketPath, connectUnixSocket } from "../runtime/unix-socket.js";
import type { DEFAULT_CONNECT_TIMEOUT_MS } from "../runtime/h2-handshake.js";
import { BasePluginClient } from "../gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js";
import { DriverClient } from "../gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { HealthClient } from "../gen/grpc/health/v1/health_nomadkit.js";
import { GRPCControllerClient } from "../gen/plugin/grpc_controller_nomadkit.js";
import { GRPCStdioClient } from "../gen/plugin/grpc_stdio_nomadkit.js";
import {
  generateSelfSignedCertificate,
  handshakeCertToPem,
} from "./certificate.js";
import {
  PluginLaunchError,
  parseHandshake,
  tcpTarget,
  type Handshake,
} from "./handshake.js";
import { removePluginSocketDir } from "./socket-dir.js";
import { describeSpawnFailure } from "./spawn-failure.js";
import {
  LineReader,
  parseLogLine,
  type PluginLogEntry,
  type PluginLogger,
} from "./hclog.js";
import { anySignal } from "../runtime/signals.js";

/** Nomad's magic cookie, the default of {@link launchPlugin}. */
export const NOMAD_PLUGIN_COOKIE = Object.freeze({
  /** Environment variable the plugin checks, so it refuses to run when started by hand. */
  key: "NOMAD_PLUGIN_MAGIC_COOKIE",
  /** Value it must have. */
  value: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
});

/** How long go-plugin hosts wait for the handshake. */
export const DEFAULT_START_TIMEOUT_MS = 60_000;
/** The longest delay a Node timer honours, in ms (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** How long `kill()` waits for the process after GRPCController.Shutdown before SIGKILL. */
export const DEFAULT_KILL_TIMEOUT_MS = 2_000;

/** Options shared by {@link launchPlugin} and {@link reattachPlugin}. */
export interface PluginConnectOptions {
  /** Receives the plugin's stderr, parsed as hclog (JSON or text) lines. Default: dropped. */
  logger?: PluginLogger;
  /** Receives what the plugin sends on GRPCStdio's STDOUT channel. Default: dropped (as Nomad does). */
  onStdout?(data: Uint8Array): void;
  /** Receives what the plugin sends on GRPCStdio's STDERR channel. Default: dropped. */
  onStderr?(data: Uint8Array): void;
  /** Grace for turning transport failures into `PluginShutdownError` (see `ClientOptions`). */
  shutdownGraceMs?: number;
  /** How long `kill()` waits for the exit after GRPCController.Shutdown before SIGKILL; default 2000. */
  killTimeoutMs?: number;
  /**
   * How long a new connection to the plugin may take until its HTTP/2 SETTINGS arrive (TLS
   * included) before the calls waiting for it fail with Unavailable naming the socket, as grpc-go
   * gives up on a connection after its connect timeout. Default {@link DEFAULT_CONNECT_TIMEOUT_MS}
   * (20 s); ≤ 0: no limit.
   */
  connectTimeoutMs?: number;
}

/** Options for {@link launchPlugin}. */
export interface LaunchPluginOptions extends PluginConnectOptions {
  /** Extra environment, merged over `process.env` (the go-plugin variables win). */
  env?: NodeJS.ProcessEnv;
  /** Working directory of the plugin process; default the current one. */
  cwd?: string;
  /** Magic cookie; default Nomad's ({@link NOMAD_PLUGIN_COOKIE}). */
  cookie?: {
    /** Environment variable name. */
    key: string;
    /** Its value. */
    value: string;
  };
  /** App protocol versions offered (`PLUGIN_PROTOCOL_VERSIONS`); default `[2]`. */
  protocolVersions?: readonly number[];
  /**
   * `PLUGIN_MIN_PORT` for plugins that listen on TCP; default 0 (with `maxPort` 0: any port). A
   * range with `minPort` above `maxPort` is refused before the plugin starts.
   */
  minPort?: number;
  /** `PLUGIN_MAX_PORT`, the top of the TCP port range; default 0. */
  maxPort?: number;
  /** `PLUGIN_UNIX_SOCKET_DIR`. */
  unixSocketDir?: string;
  /** `PLUGIN_UNIX_SOCKET_GROUP` (name or gid). */
  unixSocketGroup?: string;
  /**
   * go-plugin AutoMTLS: generate a client certificate, pass it in `PLUGIN_CLIENT_CERT`, and talk TLS
   * to the plugin, trusting only the certificate from its handshake. Default false (Nomad's setting).
   */
  autoMTLS?: boolean;
  /** How long to wait for the handshake line; default 60 s like go-plugin. Above 2^31-1 ms (~24.8 days): no limit. */
  startTimeoutMs?: number;
  /**
   * Gives up the launch (the process is killed, the promise rejects with {@link PluginLaunchError})
   * when aborted before the plugin is connected; no effect afterwards.
   */
  signal?: AbortSignal;
}

/** How a plugin process ended. */
export interface PluginExit {
  /** Exit status; null when killed by a signal, or when reattached (the status is not observable). */
  code: number | null;
  /** Signal that ended the process; null when it exited normally, or when reattached. */
  signal: NodeJS.Signals | null;
}

/** Everything needed to connect to a running plugin again (go-plugin's ReattachConfig). */
export interface ReattachConfig {
  /** Process id of the running plugin; used to detect its exit and for the final SIGKILL. */
  pid: number;
  /** Transport from the handshake. */
  network: "unix" | "tcp";
  /** Socket path (`unix`) or `host:port` (`tcp`) from the handshake. */
  address: string;
  /** App protocol version from the handshake; informational. */
  protocolVersion?: number;
  /** AutoMTLS material, when the plugin was launched with it. */
  tls?: {
    /** The plugin's certificate (from handshake field 6), the only one trusted. */
    serverCertPem: string;
    /** The client certificate passed in `PLUGIN_CLIENT_CERT` at launch. */
    clientCertPem: string;
    /** Private key of the client certificate. */
    clientKeyPem: string;
  };
}

/** A connected plugin: typed clients plus process control. */
export interface PluginClient {
  /** Process id of the plugin. */
  readonly pid: number;
  /** Transport the plugin listens on (from the handshake). */
  readonly network: "unix" | "tcp";
  /** Socket path (`unix`) or `host:port` (`tcp`). */
  readonly address: string;
  /** The parsed handshake (launch) or a synthesized one (reattach). */
  readonly handshake: Handshake;
  /** Connect-node gRPC transport to the plugin. */
  readonly transport: Transport;
  /** The call layer all typed clients share (wired to `exitSignal`). */
  readonly runtime: ClientRuntime;
  /** grpc.health.v1 client; go-plugin plugins report service `plugin` as SERVING. */
  readonly health: HealthClient;
  /** go-plugin's GRPCController (Shutdown); prefer {@link PluginClient.kill}. */
  readonly controller: GRPCControllerClient;
  /** go-plugin's GRPCStdio; already streamed into `onStdout`/`onStderr`, no need to call it. */
  readonly stdio: GRPCStdioClient;
  /** Nomad's BasePlugin service: PluginInfo, ConfigSchema, SetConfig. */
  readonly basePlugin: BasePluginClient;
  /** Nomad's Driver service (task lifecycle, fingerprint, events, exec). */
  readonly driver: DriverClient;
  /** Resolves when the process has exited (never rejects). */
  readonly exited: Promise<PluginExit>;
  /** Aborted when the process has exited; feeds `PluginShutdownError`. */
  readonly exitSignal: AbortSignal;
  /** The child process (launch only). */
  readonly process?: ChildProcess;
  /** What {@link reattachPlugin} needs to connect to this plugin again. */
  readonly reattachConfig: ReattachConfig;
  /** The last lines of the plugin's stderr (launch only). */
  recentStderr(): string;
  /**
   * Stops the plugin like go-plugin: GRPCController.Shutdown, wait up to `killTimeoutMs` (2 s) for
   * the exit, then SIGKILL. Resolves with how the process ended (null code/signal when reattached).
   * Rejects when a reattached plugin that outlived Shutdown may not be killed by this process
   * (SIGKILL fails with EPERM: another user's); the connection is closed then.
   */
  kill(): Promise<PluginExit>;
  /**
   * SIGKILLs the plugin at once, without GRPCController.Shutdown, and removes the unix socket
   * directory it can then no longer remove itself: the last resort of a host that is exiting before
   * it could {@link kill} the plugin, in a process `"exit"` listener, where nothing asynchronous runs
   * any more (left, the plugin would run on, reparented to init). `exited` resolves as after `kill()`.
   * Does nothing once the process has exited. Throws when SIGKILL is not permitted (a reattached
   * plugin of another user). With `processTree`, every process the plugin started and that is still
   * below it (an executor, its task, exec sessions), listed from /proc before the plugin is killed,
   * is SIGKILLed too: they outlive their plugin by design, for a host that recovers them, which a
   * host exiting for good will not be.
   *
   * @example
   * ```ts
   * const atExit = () => plugin.killSync({ processTree: true });
   * process.on("exit", atExit);
   * try {
   *   await work(plugin);
   * } finally {
   *   await plugin.kill();
   *   process.off("exit", atExit);
   * }
   * ```
   */
  killSync(options?: { processTree?: boolean }): void;
  /**
   * Closes the connection without stopping the plugin: it keeps running (reattach later with
   * {@link reattachConfig}) and no longer keeps this process alive.
   */
  close(): void;
}

interface ConnectionParams {
  network: "unix" | "tcp";
  address: string;
  tls?: { serverCertPem: string; certPem: string; keyPem: string };
  /** `PluginConnectOptions.connectTimeoutMs`. */
  connectTimeoutMs?: number;
}

function createTransport(params: ConnectionParams): {
  transport: Transport;
  sessions: Http2SessionManager;
} {
  const { network, address } = params;
  let target: { path: string } | { host: string; port: number };
  if (network === "unix") target = { path: address };
  else {
    const t = tcpTarget(address);
    if (t === undefined)
      throw new PluginLaunchError(
        `invalid tcp address ${JSON.stringify(address)}`,
      );
    target = t;
  }
  const t = params.tls;
  const createConnection = t
    ? () => {
        if ("path" in target) checkUnixSocketPath(target.path);
        return tls.connect({
          ...target,
          servername: "localhost",
          ca: t.serverCertPem,
          cert: t.certPem,
          key: t.keyPem,
          ALPNProtocols: ["h2"],
          minVersion: "TLSv1.2",
        });
      }
    : "path" in target
      ? () => connectUnixSocket(target.path)
      : () => net.connect(target);
  const baseUrl = t ? "https://localhost" : "http://localhost";
  // Enlarged HTTP/2 windows: exec output and other streams are not held to 64 KiB per round trip.
  const sessions = new PluginSessionManager(baseUrl, { createConnection }, { connectTimeoutMs: params.connectTimeoutMs, target: `${network}:${address}` });
  const transport = createGrpcTransport({
    baseUrl,
    sessionManager: sessions,
    acceptCompression: [],
    interceptors: [markCalls],
  });
  // Unary calls (ClientRuntime) and relays (rawBidiStream) run directly on these sessions.
  registerPluginSessions(transport, sessions);
  return { transport, sessions };
}

function describeLine(raw: string): string {
  const e = parseLogLine(raw);
  if (!e.structured) return raw;
  const fields = Object.entries(e.fields)
    .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join(" ");
  return `[${e.level.toUpperCase()}] ${e.module ? e.module + ": " : ""}${e.message}${fields ? " " + fields : ""}`;
}

function pluginName(cmd: string, args: readonly string[]): string {
  return [cmd, ...args]
    .map((a) => (/\s/.test(a) ? JSON.stringify(a) : a))
    .join(" ");
}

interface ClientParts {
  pid: number;
  handshake: Handshake;
  params: ConnectionParams;
  exited: Promise<PluginExit>;
  exitSignal: AbortSignal;
  /**
   * SIGKILL, `timeoutMs` after Shutdown (undefined: without one); throws when the process cannot be
   * killed from here.
   */
  forceKill(timeoutMs?: number): void;
  process?: ChildProcess;
  recentStderr(): string;
  onClose?(): void;
  options: PluginConnectOptions;
  /** When the process was started (ms since the epoch), 0 when unknown: bounds which socket directory is its. */
  startedAt: number;
  /** Socket directories never removed: the plugin's configured PLUGIN_UNIX_SOCKET_DIR and temp dir. */
  socketDirsKept: readonly (string | undefined)[];
}

function buildClient(parts: ClientParts): PluginClient {
  const { transport, sessions } = createTransport(parts.params);
  const closeController = new AbortController();
  // close() with the plugin still running: calls in flight fail at once as cancellations, not
  // after the grace for a plugin exit that is not coming. (Closed after an exit, they stay
  // PluginShutdownError.)
  const closedHere = new AbortController();
  const runtime = new ClientRuntime(transport, {
    pluginExited: parts.exitSignal,
    shutdownGraceMs: parts.options.shutdownGraceMs,
    connectionClosed: closedHere.signal,
  });
  const controller = new GRPCControllerClient(runtime);
  const stdio = new GRPCStdioClient(runtime);
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    if (!parts.exitSignal.aborted) closedHere.abort();
    closeController.abort();
    sessions.abort();
    parts.onClose?.();
  };
  // A plugin killed hard could not remove its socket; go-plugin hosts leave it in the temp dir.
  const removeSocketDir = () => {
    if (parts.params.network === "unix") removePluginSocketDir(parts.params.address, parts.startedAt, parts.socketDirsKept);
  };
  void parts.exited.then(() => {
    removeSocketDir();
    closeController.abort();
    // Let in-flight calls see the failure before the session goes away.
    setImmediate(close);
  });

  forwardStdio(
    stdio,
    parts.options,
    anySignal([closeController.signal, parts.exitSignal]),
  );

  let killing: Promise<PluginExit> | undefined;
  const kill = (): Promise<PluginExit> =>
    (killing ??= (async () => {
      const timeoutMs = parts.options.killTimeoutMs ?? DEFAULT_KILL_TIMEOUT_MS;
      if (!parts.exitSignal.aborted) {
        // After close() the connection is gone for good: a connection of its own, as go-plugin's
        // Kill works whatever the client did before (the plugin then exits cleanly, not by SIGKILL).
        const own = closed ? createTransport(parts.params) : undefined;
        try {
          // On the raw transport: go-plugin's Shutdown stops the server before it answers, so the
          // call fails as a dropped connection, and the runtime would wait out its shutdown grace
          // (3 s) for the exit before the kill timeout below even started.
          await new GRPCControllerClient(own?.transport ?? transport).shutdown(
            {},
            { timeoutMs, signal: parts.exitSignal },
          );
        } catch {
          // The plugin may close the connection before answering; only its exit matters.
        } finally {
          own?.sessions.abort();
        }
      }
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        parts.exited.then(() => false),
        new Promise<boolean>(
          (r) => (timer = setTimeout(() => r(true), timeoutMs)),
        ),
      ]);
      clearTimeout(timer);
      if (timedOut) {
        try {
          parts.forceKill(timeoutMs);
        } catch (err) {
          // The exit cannot come from here: nothing of this client is left waiting for it.
          close();
          throw err;
        }
      }
      const exit = await parts.exited;
      close();
      return exit;
    })());

  const killSync = (options: { processTree?: boolean } = {}): void => {
    if (parts.exitSignal.aborted) return;
    // Listed first: once the plugin is gone, its children are init's.
    const tree = options.processTree ? processDescendants(parts.pid) : undefined;
    parts.forceKill();
    for (const [pid, info] of tree ?? []) {
      // Still that process (its start time), not another one given its pid since.
      if (procInfo(pid)?.start !== info.start) continue;
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone meanwhile, or not ours to kill
      }
    }
    // Not waiting for the exit (nothing could): a SIGKILLed process runs no more code of its own,
    // so the socket it listened on is as good as left behind already.
    removeSocketDir();
  };

  const reattachConfig: ReattachConfig = {
    pid: parts.pid,
    network: parts.params.network,
    address: parts.params.address,
    protocolVersion: parts.handshake.protocolVersion,
    ...(parts.params.tls
      ? {
          tls: {
            serverCertPem: parts.params.tls.serverCertPem,
            clientCertPem: parts.params.tls.certPem,
            clientKeyPem: parts.params.tls.keyPem,
          },
        }
      : {}),
  };

  return {
    pid: parts.pid,
    network: parts.params.network,
    address: parts.params.address,
    handshake: parts.handshake,
    transport,
    runtime,
    health: new HealthClient(runtime),
    controller,
    stdio,
    basePlugin: new BasePluginClient(runtime),
    driver: new DriverClient(runtime),
    exited: parts.exited,
    exitSignal: parts.exitSignal,
    process: parts.process,
    reattachConfig,
    recentStderr: parts.recentStderr,
    kill,
    killSync,
    close,
  };
}

function forwardStdio(
  stdio: GRPCStdioClient,
  options: PluginConnectOptions,
  signal: AbortSignal,
): void {
  // Opened even without callbacks, as go-plugin hosts do: the plugin then streams instead of buffering.
  void (async () => {
    try {
      for await (const chunk of stdio.streamStdio({}, { signal })) {
        if (chunk.channel === 1) options.onStdout?.(chunk.data);
        else if (chunk.channel === 2) options.onStderr?.(chunk.data);
      }
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ConnectError && err.code === Code.Unimplemented) {
        options.logger?.({
          level: "warn",
          message:
            "plugin does not implement GRPCStdio; its stdout/stderr is not forwarded",
          fields: {},
          structured: false,
          raw: "",
        });
      }
    }
  })();
}

// Confirms the connection (and TLS) works, like go-plugin's blocking dial. A plugin without the
// health service still counts as connected.
async function ping(
  client: PluginClient,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<void> {
  try {
    // The raw transport: a failure here should not wait out the runtime's shutdown grace.
    await new HealthClient(client.transport).check(
      { service: "plugin" },
      { timeoutMs, signal },
    );
  } catch (err) {
    // A gRPC server without the health service answers with a status (grpc-status); a server that
    // is not gRPC at all (HTTP 404) maps to Unimplemented too, and must not pass.
    if (
      err instanceof ConnectError &&
      (err.code === Code.Unimplemented || err.code === Code.NotFound) &&
      answeredByPlugin(err)
    )
      return;
    throw err;
  }
}

/**
 * `minPort`/`maxPort`, checked before anything starts: a go-plugin plugin on TCP tries each port
 * from min to max (0 and 0: any port), so a range it cannot bind in fails inside the plugin, seen
 * only in its stderr as "Couldn't bind plugin TCP listener".
 */
function portRange(options: LaunchPluginOptions): { min: number; max: number } {
  const min = options.minPort ?? 0;
  const max = options.maxPort ?? 0;
  for (const [key, v] of [["minPort", min], ["maxPort", max]] as const) {
    if (!Number.isInteger(v) || v < 0 || v > 65535)
      throw new PluginLaunchError(`launchPlugin: ${key} must be a port number (0 to 65535), not ${String(v)}`);
  }
  if (min > max)
    throw new PluginLaunchError(`launchPlugin: minPort ${min} is above maxPort ${max} (set both, or neither for any port)`);
  return { min, max };
}

/**
 * Starts a go-plugin plugin binary the way Nomad does and connects to it.
 *
 * Sets the magic cookie, `PLUGIN_PROTOCOL_VERSIONS`, `PLUGIN_MIN_PORT`/`PLUGIN_MAX_PORT` (and the
 * optional socket and AutoMTLS variables), waits for the handshake line on stdout (default 60 s;
 * a plugin that closes its stdout without writing one fails at once), validates it, connects with
 * connect-node's gRPC transport over unix or TCP (TLS with AutoMTLS) and checks health. Failures
 * throw {@link PluginLaunchError} quoting the plugin's recent stderr; the process is killed then.
 * The plugin's stderr is parsed as hclog into `options.logger`.
 *
 * @example
 * ```ts
 * const plugin = await launchPlugin("./my-driver", [], { logger: (e) => console.error(e.level, e.message) });
 * try {
 *   const info = await plugin.basePlugin.pluginInfo({});
 *   console.log(info.name);
 * } finally {
 *   await plugin.kill();
 * }
 * ```
 */
export async function launchPlugin(
  cmd: string,
  args: readonly string[] = [],
  options: LaunchPluginOptions = {},
): Promise<PluginClient> {
  const name = pluginName(cmd, args);
  const ports = portRange(options);
  const cookie = options.cookie ?? NOMAD_PLUGIN_COOKIE;
  const versions = options.protocolVersions ?? [2];
  const clientCert = options.autoMTLS
    ? await generateSelfSignedCertificate()
    : undefined;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ...options.env,
    [cookie.key]: cookie.value,
    PLUGIN_PROTOCOL_VERSIONS: versions.join(","),
    PLUGIN_MIN_PORT: String(ports.min),
    PLUGIN_MAX_PORT: String(ports.max),
  };
  delete env.PLUGIN_CLIENT_CERT;
  if (clientCert) env.PLUGIN_CLIENT_CERT = clientCert.certPem;
  if (options.unixSocketDir) env.PLUGIN_UNIX_SOCKET_DIR = options.unixSocketDir;
  if (options.unixSocketGroup)
    env.PLUGIN_UNIX_SOCKET_GROUP = options.unixSocketGroup;

  const startedAt = Date.now();
  const child = spawn(cmd, [...args], {
    env,
    cwd: options.cwd,
    stdio: ["ignore", "pipe", "pipe"],
  });
  if (child.stdout == null || child.stderr == null) {
    // No free file descriptor (EMFILE, ENFILE): Node made no pipes and reports it as an error
    // event on the next tick, which would crash this process if nobody listened.
    const err = await new Promise<Error>((resolve) => child.once("error", resolve));
    throw new PluginLaunchError(`cannot start plugin ${name}: ${err.message}`);
  }
  const exitController = new AbortController();
  let exitInfo: PluginExit | undefined;
  const exited = new Promise<PluginExit>((resolve) => {
    child.once("exit", (code, signal) => {
      exitInfo = { code, signal };
      exitController.abort(new Error(`plugin exited (${code ?? signal})`));
      resolve(exitInfo);
    });
  });
  const stderrDone = new Promise<void>((resolve) => {
    child.stderr!.once("end", resolve);
    child.stderr!.once("error", () => resolve());
  });

  const logger = options.logger;
  const stderr = new LineReader((line) => logger?.(parseLogLine(line)));
  child.stderr!.on("data", (c: Buffer) => stderr.push(c));
  child.stderr!.once("end", () => stderr.end());
  const recentStderr = () =>
    stderr
      .recent()
      .split("\n")
      .filter((l) => l !== "")
      .map(describeLine)
      .join("\n");

  let handshakeLine: string | undefined;
  let onFirstLine: ((line: string) => void) | undefined;
  const stdout = new LineReader((line) => {
    if (handshakeLine === undefined) {
      handshakeLine = line;
      onFirstLine?.(line);
    } else if (line.trim() !== "") {
      logger?.({
        level: "warn",
        message: `plugin wrote to stdout after the handshake: ${line}`,
        fields: {},
        structured: false,
        raw: line,
      });
    }
  }, 1);
  let onStdoutClosed: (() => void) | undefined;
  child.stdout!.on("data", (c: Buffer) => stdout.push(c));
  child.stdout!.once("end", () => {
    stdout.end();
    if (handshakeLine === undefined) onStdoutClosed?.();
  });

  const fail = async (message: string, exit?: PluginLaunchError["exit"]): Promise<never> => {
    if (!exitInfo) child.kill("SIGKILL");
    // Wait (briefly) for the rest of stderr so the excerpt is complete.
    let t: NodeJS.Timeout | undefined;
    await Promise.race([
      stderrDone,
      new Promise((r) => (t = setTimeout(r, 1000))),
    ]);
    clearTimeout(t);
    throw new PluginLaunchError(message, recentStderr(), exit);
  };

  const startTimeoutMs = options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;
  const cancelled = () => `launch of plugin ${name} cancelled`;
  if (options.signal?.aborted) return fail(cancelled());
  let timer: NodeJS.Timeout | undefined;
  let closedTimer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const first = await new Promise<{ line: string } | { error: string; exit?: PluginLaunchError["exit"] }>(
    (resolve) => {
      onFirstLine = (line) => resolve({ line });
      // No handshake can come any more (go-plugin fails at once too). A plugin that died closed its
      // stdout as it went: then its exit, which follows, says how.
      onStdoutClosed = () => {
        if (exitInfo !== undefined || child.pid === undefined) return;
        const state = processState(child.pid);
        if (state === "exiting") return;
        const closed = { error: `plugin ${name} closed its stdout without writing the go-plugin handshake` };
        if (state === "running") resolve(closed);
        // Cannot tell (no /proc): give the exit a moment to arrive.
        else closedTimer = setTimeout(() => resolve(closed), 1000);
      };
      onAbort = () => resolve({ error: cancelled() });
      options.signal?.addEventListener("abort", onAbort, { once: true });
      child.once("error", (err) =>
        resolve({ error: `cannot start plugin ${name}: ${describeSpawnFailure(cmd, err, options.cwd, env.PATH)}` }),
      );
      void exited.then((e) =>
        resolve({
          error:
            `plugin ${name} exited ${e.signal ? `on signal ${e.signal}` : `with status ${e.code}`} before completing the go-plugin handshake` +
            // Status 0 is a program that simply ran to its end: it never started serving.
            (e.code === 0 ? " (a plugin serves until it is stopped: does it call serveDriver or servePlugin?)" : ""),
          exit: { code: e.code, signal: e.signal },
        }),
      );
      // Node's timers hold at most 2^31-1 ms (~24.8 days; a longer delay fires at once): no deadline then.
      if (startTimeoutMs <= MAX_TIMER_MS) {
        timer = setTimeout(
          () =>
            resolve({
              error: `plugin ${name} did not complete the go-plugin handshake within ${startTimeoutMs} ms`,
            }),
          startTimeoutMs,
        );
      }
    },
  );
  clearTimeout(timer);
  clearTimeout(closedTimer);
  if (onAbort) options.signal?.removeEventListener("abort", onAbort);
  onFirstLine = undefined;
  onStdoutClosed = undefined;
  if ("error" in first) return fail(first.error, first.exit);

  let handshake: Handshake;
  let serverCertPem: string | undefined;
  try {
    handshake = parseHandshake(first.line, versions, `plugin ${name}`);
    if (clientCert) {
      if (!handshake.serverCert) {
        throw new PluginLaunchError(
          `plugin ${name} ignored AutoMTLS: its handshake has no server certificate (field 6)`,
        );
      }
      try {
        serverCertPem = handshakeCertToPem(handshake.serverCert);
      } catch (err) {
        throw new PluginLaunchError(
          `plugin ${name} sent an unparseable certificate in handshake field 6: ${(err as Error).message}`,
        );
      }
    }
  } catch (err) {
    return fail((err as Error).message);
  }

  const client = buildClient({
    pid: child.pid!,
    handshake,
    params: {
      network: handshake.network,
      address: handshake.address,
      connectTimeoutMs: options.connectTimeoutMs,
      tls:
        clientCert && serverCertPem
          ? {
              serverCertPem,
              certPem: clientCert.certPem,
              keyPem: clientCert.keyPem,
            }
          : undefined,
    },
    exited,
    exitSignal: exitController.signal,
    forceKill: () => {
      if (!exitInfo) child.kill("SIGKILL");
    },
    process: child,
    recentStderr,
    options,
    // "Keeps running": nothing of it holds this process's event loop any more. Its output is still
    // read while this process lives (a plugin blocked on a full stderr pipe would hang).
    onClose: () => {
      child.unref();
      (child.stdout as net.Socket).unref();
      (child.stderr as net.Socket).unref();
    },
    startedAt,
    socketDirsKept: [env.PLUGIN_UNIX_SOCKET_DIR, env.TMPDIR],
  });
  try {
    await ping(
      client,
      Math.max(5000, Math.min(startTimeoutMs, 30_000)),
      options.signal,
    );
  } catch (err) {
    client.close();
    if (options.signal?.aborted) return fail(cancelled());
    return fail(
      `cannot talk gRPC to plugin ${name} at ${handshake.network}:${handshake.address}: ${(err as Error).message}`,
    );
  }
  return client;
}

/**
 * Whether process `pid` runs or is on its way out (a zombie, or PF_EXITING: it is closing its files),
 * from Linux's /proc/<pid>/stat; undefined where that cannot be told (no /proc, already reaped).
 */
function processState(pid: number): "running" | "exiting" | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // After the command name (which may hold spaces and parentheses): state, ppid, pgrp, session,
  // tty_nr, tpgid, flags.
  const [state, , , , , , flags] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const PF_EXITING = 0x4;
  return state === "Z" || state === "X" || (Number(flags) & PF_EXITING) !== 0 ? "exiting" : "running";
}

/**
 * Whether `pid` is a live process. A zombie still answers `kill(pid, 0)`: a plugin whose parent
 * (another Nomad agent, a shell that exec'd) does not reap it would otherwise pass for running forever.
 */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  return processState(pid) !== "exiting";
}

/** Options for {@link reattachPlugin}. */
export interface ReattachPluginOptions extends PluginConnectOptions {
  /** How often to check whether the process still exists; default 500 ms. */
  pollIntervalMs?: number;
}

/**
 * Connects to a plugin that is already running (started by another process), like go-plugin's
 * reattach. Its exit is detected by polling `process.kill(pid, 0)`; its stderr is not available.
 * `kill()` calls GRPCController.Shutdown, waits 2 s, then sends SIGKILL to `pid` (and rejects,
 * naming the cause, when that is not permitted).
 *
 * @example
 * ```ts
 * const plugin = await reattachPlugin({ pid: 4242, network: "unix", address: "/tmp/plugin-x/plugin.sock" });
 * console.log(await plugin.driver.capabilities({}));
 * plugin.close(); // leave it running
 * ```
 */
export async function reattachPlugin(
  config: ReattachConfig,
  options: ReattachPluginOptions = {},
): Promise<PluginClient> {
  if (!Number.isInteger(config.pid) || config.pid <= 0)
    throw new PluginLaunchError(`reattach: invalid pid ${config.pid}`);
  if (config.network !== "unix" && config.network !== "tcp") {
    throw new PluginLaunchError(
      `reattach: network must be "unix" or "tcp", not ${JSON.stringify(config.network)}`,
    );
  }
  // Before the exit poll starts: the connection made below would throw with it left running.
  if (config.network === "tcp" && tcpTarget(config.address) === undefined)
    throw new PluginLaunchError(`reattach: invalid tcp address ${JSON.stringify(config.address)} (expected host:port)`);
  if (!isAlive(config.pid)) {
    // As when a reattached plugin exits: a plugin killed hard (the executor of a task whose
    // recovery now fails) could not remove its socket directory, and nobody else will.
    if (config.network === "unix") removePluginSocketDir(config.address, 0, [process.env.PLUGIN_UNIX_SOCKET_DIR, process.env.TMPDIR]);
    throw new PluginLaunchError(`reattach: no process with pid ${config.pid}`);
  }
  const exitController = new AbortController();
  let resolveExit!: (e: PluginExit) => void;
  const exited = new Promise<PluginExit>((r) => (resolveExit = r));
  const poll = setInterval(() => {
    if (!isAlive(config.pid)) markExited();
  }, options.pollIntervalMs ?? 500);
  poll.unref();
  const markExited = () => {
    clearInterval(poll);
    if (exitController.signal.aborted) return;
    exitController.abort(new Error(`plugin ${config.pid} exited`));
    resolveExit({ code: null, signal: null });
  };
  const client = buildClient({
    pid: config.pid,
    handshake: {
      coreVersion: 1,
      protocolVersion: config.protocolVersion ?? 2,
      network: config.network,
      address: config.address,
      protocol: "grpc",
      serverCert: "",
    },
    params: {
      network: config.network,
      address: config.address,
      connectTimeoutMs: options.connectTimeoutMs,
      tls: config.tls
        ? {
            serverCertPem: config.tls.serverCertPem,
            certPem: config.tls.clientCertPem,
            keyPem: config.tls.clientKeyPem,
          }
        : undefined,
    },
    exited,
    exitSignal: exitController.signal,
    forceKill: (timeoutMs) => {
      try {
        process.kill(config.pid, "SIGKILL");
      } catch (err) {
        // ESRCH: already gone. EPERM: alive and another user's, so its exit would never come.
        if ((err as NodeJS.ErrnoException).code === "EPERM") {
          throw new Error(
            `cannot kill plugin ${config.pid}: ${timeoutMs === undefined ? "" : `it did not exit within ${timeoutMs} ms of GRPCController.Shutdown, and `}SIGKILL is not permitted (EPERM: the process is not this user's); it is still running`,
            { cause: err },
          );
        }
      }
    },
    recentStderr: () => "",
    onClose: () => clearInterval(poll),
    options,
    startedAt: 0,
    socketDirsKept: [process.env.PLUGIN_UNIX_SOCKET_DIR, process.env.TMPDIR],
  });
  // kill() waits on `exited`; poll faster while a kill is in progress so it resolves promptly
  // (a plugin exits within a few ms of answering Shutdown; at 50 ms, kill() took ~50 ms).
  const kill = client.kill;
  const fast = async (): Promise<PluginExit> => {
    const iv = setInterval(() => {
      if (!isAlive(config.pid)) markExited();
    }, 5);
    try {
      return await kill();
    } finally {
      clearInterval(iv);
    }
  };
  try {
    await ping(client, 10_000);
  } catch (err) {
    client.close();
    throw new PluginLaunchError(
      `reattach: cannot talk gRPC to plugin ${config.pid} at ${config.network}:${config.address}: ${(err as Error).message}`,
    );
  }
  return { ...client, kill: fast };
}

export type { PluginLogEntry };
