/** connect-node settings every nomadkit plugin server uses. */
import type * as http2 from "node:http2";
import { createConnectRouter, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import type { ConnectNodeAdapterOptions, connectNodeAdapter } from "@connectrpc/connect-node";
import { DirectPath } from "./direct.js";
import { answerMalformedTimeout } from "./grpc-timeout.js";
import { holdLongDeadline } from "./long-deadline.js";
import { sendableErrors } from "./status-message.js";

type NodeHandler = ReturnType<typeof connectNodeAdapter>;

/**
 * Defaults for `connectNodeAdapter`: gRPC only (what Nomad and go-plugin speak), and no response
 * compression (`acceptCompression: []`): gzip costs about 3x on exec streams over a local socket.
 *
 * @example
 * ```ts
 * connectNodeAdapter({ ...pluginAdapterDefaults, routes });
 * ```
 */
export const pluginAdapterDefaults = {
  /** No response compression. */
  acceptCompression: [],
  /** Serve the gRPC protocol. */
  grpc: true,
  /** No gRPC-web. */
  grpcWeb: false,
  /** No Connect protocol. */
  connect: false,
} satisfies Partial<ConnectNodeAdapterOptions>;

/** Adapter options the direct path implements itself; with any other option set, connect serves every call. */
const DIRECT_OPTIONS = new Set(["acceptCompression", "grpc", "grpcWeb", "connect", "fallback", "shutdownSignal", "contextValues", "maxTimeoutMs", "readMaxBytes"]);

/**
 * A Node http2 request handler serving `routes` with {@link pluginAdapterDefaults}. Plain gRPC calls
 * (binary, uncompressed: what Nomad and go-plugin send) are served directly on the HTTP/2 stream,
 * without connect's per-message pipeline and without copying pre-encoded payloads; everything else
 * is left to connect. Both give the same statuses, headers and trailers.
 *
 * @example
 * ```ts
 * const server = http2.createServer(createPluginHandler((router) => registerDriver(router, driver, runtime)));
 * server.listen(socketPath);
 * ```
 */
export function createPluginHandler(routes: (router: ConnectRouter) => void, options: Partial<ConnectNodeAdapterOptions> = {}): NodeHandler {
  const merged = { ...pluginAdapterDefaults, ...options };
  // What connect serves, it serves with sendableErrors outermost; so do registrations with
  // interceptors of their own (connect lets those replace the adapter's).
  const forConnect = withSendableErrors(merged);
  const direct =
    merged.grpc === true && merged.acceptCompression.length === 0 && Object.keys(options).every((k) => DIRECT_OPTIONS.has(k))
      ? new DirectPath({
          shutdownSignal: merged.shutdownSignal,
          contextValues: merged.contextValues,
          maxTimeoutMs: merged.maxTimeoutMs,
          readMaxBytes: merged.readMaxBytes,
        })
      : undefined;

  // Registrations are recorded (and handed to the direct path) now, synchronously, and replayed
  // onto connect's router when connect is first needed: with the direct path that is only for calls
  // it does not serve, so connect-node is not loaded at plugin start-up.
  const replay: ((router: ConnectRouter) => void)[] = [];
  let connectRouter: ConnectRouter | undefined;
  const recorder: ConnectRouter = {
    get handlers() {
      if (connectRouter === undefined) {
        connectRouter = createConnectRouter(forConnect);
        for (const r of replay) r(connectRouter);
      }
      return connectRouter.handlers;
    },
    service(service, implementation, opts) {
      direct?.addService(service, implementation, opts);
      const o = opts?.interceptors === undefined ? opts : withSendableErrors(opts);
      replay.push((r) => r.service(service, implementation, o));
      connectRouter?.service(service, implementation, o);
      return recorder;
    },
    rpc(method, impl, opts) {
      direct?.addMethod(method, impl, opts);
      const o = opts?.interceptors === undefined ? opts : withSendableErrors(opts);
      replay.push((r) => r.rpc(method, impl, o));
      connectRouter?.rpc(method, impl, o);
      return recorder;
    },
  };
  routes(recorder);

  let connect: NodeHandler | undefined;
  let loading: Promise<NodeHandler> | undefined;
  const loadConnect = (): Promise<NodeHandler> =>
    (loading ??= import("@connectrpc/connect-node").then((m) => {
      connect = m.connectNodeAdapter({ ...forConnect, routes: (router) => replay.forEach((r) => r(router)) });
      return connect;
    }));
  // Without the direct path every call goes to connect: load it right away.
  if (direct === undefined) void loadConnect().catch(() => {});
  const handler: NodeHandler = (req, res) => {
    if (direct !== undefined) {
      if (direct.handle(req as http2.Http2ServerRequest, res as http2.Http2ServerResponse)) return;
    } else {
      // What the direct path answers itself when there is one (see grpc-timeout.ts).
      const stream = (req as http2.Http2ServerRequest).stream as http2.ServerHttp2Stream | undefined;
      if (stream !== undefined && answerMalformedTimeout(stream, req.headers as http2.IncomingHttpHeaders, res as http2.Http2ServerResponse)) return;
    }
    // connect's deadline timer takes the whole grpc-timeout: a longer one than Node's limit is kept here.
    holdLongDeadline(req as http2.Http2ServerRequest, merged.maxTimeoutMs);
    if (connect !== undefined) return connect(req, res);
    loadConnect().then(
      (handler) => {
        // The client may have gone while connect was loading: nothing left to answer.
        if (!(req as { stream?: http2.ServerHttp2Stream }).stream?.destroyed) handler(req, res);
      },
      () => {
        res.writeHead(500);
        res.end();
      },
    );
  };
  if (direct !== undefined) streamHandlers.set(handler, (stream, headers) => direct.handleStream(stream, headers));
  return handler;
}

function withSendableErrors<T extends { interceptors?: Interceptor[] | undefined }>(options: T): T {
  return { ...options, interceptors: [sendableErrors, ...(options.interceptors ?? [])] };
}

/** Serves a new HTTP/2 stream itself if it can (true), before any request/response object exists. */
type StreamHandler = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => boolean;
const streamHandlers = new WeakMap<NodeHandler, StreamHandler>();

/**
 * The `stream` listener that serves `server`'s streams with `handler` (from
 * {@link createPluginHandler}), letting it see each new stream before Node's compatibility layer
 * does. Node emits `request` from a `stream` listener it adds for the request handler, building a
 * request and a response object per stream; calls the direct path serves need neither, and
 * skipping them is about a tenth of a unary call. Streams the direct path does not take go to
 * Node's listener. `handler` becomes the server's `request` listener; Node's own `stream` listener
 * is taken off the server and called from the returned one, which the caller adds (the plugin
 * transport routes every stream through it). Should a Node version emit `request` some other way,
 * the direct path still serves each stream once (and the saving is lost, nothing else).
 */
export function streamListener(
  server: http2.Http2Server | http2.Http2SecureServer,
  handler: NodeHandler,
): (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, ...rest: unknown[]) => void {
  const before = new Set(server.listeners("stream"));
  server.on("request", handler);
  const compat = (server.listeners("stream") as ((...args: unknown[]) => void)[]).filter((l) => !before.has(l));
  for (const l of compat) server.removeListener("stream", l);
  const direct = streamHandlers.get(handler);
  return (stream, headers, ...rest) => {
    if (direct?.(stream, headers)) return;
    for (const listener of compat) listener.call(server, stream, headers, ...rest);
  };
}
