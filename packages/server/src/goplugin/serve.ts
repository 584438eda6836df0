import type * as http2 from "node:http2";
import type { ConnectRouter } from "@connectrpc/connect";
import type { ServerRuntime } from "../runtime/server-runtime.js";
import { createLogger, type Logger } from "../log/index.js";
import type { HandshakeConfig } from "./env.js";
import { logLauncherReport } from "./launcher-report.js";
import { reportTransportOptions } from "./prelude.js";
import { grpcMessageValue } from "../runtime/status-message.js";
import {
  adoptTransport,
  effectiveTransportOptions,
  fail,
  openTransport,
  type PluginTransport,
} from "./transport.js";

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
   * (1 MiB) there. Node never takes the bytes queued for a stream the host resets off that count
   * (a cancelled `alloc exec` leaves ~0.4 MiB), so the default is 1 TiB (1048576): a count that
   * grows for the plugin's whole life must not lock Nomad out. Node's default (10) let a handful
   * of busy exec sessions do it at once.
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

/**
 * The launcher's fast path served with the options recorded when the plugin was bundled; options
 * that depend on the environment may differ now, and only a new bundle can serve with them.
 */
function warnIfNotAsRecorded(options: ServePluginOptions, transport: PluginTransport): void {
  const now = effectiveTransportOptions(options);
  const recorded = effectiveTransportOptions(transport.options);
  if (now !== recorded)
    transport.logger.warn(
      "servePlugin options differ from the load recording the launcher served with; the recorded ones stay in effect: bundle the plugin again",
      { options: now, recorded },
    );
}

/**
 * A transport left by a load fast path of another build (see TRANSPORT_BUILD) already owns the
 * process's stdout (the handshake is written), socket and host connection, so this plugin cannot
 * serve in its place, nor rely on it: ends start-up with a message naming the files to install.
 */
function refuseForeignTransport(foreign: unknown, options: ServePluginOptions): never {
  // The fast path's files are named after the launcher: the main module (a CommonJS bundle, which
  // the launcher runs as main: <launcher>.cjs, symlinks resolved), else the path it was started as.
  const main = (process as { mainModule?: { filename?: unknown } }).mainModule?.filename;
  const launcher =
    typeof main === "string" && main !== ""
      ? main.replace(/\.[cm]js$/, "")
      : typeof process.argv[1] === "string" && process.argv[1] !== ""
        ? process.argv[1]
        : "<launcher>";
  const message =
    `the load launch's fast path that started this process (${launcher}-load.cjs) is from another build than this plugin, ` +
    `whose go-plugin transport this plugin cannot take over: install the whole bundle directory, every file of it from the same \`nomadkit bundle\` ` +
    `(or remove ${launcher}-load.cjs and ${launcher}.load.json to start without the fast path)`;
  // The foreign transport's logger, if it has one, writes hclog lines as the host expects.
  const logger = (foreign as { logger?: { error?: unknown } } | null)?.logger;
  fail(message, options.exitProcess ?? true, typeof logger?.error === "function" ? (logger as Pick<Logger, "error">) : undefined);
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
  return (await serveOnTransport(options)).served;
}

/**
 * {@link servePlugin}, also giving its transport: the task executor watches the host's connections
 * (an executor whose host went away before any task was launched exits). Not public.
 */
export async function serveOnTransport(
  options: ServePluginOptions,
): Promise<{ served: ServedPlugin; transport: PluginTransport }> {
  // A bundled plugin's launcher may have started serving already (fast load launches): take it over.
  const waiting = adoptTransport();
  if (waiting !== undefined && "foreign" in waiting) refuseForeignTransport(waiting.foreign, options);
  const adopted = waiting?.transport;
  reportTransportOptions(options);
  const transport = adopted ?? openTransport(options, createLogger);
  if (adopted !== undefined) {
    // The fast path wrote its few lines without pino; the plugin logs with pino from here on.
    transport.useLogger(options.logger ?? createLogger());
    warnIfNotAsRecorded(options, adopted);
  }
  const logger = transport.logger;
  const shutdownSignal = transport.signal;
  const shutdown = (reason?: string) => transport.shutdown(reason);

  try {
    const [{ createPluginHandler, streamListener }, { ServerRuntime }, services, { useNodeTextEncoding }] =
      await Promise.all([
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
          stdio: transport.stdio,
          shutdownSignal,
          requestShutdown: (reason) => void shutdown(reason),
        });
        options.register(router, {
          logger,
          signal: shutdownSignal,
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
          const msg = grpcMessageValue(`unknown method ${req.url ?? ""}`);
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
    await transport.listen();
    transport.setShutdownHook(
      options.onShutdown,
      options.shutdownTimeoutMs ?? DEFAULT_SHUTDOWN_TIMEOUT_MS,
    );
    transport.serve(streamListener(transport.server, handler));
    // A shutdown requested while the plugin's code loaded behind the fast path starts here.
    transport.pluginReady();
    logLauncherReport(logger);
    if (adopted?.recordedAnswers !== undefined) {
      const { checkRecordedAnswers } = await import("./recorded-answers.js");
      void checkRecordedAnswers(transport, adopted.recordedAnswers, logger);
    }
  } catch (err) {
    transport.failStart(err);
  }

  const served: ServedPlugin = {
    network: transport.network,
    address: transport.address,
    protocolVersion: transport.protocolVersion,
    tls: transport.tls,
    handshake: transport.handshake,
    logger,
    signal: shutdownSignal,
    shutdown,
    closed: transport.closed,
  };
  return { served, transport };
}
