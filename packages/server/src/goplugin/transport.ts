// The go-plugin side of a plugin process without any gRPC service: environment checks, the stdio
// takeover, the HTTP/2 server on its socket, the handshake line, signals and the graceful
// shutdown. servePlugin puts its services on top; the bundled launcher's fast path (prelude.ts)
// answers a few fixed calls with it before the plugin's own code has loaded, then hands it over.
// Nothing here loads protobuf-es or connect: that is what lets the fast path start quickly.
import { X509Certificate } from "node:crypto";
import { rmSync, writeSync } from "node:fs";
import type * as http2 from "node:http2";
import type { Server as NetServer, Socket } from "node:net";
import type { Logger } from "../log/hclog.js";
import {
  CORE_PROTOCOL_VERSION,
  NOMAD_HANDSHAKE,
  PluginEnvironmentError,
  hasCookie,
  noteHostCookie,
  negotiateProtocolVersion,
  notAPluginMessage,
  type HandshakeConfig,
} from "./env.js";
import { grpcMessageValue } from "../runtime/grpc-message.js";
import { listenTcp, listenUnix, type ListenResult } from "./listen.js";
import { StdioCapture } from "./stdio.js";

// Set by `nomadkit bundle` (esbuild's define) to one stamp in a plugin's bundle and in its load
// fast path; absent from the package's own builds.
declare const NOMADKIT_TRANSPORT_BUILD: string | undefined;

/**
 * Which build of this code made a transport: the stamp `nomadkit bundle` writes into a plugin's
 * bundle and its load launch's fast path, "" unbundled. The plugin's servePlugin adopts only a
 * transport of its own build: one left by a fast path of another build (an upgrade that copied
 * some of the bundle's files) may lack what it relies on, and would serve the plugin with old code.
 */
export const TRANSPORT_BUILD: string =
  typeof NOMADKIT_TRANSPORT_BUILD === "string" ? NOMADKIT_TRANSPORT_BUILD : "";

/** The part of servePlugin's options the transport uses (see ServePluginOptions for each). */
export interface TransportOptions {
  logger?: Logger | undefined;
  handshake?: HandshakeConfig | undefined;
  protocolVersions?: readonly number[] | undefined;
  network?: "unix" | "tcp" | undefined;
  env?: NodeJS.ProcessEnv | undefined;
  exitProcess?: boolean | undefined;
  exitOnHostDisconnect?: boolean | number | undefined;
  maxSessionMemoryMiB?: number | undefined;
}

/** A `stream` listener of Node's HTTP/2 server. */
export type StreamListener = (
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  flags: number,
  rawHeaders: string[],
) => void;

/**
 * 1 TiB: not a bound on memory but on Node's count of it. Node (20 and 22) never takes the bytes
 * still queued for a stream off that count when the peer resets the stream, so every exec session
 * the host cancels with output in flight left ~0.4 MiB counted: at 128 MiB the host's connection
 * refused every new call (ENHANCE_YOUR_CALM) after ~330 of them, then Node sent GOAWAY and the
 * calls in flight failed. What a session really holds is bounded by flow control and backpressure.
 */
const DEFAULT_MAX_SESSION_MEMORY_MIB = 1024 * 1024;
const DEFAULT_PROTOCOL_VERSIONS: readonly number[] = [2];
const DEFAULT_DISCONNECT_GRACE_MS = 1000;
/** Most UTF-16 units of {@link PluginTransport.abandon}'s message sent as grpc-message (at most 36 KiB encoded). */
const MAX_ABANDON_MESSAGE = 4096;
// After the shutdown hook, how long open HTTP/2 streams get to finish before their sessions are destroyed.
const SESSION_CLOSE_GRACE_MS = 250;
/**
 * How long a shutdown requested while the plugin's code loads (SIGTERM, exitOnHostDisconnect)
 * waits for that code's servePlugin, so its onShutdown can undo what the code started: as long as
 * go-plugin's host waits for a plugin to exit after Shutdown before it kills it.
 */
const SHUTDOWN_WAITS_FOR_PLUGIN_MS = 2000;

/** What `exitOnHostDisconnect` means: ms to wait, or undefined (off). */
function disconnectGraceMs(option: boolean | number | undefined): number | undefined {
  return option === true ? DEFAULT_DISCONNECT_GRACE_MS : option || undefined;
}

/** The JSON-able options a transport behaves by, defaults filled in (to compare two of them). */
export function effectiveTransportOptions(options: TransportOptions): string {
  const h = options.handshake ?? NOMAD_HANDSHAKE;
  return JSON.stringify({
    handshake: [h.cookieKey, h.cookieValue],
    protocolVersions: options.protocolVersions ?? DEFAULT_PROTOCOL_VERSIONS,
    network: options.network ?? "unix",
    exitOnHostDisconnect: disconnectGraceMs(options.exitOnHostDisconnect) ?? null,
    maxSessionMemoryMiB: options.maxSessionMemoryMiB ?? DEFAULT_MAX_SESSION_MEMORY_MIB,
  });
}

/** Ends start-up with `message`: exit 1, logged with `logger` (else plain on stderr), or thrown without `exitProcess`. */
export function fail(message: string, exitProcess: boolean, logger?: Pick<Logger, "error">): never {
  if (!exitProcess) throw new PluginEnvironmentError(message);
  if (logger) logger.error(message);
  else writeSync(2, message.endsWith("\n") ? message : message + "\n");
  process.exit(1);
}

/** A request the load launch's fast path answered from its recording, with the recorded response body. */
export interface RecordedAnswer {
  /** `:path` of the call. */
  path: string;
  /** The request as sent (gRPC envelope included). */
  request: Buffer;
  /** The recorded response body (gRPC envelopes). */
  body: Buffer;
}

/**
 * One plugin process's go-plugin transport. Made by {@link openTransport}; {@link listen} writes the
 * handshake; until {@link serve} is given a listener, new streams are held (not read, not answered).
 */
export class PluginTransport {
  readonly env: NodeJS.ProcessEnv;
  readonly exitProcess: boolean;
  readonly protocolVersion: number;
  readonly stdio: StdioCapture;
  #logger: Logger;
  /** The options it was opened with. */
  readonly options: TransportOptions;
  /** {@link TRANSPORT_BUILD} of the code that made it (checked by {@link adoptTransport}). */
  readonly build = TRANSPORT_BUILD;
  /** What the load launch's fast path that opened it answers from its recording (the adopting plugin checks them). */
  recordedAnswers: readonly RecordedAnswer[] | undefined;
  readonly #shutdownController = new AbortController();
  #shutdownPromise: Promise<void> | undefined;
  #onShutdown: (() => Promise<void>) | undefined;
  #listening: ListenResult | undefined;
  #server: http2.Http2Server | http2.Http2SecureServer | undefined;
  #serverCertField = "";
  #line = "";
  #listener: StreamListener | undefined;
  readonly #held: Parameters<StreamListener>[] = [];
  readonly #sessions = new Set<http2.ServerHttp2Session>();
  // The connections under the sessions: a session that was closed gracefully first and then
  // destroyed only half-closes its socket and waits for the peer's end, which a busy or confused
  // peer may never send; the socket itself can always be destroyed.
  readonly #sockets = new Set<Socket>();
  readonly #hostGoneListeners: (() => void)[] = [];
  // While the plugin's code loads to adopt this transport (see awaitAdoption): called if the
  // process has nothing left to do but serve this transport, i.e. that code will never adopt it.
  #neverAdopted: (() => void) | undefined;
  readonly #onBeforeExit = () => this.#neverAdopted?.();
  readonly #adoptedListeners: (() => void)[] = [];
  // From awaitAdoption until the adopting servePlugin has set its shutdown hook and serves
  // (pluginReady): a shutdown requested meanwhile waits for it (see SHUTDOWN_WAITS_FOR_PLUGIN_MS).
  #pluginLoading = false;
  #deferredShutdown: { reason: string; timer: NodeJS.Timeout } | undefined;
  #resolveClosed!: () => void;
  /** Resolves when the server has closed. */
  readonly closed = new Promise<void>((r) => (this.#resolveClosed = r));
  readonly #onSigint = () => this.#logger.debug("ignoring SIGINT; shutdown comes from the host");
  readonly #onSigterm = () => void this.shutdown("SIGTERM");
  readonly #removeSocketDir = () => {
    if (this.#listening?.socketDir) rmSync(this.#listening.socketDir, { recursive: true, force: true });
  };

  /** @internal use {@link openTransport} */
  constructor(options: TransportOptions, env: NodeJS.ProcessEnv, logger: Logger, protocolVersion: number) {
    this.options = options;
    this.env = env;
    this.exitProcess = options.exitProcess ?? true;
    this.#logger = logger;
    this.protocolVersion = protocolVersion;
    this.stdio = new StdioCapture(logger);
  }

  /** The plugin's logger; {@link useLogger} replaces it. */
  get logger(): Logger {
    return this.#logger;
  }

  /** Log (and log captured stdout) with `logger` from now on. */
  useLogger(logger: Logger): void {
    this.#logger = logger;
    this.stdio.useLogger(logger);
  }

  /** The host's connections (HTTP/2 sessions) open now. */
  get hostConnections(): number {
    return this.#sessions.size;
  }

  /** Calls `listener` each time the host's last connection has closed, unless shutting down. */
  onHostGone(listener: () => void): void {
    this.#hostGoneListeners.push(listener);
  }

  /** Aborted when shutdown starts. */
  get signal(): AbortSignal {
    return this.#shutdownController.signal;
  }

  /** The HTTP/2 server (after {@link listen}). */
  get server(): http2.Http2Server | http2.Http2SecureServer {
    if (this.#server === undefined) throw new Error("the plugin transport is not listening yet");
    return this.#server;
  }

  get network(): "unix" | "tcp" {
    return this.#listening!.network;
  }

  get address(): string {
    return this.#listening!.address;
  }

  get tls(): boolean {
    return this.#serverCertField !== "";
  }

  /** The handshake line written to stdout (without the newline). */
  get handshake(): string {
    return this.#line;
  }

  /** Runs once when shutdown starts, after `signal` aborted, bounded by `timeoutMs`. */
  setShutdownHook(hook: (() => void | Promise<void>) | undefined, timeoutMs: number): void {
    this.#onShutdown =
      hook === undefined
        ? undefined
        : async () => {
            try {
              const r = await withTimeout(
                Promise.resolve().then(() => hook()),
                timeoutMs,
              );
              if (r === "timeout") this.#logger.warn("onShutdown did not finish in time", { timeout_ms: timeoutMs });
            } catch (err) {
              this.#logger.error("onShutdown failed", { error: err as Error });
            }
          };
  }

  /** Start-up failed after the environment checks: undo what was set up, then exit 1 (or throw). */
  failStart(err: unknown): never {
    this.stdio.uninstall();
    this.#removeSocketDir();
    if (!(err instanceof PluginEnvironmentError) && err instanceof Error && err.stack) {
      this.#logger.debug("start-up failure", { stack: err.stack });
    }
    fail(
      err instanceof PluginEnvironmentError
        ? err.message
        : `plugin failed to start: ${err instanceof Error ? err.message : String(err)}`,
      this.exitProcess,
      this.#logger,
    );
  }

  /**
   * Creates the HTTP/2 server (TLS with AutoMTLS when `PLUGIN_CLIENT_CERT` is set), listens on a
   * private unix socket (or TCP) and writes the handshake line. Failures end the process (see
   * {@link failStart}). Does nothing when already listening.
   */
  async listen(): Promise<void> {
    if (this.#server !== undefined) return;
    const env = this.env;
    const options = this.options;
    try {
      const http2mod = await import("node:http2");
      const maxSessionMemory = options.maxSessionMemoryMiB ?? DEFAULT_MAX_SESSION_MEMORY_MIB;
      if (typeof maxSessionMemory !== "number" || !Number.isFinite(maxSessionMemory) || maxSessionMemory < 1) {
        throw new TypeError(`servePlugin: maxSessionMemoryMiB must be a number of MiB >= 1, got ${JSON.stringify(maxSessionMemory)}`);
      }
      const sessionSettings = { maxSessionMemory };
      let server: http2.Http2Server | http2.Http2SecureServer;
      const clientCertPem = env.PLUGIN_CLIENT_CERT;
      if (clientCertPem) {
        try {
          new X509Certificate(clientCertPem);
        } catch (err) {
          throw new PluginEnvironmentError(`PLUGIN_CLIENT_CERT is not a PEM certificate: ${(err as Error).message}`);
        }
        const { generateSelfSignedCertificate, certDerToHandshakeField } = await import("./tls.js");
        const own = await generateSelfSignedCertificate();
        this.#serverCertField = certDerToHandshakeField(own.certDer);
        server = http2mod.createSecureServer({
          key: own.keyPem,
          cert: own.certPem,
          ca: clientCertPem,
          requestCert: true,
          rejectUnauthorized: true,
          minVersion: "TLSv1.2",
          ALPNProtocols: ["h2"],
          ...sessionSettings,
        });
        server.on("tlsClientError", (err: Error) => this.#logger.warn("rejected TLS client", { error: err.message }));
      } else {
        server = http2mod.createServer(sessionSettings);
      }
      server.on("stream", (...args: Parameters<StreamListener>) => {
        if (this.#listener !== undefined) this.#listener(...args);
        else this.#hold(args);
      });
      this.#trackSessions(server);
      const netServer = server as unknown as NetServer;
      if (options.network === "tcp" || process.platform === "win32") {
        this.#listening = await listenTcp(netServer, env);
      } else {
        try {
          this.#listening = await listenUnix(netServer, env);
        } catch (err) {
          if (env.PLUGIN_UNIX_SOCKET_DIR || env.PLUGIN_UNIX_SOCKET_GROUP) throw err;
          this.#logger.warn("cannot listen on a unix socket, using TCP", { error: (err as Error).message });
          this.#listening = await listenTcp(netServer, env);
        }
      }
      this.#server = server;
    } catch (err) {
      this.failStart(err);
    }
    process.once("exit", this.#removeSocketDir);
    const where = this.#listening;
    this.#line = [CORE_PROTOCOL_VERSION, this.protocolVersion, where.network, where.address, "grpc", this.#serverCertField].join("|");
    writeSync(1, this.#line + "\n");
    this.#logger.debug("plugin started", { network: where.network, address: where.address, tls: this.tls });
    process.on("SIGINT", this.#onSigint);
    process.on("SIGTERM", this.#onSigterm);
  }

  /**
   * Serve new streams with `listener` from now on, and the held ones now, in the order they came.
   * Streams whose peer has gone meanwhile are skipped.
   */
  serve(listener: StreamListener): void {
    this.#listener = listener;
    for (const args of this.#held.splice(0)) if (!args[0].destroyed) listener(...args);
  }

  /** Hold a stream until the next {@link serve} (a listener that cannot answer it yet). */
  hold(...args: Parameters<StreamListener>): void {
    this.#hold(args);
  }

  #hold(args: Parameters<StreamListener>): void {
    // A reset stream or a GOAWAY with an error emits "error" on its streams: on a held one, with
    // nobody listening, that would crash the process.
    args[0].on("error", ignoreError);
    this.#held.push(args);
  }

  /**
   * A stream `from` cannot answer: held until the next {@link serve}, or, when a listener other
   * than `from` already serves (the stream was still being read when it took over), given to it.
   */
  pass(from: StreamListener, ...args: Parameters<StreamListener>): void {
    if (this.#listener !== undefined && this.#listener !== from) this.#listener(...args);
    else this.#hold(args);
  }

  #trackSessions(server: http2.Http2Server | http2.Http2SecureServer): void {
    const graceMs = disconnectGraceMs(this.options.exitOnHostDisconnect);
    let disconnectTimer: NodeJS.Timeout | undefined;
    server.on("connection", (socket: Socket) => {
      if (this.#neverAdopted !== undefined) socket.unref();
      this.#sockets.add(socket);
      socket.once("close", () => this.#sockets.delete(socket));
    });
    server.on("session", (s: http2.ServerHttp2Session) => {
      this.#sessions.add(s);
      clearTimeout(disconnectTimer);
      s.once("close", () => {
        this.#sessions.delete(s);
        this.#logger.debug("host connection closed", { open: this.#sessions.size });
        if (this.#sessions.size > 0 || this.#shutdownPromise !== undefined) return;
        if (graceMs !== undefined) {
          disconnectTimer = setTimeout(() => void this.shutdown("host disconnected"), graceMs);
          disconnectTimer.unref();
        }
        for (const listener of this.#hostGoneListeners) listener();
      });
      s.on("error", (err) => this.#logger.debug("HTTP/2 session error", { error: err.message }));
    });
  }

  /**
   * Until {@link adopted}, nothing of the transport (its server, the host's connections) keeps the
   * process alive, and `never` is called if the process runs out of other work: the plugin's code,
   * loaded to take the transport over, ended (or waits on nothing) without calling servePlugin.
   * The host's calls would otherwise wait for it forever, the process serving none of them.
   */
  awaitAdoption(never: () => void): void {
    this.#neverAdopted = never;
    this.#pluginLoading = true;
    (this.#server as unknown as NetServer | undefined)?.unref();
    for (const socket of this.#sockets) socket.unref();
    process.on("beforeExit", this.#onBeforeExit);
  }

  /** Calls `listener` once the plugin's servePlugin has taken the transport over (see {@link awaitAdoption}). */
  onAdopted(listener: () => void): void {
    this.#adoptedListeners.push(listener);
  }

  /**
   * The adopting servePlugin has set its shutdown hook and serves: a shutdown requested while its
   * code loaded starts now, onShutdown included.
   */
  pluginReady(): void {
    this.#pluginLoading = false;
    const deferred = this.#deferredShutdown;
    if (deferred === undefined) return;
    this.#deferredShutdown = undefined;
    clearTimeout(deferred.timer);
    void this.#shutdown(deferred.reason);
  }

  /** The plugin's servePlugin took the transport over: it keeps the process alive again. */
  adopted(): void {
    if (this.#neverAdopted === undefined) return;
    this.#neverAdopted = undefined;
    process.off("beforeExit", this.#onBeforeExit);
    (this.#server as unknown as NetServer | undefined)?.ref();
    for (const socket of this.#sockets) socket.ref();
    for (const listener of this.#adoptedListeners.splice(0)) listener();
  }

  /**
   * The plugin's code, loaded to take this transport over, failed or will never call servePlugin:
   * answers every call waiting for it Unavailable with `message` (logged at error, with `err`'s
   * stack), closes the host's connections, removes the socket directory and exits 1. go-plugin
   * sees a plugin that exited; the calls say why.
   */
  abandon(message: string, err?: unknown): Promise<void> {
    this.#pluginLoading = false;
    clearTimeout(this.#deferredShutdown?.timer);
    this.#deferredShutdown = undefined;
    this.#shutdownPromise ??= (async () => {
      this.adopted();
      this.#logger.error(message, err instanceof Error && err.stack ? { stack: err.stack } : {});
      this.#shutdownController.abort(new Error(message));
      this.stdio.close();
      // Within what trailers carry (an error's message may be anything); the log has all of it.
      const status = message.length > MAX_ABANDON_MESSAGE ? `${message.slice(0, MAX_ABANDON_MESSAGE)}…` : message;
      await this.#closeServer(status, true);
      this.#removeSocketDir();
      process.off("SIGINT", this.#onSigint);
      process.off("SIGTERM", this.#onSigterm);
      this.#resolveClosed();
      this.stdio.uninstall();
      process.exit(1);
    })();
    return this.#shutdownPromise;
  }

  /**
   * Closes the server; streams never served are answered Unavailable with `message`. With
   * `refuseAll` (nothing will serve again), so is every stream the host opens until its
   * connection has seen the GOAWAY (see {@link #drainInFlight}).
   */
  async #closeServer(message = "plugin shutting down", refuseAll = false): Promise<void> {
    const server = this.#server;
    if (server === undefined) return;
    const done = new Promise<void>((resolve) => server.close(() => resolve()));
    if (refuseAll) {
      this.#listener = (stream) => {
        stream.on("error", ignoreError);
        respondUnavailable(stream, message);
      };
      for (const [stream] of this.#held.splice(0)) respondUnavailable(stream, message);
      await this.#drainInFlight();
    }
    for (const s of this.#sessions) if (!s.closed) s.close();
    // Streams never served get a status instead of waiting for the grace period; after the
    // GOAWAY, as the services' own streams end, so hosts see it with streams still open.
    for (const [stream] of this.#held.splice(0)) respondUnavailable(stream, message);
    const timer = setTimeout(() => {
      for (const s of this.#sessions) s.destroy();
      for (const socket of this.#sockets) socket.destroy();
    }, SESSION_CLOSE_GRACE_MS);
    await done;
    clearTimeout(timer);
  }

  /**
   * Waits until every host connection has answered a PING (at most SESSION_CLOSE_GRACE_MS): the
   * streams a host opened before that, already in the socket when a load failed with the event
   * loop blocked, or on their way, are read (and answered) before the GOAWAY. After the GOAWAY,
   * nghttp2 ignores them and the host's HTTP/2 stack fails them as refused (connect-node and
   * @nomadkit/client report code Internal), without the reason. grpc-go drains the same way (a GOAWAY notice, a PING, then the
   * GOAWAY), but Node's HTTP/2 cannot send that notice: its every GOAWAY stops new streams.
   */
  async #drainInFlight(): Promise<void> {
    await Promise.all(
      [...this.#sessions].map(
        (s) =>
          new Promise<void>((resolve) => {
            const timer = setTimeout(done, SESSION_CLOSE_GRACE_MS);
            function done() {
              clearTimeout(timer);
              s.off("close", done);
              resolve();
            }
            s.once("close", done);
            try {
              if (!s.closed && !s.destroyed && s.ping(() => done())) return;
            } catch {
              // the session is going: nothing more comes on it
            }
            done();
          }),
      ),
    );
  }

  /**
   * Starts (or joins) the graceful shutdown; resolves when the server is closed. While the plugin's
   * code loads to adopt the transport, the shutdown waits for its servePlugin (at most
   * SHUTDOWN_WAITS_FOR_PLUGIN_MS), whose onShutdown then runs: that code may have started things
   * only it can stop. The host's calls meanwhile go to the plugin as usual.
   */
  shutdown(reason = "shutdown requested"): Promise<void> {
    if (this.#shutdownPromise === undefined && this.#pluginLoading) {
      if (this.#deferredShutdown === undefined) {
        this.#logger.debug("shutdown requested while the plugin loads: waiting for its servePlugin", { reason });
        const timer = setTimeout(() => {
          this.#deferredShutdown = undefined;
          this.#logger.warn("the plugin's code did not call servePlugin in time: shutting down without its onShutdown", {
            reason,
            waited_ms: SHUTDOWN_WAITS_FOR_PLUGIN_MS,
          });
          void this.#shutdown(reason);
        }, SHUTDOWN_WAITS_FOR_PLUGIN_MS);
        // Waiting on it alone is waiting on nothing: awaitAdoption's `never` then ends the process.
        timer.unref();
        this.#deferredShutdown = { reason, timer };
      }
      return this.closed;
    }
    return this.#shutdown(reason);
  }

  #shutdown(reason: string): Promise<void> {
    this.#shutdownPromise ??= (async () => {
      this.#logger.debug("plugin shutting down", { reason });
      this.#shutdownController.abort(new Error(`plugin shutting down: ${reason}`));
      await this.#onShutdown?.();
      this.stdio.close();
      await this.#closeServer();
      this.#removeSocketDir();
      process.off("SIGINT", this.#onSigint);
      process.off("SIGTERM", this.#onSigterm);
      this.#resolveClosed();
      if (this.exitProcess) {
        this.stdio.uninstall();
        process.exit(0);
      }
    })();
    return this.#shutdownPromise;
  }
}

function withTimeout(p: Promise<unknown>, ms: number): Promise<"timeout" | undefined> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.then(() => undefined),
    new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), ms))),
  ]).finally(() => clearTimeout(timer));
}

/**
 * Checks the environment as go-plugin does (the magic cookie: a human who ran the binary gets a
 * plain message; the app protocol version) and takes over stdout and stderr, so that from here on
 * nothing but the handshake line reaches file descriptor 1. `defaultLogger` makes the logger when
 * `options` has none: servePlugin's is pino's, the load fast path's writes its lines without pino.
 */
export function openTransport(options: TransportOptions, defaultLogger: () => Logger): PluginTransport {
  const env = options.env ?? process.env;
  const exitProcess = options.exitProcess ?? true;
  const handshake = options.handshake ?? NOMAD_HANDSHAKE;
  // A human ran the binary: say so plainly, not as JSON.
  if (!hasCookie(env, handshake)) fail(notAPluginMessage(handshake), exitProcess);
  noteHostCookie(handshake);
  const logger = options.logger ?? defaultLogger();
  let protocolVersion: number;
  try {
    protocolVersion = negotiateProtocolVersion(env, options.protocolVersions ?? DEFAULT_PROTOCOL_VERSIONS);
  } catch (err) {
    fail((err as Error).message, exitProcess, logger);
  }
  const transport = new PluginTransport(options, env, logger, protocolVersion);
  transport.stdio.install();
  return transport;
}

/**
 * Where a process-wide transport waits to be adopted: the bundled launcher's fast path starts one
 * before the plugin's code has loaded, and the plugin's own servePlugin takes it over.
 */
const WAITING = Symbol.for("@nomadkit/server.waitingTransport");

/** Leave `transport` for the next {@link adoptTransport} in this process. */
export function leaveTransport(transport: PluginTransport): void {
  (globalThis as { [WAITING]?: PluginTransport })[WAITING] = transport;
}

/**
 * The transport a fast path left in this process, if any (taken: a second call gets none). One of
 * another build (see {@link TRANSPORT_BUILD}) comes back as `foreign`: it cannot be adopted, and
 * it already owns the process's stdout, socket and host connection.
 */
export function adoptTransport(): { transport: PluginTransport } | { foreign: unknown } | undefined {
  const g = globalThis as { [WAITING]?: unknown };
  const t = g[WAITING];
  delete g[WAITING];
  if (t === undefined) return undefined;
  // Transports of fast paths older than the stamp have no `build` at all.
  if (typeof t === "object" && t !== null && (t as { build?: unknown }).build === TRANSPORT_BUILD) {
    (t as PluginTransport).adopted();
    return { transport: t as PluginTransport };
  }
  return { foreign: t };
}

/** Answers `stream` Unavailable with `message` (trailers-only), unless it is over or answered. */
function respondUnavailable(stream: http2.ServerHttp2Stream, message: string): void {
  if (stream.destroyed || stream.closed || stream.headersSent) return;
  stream.respond(
    { ":status": 200, "content-type": "application/grpc", "grpc-status": "14", "grpc-message": grpcMessageValue(message) },
    { endStream: true },
  );
}

/** An "error" listener for a stream nobody answers yet; whoever answers it sees failures its own way. */
export function ignoreError(): void {}
