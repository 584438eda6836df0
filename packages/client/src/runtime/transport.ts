/** gRPC over a unix socket (h2c), the way go-plugin plugins listen. */
import type { Transport } from "@connectrpc/connect";
import { createGrpcTransport, type GrpcTransportOptions } from "@connectrpc/connect-node";
import { DEFAULT_CONNECT_TIMEOUT_MS } from "./h2-handshake.js";
import { markCalls, PluginSessionManager } from "./sessions.js";
import { connectUnixSocket } from "./unix-socket.js";

/** Options for {@link createUnixSocketTransport}: connect-node gRPC options minus `baseUrl`, and the connect timeout. */
export type UnixSocketTransportOptions = Partial<GrpcTransportOptions> & {
  /**
   * How long a new connection may take until the plugin's HTTP/2 SETTINGS arrive before the calls
   * waiting for it fail with Unavailable naming the socket (grpc-go's connect timeout). Default
   * {@link DEFAULT_CONNECT_TIMEOUT_MS} (20 s); ≤ 0: no limit. Not used with a `sessionManager` of the caller's own.
   */
  connectTimeoutMs?: number;
};

/**
 * A connect-node gRPC transport (HTTP/2 cleartext) to a plugin listening on `socketPath`.
 * Compression is off both ways: the socket is local and gzip triples the cost of exec streams.
 * Pass `nodeOptions.createConnection` to wrap the socket (for example in TLS for go-plugin AutoMTLS).
 * Its connections are the ones `launchPlugin` makes (`PluginSessionManager`): the same HTTP/2
 * windows, and the same lenient reading of a `grpc-message` that is not valid percent-encoding.
 *
 * @example
 * ```ts
 * const transport = createUnixSocketTransport("/tmp/plugin123.sock");
 * const driver = new DriverClient(transport, { pluginExited: child.exitSignal });
 * ```
 */
export function createUnixSocketTransport(socketPath: string, options: UnixSocketTransportOptions = {}): Transport {
  const baseUrl = options.baseUrl ?? "http://localhost";
  const { pingIntervalMs, pingIdleConnection, pingTimeoutMs, idleConnectionTimeoutMs } = options;
  const { connectTimeoutMs, ...grpcOptions } = options;
  // A session manager of the caller's own is used as it is (connect ignores nodeOptions then too).
  const sessionManager =
    options.sessionManager ??
    new PluginSessionManager(
      baseUrl,
      { createConnection: () => connectUnixSocket(socketPath), ...options.nodeOptions },
      { pingIntervalMs, pingIdleConnection, pingTimeoutMs, idleConnectionTimeoutMs, connectTimeoutMs, target: `unix:${socketPath}` },
    );
  return createGrpcTransport({
    acceptCompression: [],
    ...grpcOptions,
    baseUrl,
    sessionManager,
    // Last, next to the transport: the signal it sees is the call's own, deadline included.
    interceptors: sessionManager instanceof PluginSessionManager ? [...(grpcOptions.interceptors ?? []), markCalls] : grpcOptions.interceptors,
  });
}
