import { X509Certificate } from "node:crypto";
import { rmSync, writeSync } from "node:fs";
import type * as http2 from "node:http2";
import type { Server as NetServer, Socket } from "node:net";
import type { ConnectRouter } from "@connectrpc/connect";
import type { ServerRuntime } from "../runtime/server-runtime.js";
import { createLogger, type Logger } from "../log/index.js";
import {
  CORE_PROTOCOL_VERSION,
  NOMAD_HANDSHAKE,
  PluginEnvironmentError,
  hasCookie,
  negotiateProtocolVersion,
  notAPluginMessage,
  type HandshakeConfig,
} from "./env.js";
import { listenTcp, listenUnix, type ListenResult } from "./listen.js";
import { StdioCapture } from "./stdio.js";

/** What {@link ServePluginOptions.register} gets besides the router. */
export interface PluginContext {
  /** The plugin's logger (hclog JSON on stderr). */
  readonly logger: Logger;
  /**
   * Aborted when the plugin starts shutting down (GRPCController.Shutdown, SIGTERM or
   * {@link ServedPlugin.shutdown}). Long-lived streams (fingerprint, task events, stats) should end
   * when it fires so the server can close quickly.
   */
  readonly signal: AbortSignal;
  /**
   * The server runtime (error mapping, logging to `logger`) servePlugin uses for its own services;
   * pass it as the last argument of the generated `registerX` helpers.
   */
  readonly runtime: ServerRuntime;
}

/** Options for {@link servePlugin}. */
export interface ServePluginOptions {
  /**
   * Adds the plugin's own services to the gRPC router, typically with the generated helpers
   * (`registerBasePlugin(router, ...)`, `registerDriver(router, ...)`). Called once, synchronously,
   * before the plugin listens. go-plugin's services (health, controller, stdio, broker) are added by
   * servePlugin itself. Do asynchronous preparation before calling servePlugin.
   */
  register(router: ConnectRouter, ctx: PluginContext): void;
  /** Logger to use; defaults to `createLogger()` (hclog JSON on stderr, level trace). */
  logger?: Logger;
  /**
   * Called once when shutdown starts, after health turned NOT_SERVING and `ctx.signal` aborted,
   * while the server still answers. Bounded by `shutdownTimeoutMs`.
   */
  onShutdown?(): void | Promise<void>;
  /** Magic cookie; defaults to Nomad's ({@link NOMAD_HANDSHAKE}). Set it for other go-plugin hosts. */
  handshake?: HandshakeConfig;
  /** App protocol versions this plugin speaks; default `[2]` (Nomad's). */
  protocolVersions?: readonly number[];
  /**
   * `unix` (default; falls back to TCP when no unix socket can be created) or `tcp`
   * (127.0.0.1 within `PLUGIN_MIN_PORT..PLUGIN_MAX_PORT`).
   */
  network?: "unix" | "tcp";
  /** Upper bound for `onShutdown`, in ms; default 1000 so the process exits well within the host's 2 s. */
  shutdownTimeoutMs?: number;
  /** Environment to read the go-plugin variables from; default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /**
   * Whether to `process.exit` after shutdown (0) and on start-up errors (1, with a message on
   * stderr). Default true, as a plugin binary should. With false, start-up errors are thrown.
   */
  exitProcess?: boolean;
  /**
   * Largest request message accepted, in bytes; a bigger one is answered ResourceExhausted before
   * it is buffered. Default 4 MiB, grpc-go's server default (what Go plugins enforce; Nomad never
   * sends more).
   */
  readMaxBytes?: number;
  /**
   * Shut down (gracefully, exit 0) once the host's last connection has been closed without a
   * Shutdown call and none arrives within this many ms (`true` = 1000). Default off: a go-plugin
   * plugin outlives its host's connection, because Nomad reattaches to running plugins after an
   * agent restart; turn it on for hosts that never reattach.
   */
  exitOnHostDisconnect?: boolean | number;
  /**
   * HTTP/2 `maxSessionMemory` of the host's connection, in MiB. Node refuses new streams with
   * ENHANCE_YOUR_CALM while the connection's accounted memory is above it, and response data
   * handed to Node but not yet framed counts: a busy exec session holds up to one output message
   * (1 MiB) there. Node's default (10) lets a handful of busy `alloc exec` sessions lock the host
   * out of TaskStats and InspectTask; the default here is 128, room for about a hundred.
   */
  maxSessionMemoryMiB?: number;
}

/** A running plugin server. */
export interface ServedPlugin {
  /** `unix` or `tcp`. */
  readonly network: "unix" | "tcp";
  /** Socket path or `127.0.0.1:port`. */
  readonly address: string;
  /** Negotiated app protocol version (handshake field 2). */
  readonly protocolVersion: number;
  /** Whether AutoMTLS is on. */
  readonly tls: boolean;
  /** The exact handshake line written to stdout (without the newline). */
  readonly handshake: string;
  /** The plugin's logger (`options.logger` or the default hclog JSON logger on stderr). */
  readonly logger: Logger;
  /** Same as {@link PluginContext.signal}. */
  readonly signal: AbortSignal;
  /** Starts (or joins) the graceful shutdown; resolves when the server is closed. */
  shutdown(reason?: string): Promise<void>;
  /** Resolves when the server has closed. */
  readonly closed: Promise<void>;
}

const DEFAULT_SHUTDOWN_TIMEOUT_MS = 1000;
const DEFAULT_READ_MAX_BYTES = 4 * 1024 * 1024;
const DEFAULT_MAX_SESSION_MEMORY_MIB = 128;
// After onShutdown, how long open HTTP/2 streams get to finish before their sessions are destroyed.
const SESSION_CLOSE_GRACE_MS = 250;

function fail(message: string, exitProcess: boolean, logger?: Logger): never {
  if (!exitProcess) throw new PluginEnvironmentError(message);
  if (logger) logger.error(message);
  else writeSync(2, message.endsWith("\n") ? message : message + "\n");
  process.exit(1);
}

function withTimeout(
  p: Promise<unknown>,
  ms: number,
): Promise<"timeout" | undefined> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.then(() => undefined),
    new Promise<"timeout">(
      (resolve) => (timer = setTimeout(() => resolve("timeout"), ms)),
    ),
  ]).finally(() => clearTimeout(timer));
}

/**
 * Serves a go-plugin (gRPC) plugin the way Nomad launches one: checks the magic cookie, negotiates
 * `PLUGIN_PROTOCOL_VERSIONS`, listens on a private unix socket (or TCP), serves h2c gRPC (TLS with
 * AutoMTLS when `PLUGIN_CLIENT_CERT` is set) with go-plugin's health, controller, stdio and broker
 * services plus whatever `register` adds, and writes the handshake line as the first (and only)
 * stdout output. Afterwards `process.stdout` writes go to the log and GRPCStdio instead.
 *
 * SIGINT is ignored (the host's terminal sends it to the whole process group); SIGTERM and
 * GRPCController.Shutdown shut down gracefully and exit 0; the socket directory is removed on exit.
 * A host that closes its connection, or dies, without Shutdown does not stop the plugin (as with
 * go-plugin: hosts may reattach, and Nomad does after an agent restart); the calls of that
 * connection are cancelled.
 *
 * @example
 * ```ts
 * import { servePlugin, createLogger } from "@nomadkit/server";
 * import { registerBasePlugin, registerDriver } from "@nomadkit/server";
 *
 * await servePlugin({
 *   logger: createLogger({ name: "my-driver" }),
 *   register(router, ctx) {
 *     registerBasePlugin(router, myBasePluginHandlers, ctx.runtime);
 *     registerDriver(router, myDriverHandlers, ctx.runtime);
 *   },
 *   async onShutdown() {
 *     await flushState();
 *   },
 * });
 * ```
 */
export async function servePlugin(
  options: ServePluginOptions,
): Promise<ServedPlugin> {
  const env = options.env ?? process.env;
  const exitProcess = options.exitProcess ?? true;
  const handshake = options.handshake ?? NOMAD_HANDSHAKE;

  // A human ran the binary: say so plainly, not as JSON.
  if (!hasCookie(env, handshake))
    fail(notAPluginMessage(handshake), exitProcess);

  const logger = options.logger ?? createLogger();
  let protocolVersion: number;
  try {
    protocolVersion = negotiateProtocolVersion(
      env,
      options.protocolVersions ?? [2],
    );
  } catch (err) {
    fail((err as Error).message, exitProcess, logger);
  }

  // From here on nothing but the handshake may reach fd 1.
  const stdio = new StdioCapture(logger);
  stdio.install();

  const shutdownController = new AbortController();
  let shutdownPromise: Promise<void> | undefined;
  let listening: ListenResult | undefined;
  let resolveClosed!: () => void;
  const closed = new Promise<void>((r) => (resolveClosed = r));
  const sessions = new Set<http2.ServerHttp2Session>();
  // The connections under the sessions: a session that was closed gracefully first and then
  // destroyed only half-closes its socket and waits for the peer's end, which a busy or confused
  // peer may never send; the socket itself can always be destroyed.
  const sockets = new Set<Socket>();
  const removeSocketDir = () => {
    if (listening?.socketDir)
      rmSync(listening.socketDir, { recursive: true, force: true });
  };

  let server: http2.Http2Server | http2.Http2SecureServer;
  let serverCertField = "";
  try {
    const [http2mod, { createPluginHandler, serveStreamsDirectly }, { ServerRuntime }, services, { useNodeTextEncoding }] =
      await Promise.all([
        import("node:http2"),
        import("../runtime/adapter.js"),
        import("../runtime/server-runtime.js"),
        import("./services.js"),
        import("../runtime/text-encoding.js"),
      ]);
    // The plugin process is ours: protobuf-es's string encoding setting is per process.
    useNodeTextEncoding();
    const runtime = new ServerRuntime({ logger: logger.named("grpc") });
    // gRPC only, no response compression (see pluginAdapterDefaults).
    const handler = createPluginHandler(
      (router) => {
        services.registerCoreServices(router, {
          logger,
          runtime,
          stdio,
          shutdownSignal: shutdownController.signal,
          requestShutdown: (reason) => void shutdown(reason),
        });
        options.register(router, {
          logger,
          signal: shutdownController.signal,
          runtime,
        });
      },
      {
        readMaxBytes: options.readMaxBytes ?? DEFAULT_READ_MAX_BYTES,
        fallback(req, res) {
          // A proper gRPC Unimplemented (trailers-only) rather than HTTP 404.
          const stream = (
            res as unknown as { stream?: http2.ServerHttp2Stream }
          ).stream;
          const msg = encodeURIComponent(`unknown method ${req.url ?? ""}`);
          if (stream && !stream.headersSent) {
            stream.respond(
              {
                ":status": 200,
                "content-type": "application/grpc",
                "grpc-status": "12",
                "grpc-message": msg,
              },
              { endStream: true },
            );
          } else {
            res.writeHead(404);
            res.end();
          }
        },
      },
    );

    const maxSessionMemory = options.maxSessionMemoryMiB ?? DEFAULT_MAX_SESSION_MEMORY_MIB;
    if (typeof maxSessionMemory !== "number" || !Number.isFinite(maxSessionMemory) || maxSessionMemory < 1) {
      throw new TypeError(`servePlugin: maxSessionMemoryMiB must be a number of MiB >= 1, got ${JSON.stringify(maxSessionMemory)}`);
    }
    const sessionSettings = { maxSessionMemory };
    const clientCertPem = env.PLUGIN_CLIENT_CERT;
    if (clientCertPem) {
      try {
        new X509Certificate(clientCertPem);
      } catch (err) {
        throw new PluginEnvironmentError(
          `PLUGIN_CLIENT_CERT is not a PEM certificate: ${(err as Error).message}`,
        );
      }
      const { generateSelfSignedCertificate, certDerToHandshakeField } =
        await import("./tls.js");
      const own = await generateSelfSignedCertificate();
      serverCertField = certDerToHandshakeField(own.certDer);
      server = http2mod.createSecureServer(
        {
          key: own.keyPem,
          cert: own.certPem,
          ca: clientCertPem,
          requestCert: true,
          rejectUnauthorized: true,
          minVersion: "TLSv1.2",
          ALPNProtocols: ["h2"],
          ...sessionSettings,
        },
        handler,
      );
      server.on("tlsClientError", (err: Error) =>
        logger.warn("rejected TLS client", { error: err.message }),
      );
    } else {
      server = http2mod.createServer(sessionSettings, handler);
    }
    serveStreamsDirectly(server, handler);
    const disconnectGraceMs =
      options.exitOnHostDisconnect === true ? 1000 : options.exitOnHostDisconnect || undefined;
    let disconnectTimer: NodeJS.Timeout | undefined;
    server.on("connection", (socket: Socket) => {
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
    });
    server.on("session", (s: http2.ServerHttp2Session) => {
      sessions.add(s);
      clearTimeout(disconnectTimer);
      s.once("close", () => {
        sessions.delete(s);
        if (disconnectGraceMs !== undefined && sessions.size === 0 && shutdownPromise === undefined) {
          disconnectTimer = setTimeout(() => void shutdown("host disconnected"), disconnectGraceMs);
          disconnectTimer.unref();
        }
      });
      s.on("error", (err) =>
        logger.debug("HTTP/2 session error", { error: err.message }),
      );
    });

    const netServer = server as unknown as NetServer;
    if (options.network === "tcp" || process.platform === "win32") {
      listening = await listenTcp(netServer, env);
    } else {
      try {
        listening = await listenUnix(netServer, env);
      } catch (err) {
        if (env.PLUGIN_UNIX_SOCKET_DIR || env.PLUGIN_UNIX_SOCKET_GROUP)
          throw err;
        logger.warn("cannot listen on a unix socket, using TCP", {
          error: (err as Error).message,
        });
        listening = await listenTcp(netServer, env);
      }
    }
  } catch (err) {
    stdio.uninstall();
    removeSocketDir();
    if (
      !(err instanceof PluginEnvironmentError) &&
      err instanceof Error &&
      err.stack
    ) {
      logger.debug("start-up failure", { stack: err.stack });
    }
    fail(
      err instanceof PluginEnvironmentError
        ? err.message
        : `plugin failed to start: ${err instanceof Error ? err.message : String(err)}`,
      exitProcess,
      logger,
    );
  }
  const where = listening;
  process.once("exit", removeSocketDir);

  const line = [
    CORE_PROTOCOL_VERSION,
    protocolVersion,
    where.network,
    where.address,
    "grpc",
    serverCertField,
  ].join("|");
  writeSync(1, line + "\n");
  logger.debug("plugin started", {
    network: where.network,
    address: where.address,
    tls: serverCertField !== "",
  });

  const onSigint = () =>
    logger.debug("ignoring SIGINT; shutdown comes from the host");
  const onSigterm = () => void shutdown("SIGTERM");
  process.on("SIGINT", onSigint);
  process.on("SIGTERM", onSigterm);

  async function closeServer(): Promise<void> {
    const done = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const s of sessions) if (!s.closed) s.close();
    const timer = setTimeout(() => {
      for (const s of sessions) s.destroy();
      for (const socket of sockets) socket.destroy();
    }, SESSION_CLOSE_GRACE_MS);
    await done;
    clearTimeout(timer);
  }

  function shutdown(reason = "shutdown requested"): Promise<void> {
    shutdownPromise ??= (async () => {
      logger.debug("plugin shutting down", { reason });
      shutdownController.abort(new Error(`plugin shutting down: ${reason}`));
      if (options.onShutdown) {
        const timeoutMs =
          options.shutdownTimeoutMs ?? DEFAULT_SHUTDOWN_TIMEOUT_MS;
        try {
          const r = await withTimeout(
            Promise.resolve().then(() => options.onShutdown!()),
            timeoutMs,
          );
          if (r === "timeout")
            logger.warn("onShutdown did not finish in time", {
              timeout_ms: timeoutMs,
            });
        } catch (err) {
          logger.error("onShutdown failed", { error: err as Error });
        }
      }
      stdio.close();
      await closeServer();
      removeSocketDir();
      process.off("SIGINT", onSigint);
      process.off("SIGTERM", onSigterm);
      resolveClosed();
      if (exitProcess) {
        stdio.uninstall();
        process.exit(0);
      }
    })();
    return shutdownPromise;
  }

  return {
    network: where.network,
    address: where.address,
    protocolVersion,
    tls: serverCertField !== "",
    handshake: line,
    logger,
    signal: shutdownController.signal,
    shutdown,
    closed,
  };
}
