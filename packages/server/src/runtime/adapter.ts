/** connect-node settings every nomadkit plugin server uses. */
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter, type ConnectNodeAdapterOptions } from "@connectrpc/connect-node";

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

/**
 * A Node http2 request handler serving `routes` with {@link pluginAdapterDefaults}.
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
  return connectNodeAdapter({ ...pluginAdapterDefaults, ...options, routes });
}
