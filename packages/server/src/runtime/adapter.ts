/** connect-node settings every nomadkit plugin server uses. */
import type * as http2 from "node:http2";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter, type ConnectNodeAdapterOptions } from "@connectrpc/connect-node";
import { DirectPath } from "./direct.js";

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
export function createPluginHandler(
  routes: (router: ConnectRouter) => void,
  options: Partial<ConnectNodeAdapterOptions> = {},
): ReturnType<typeof connectNodeAdapter> {
  const merged = { ...pluginAdapterDefaults, ...options };
  const direct =
    merged.grpc === true && merged.acceptCompression.length === 0 && Object.keys(options).every((k) => DIRECT_OPTIONS.has(k))
      ? new DirectPath({
          shutdownSignal: merged.shutdownSignal,
          contextValues: merged.contextValues,
          maxTimeoutMs: merged.maxTimeoutMs,
          readMaxBytes: merged.readMaxBytes,
        })
      : undefined;
  const connect = connectNodeAdapter({ ...merged, routes: direct ? (router) => routes(direct.router(router)) : routes });
  if (direct === undefined) return connect;
  return (req, res) => {
    if (!direct.handle(req as http2.Http2ServerRequest, res as http2.Http2ServerResponse)) connect(req, res);
  };
}
