/** gRPC over a unix socket (h2c), the way go-plugin plugins listen. */
import * as net from "node:net";
import type { Transport } from "@connectrpc/connect";
import { createGrpcTransport, type GrpcTransportOptions } from "@connectrpc/connect-node";
import { PLUGIN_SESSION_MEMORY_MIB } from "./windows.js";

/** Options for {@link createUnixSocketTransport}: connect-node gRPC options minus `baseUrl`. */
export type UnixSocketTransportOptions = Partial<GrpcTransportOptions>;

/**
 * A connect-node gRPC transport (HTTP/2 cleartext) to a plugin listening on `socketPath`.
 * Compression is off both ways: the socket is local and gzip triples the cost of exec streams.
 * Pass `nodeOptions.createConnection` to wrap the socket (for example in TLS for go-plugin AutoMTLS).
 *
 * @example
 * ```ts
 * const transport = createUnixSocketTransport("/tmp/plugin123.sock");
 * const driver = new DriverClient(transport, { pluginExited: child.exitSignal });
 * ```
 */
export function createUnixSocketTransport(socketPath: string, options: UnixSocketTransportOptions = {}): Transport {
  return createGrpcTransport({
    baseUrl: "http://localhost",
    acceptCompression: [],
    ...options,
    nodeOptions: {
      createConnection: () => net.connect(socketPath),
      maxSessionMemory: PLUGIN_SESSION_MEMORY_MIB,
      ...options.nodeOptions,
    },
  });
}
