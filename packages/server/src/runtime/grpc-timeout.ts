/**
 * The `grpc-timeout` request header, read as grpc-go's server reads it (`decodeTimeout`,
 * internal/transport/http_util.go): 1 to 8 ASCII digits and a unit, H M S m u n. grpc-go answers a
 * malformed value Internal ("malformed grpc-timeout: ...", http2_server.go operateHeaders) before
 * looking at the method; connect answers InvalidArgument, after routing. Both of the plugin
 * server's paths answer it here, the grpc-go way.
 */
import type * as http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { contentTypeRegExp } from "@connectrpc/connect/protocol-grpc";
import { grpcMessageValue } from "./status-message.js";

const UNIT_MS: Record<string, number> = {
  H: 3_600_000,
  M: 60_000,
  S: 1000,
  m: 1,
  u: 1e-3,
  n: 1e-6,
};

/**
 * `value` in milliseconds (a fraction for u and n), or the Internal status a malformed value gets.
 * No value overflows: 99999999H is ~1.1e4 years in ms, well within a double's exact integers
 * (grpc-go clamps at ~292 years; either is "never" for a call).
 *
 * @example
 * ```ts
 * parseGrpcTimeout("250m"); // 250
 * parseGrpcTimeout("1x"); // ConnectError: malformed grpc-timeout: timeout unit is not recognized: "1x" (Internal)
 * ```
 */
export function parseGrpcTimeout(value: string): number | ConnectError {
  const malformed = (why: string) =>
    new ConnectError(
      `malformed grpc-timeout: ${why}: ${JSON.stringify(value)}`,
      Code.Internal,
    );
  if (value.length < 2) return malformed("timeout string is too short");
  if (value.length > 9) return malformed("timeout string is too long");
  const u = value[value.length - 1]!;
  if (!Object.hasOwn(UNIT_MS, u))
    return malformed("timeout unit is not recognized");
  const digits = value.slice(0, -1);
  if (!/^[0-9]+$/.test(digits)) return malformed("invalid syntax");
  return Number(digits) * UNIT_MS[u]!;
}

/**
 * If `headers` are a gRPC request's with a malformed grpc-timeout, answer it Internal (on `res`
 * when the request has Node's compatibility objects, else on `stream`) and return true.
 *
 * @example
 * ```ts
 * if (answerMalformedTimeout(stream, headers)) return; // answered: the handler is not called
 * ```
 */
export function answerMalformedTimeout(
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  res?: http2.Http2ServerResponse,
): boolean {
  const value = headers["grpc-timeout"];
  if (value === undefined) return false;
  const type = headers["content-type"];
  const m = type === undefined ? null : contentTypeRegExp.exec(type);
  if (m === null) return false;
  const status = parseGrpcTimeout(String(value));
  if (typeof status === "number") return false;
  const responseHeaders = {
    "content-type":
      m[1] === "json" ? "application/grpc+json" : "application/grpc+proto",
  };
  const trailers = {
    "grpc-status": String(status.code),
    "grpc-message": grpcMessageValue(status.rawMessage),
  };
  // The request body is read and dropped: Node ends a stream only once it has been consumed.
  if (res !== undefined) {
    res.writeHead(200, responseHeaders);
    res.addTrailers(trailers);
    res.end();
    res.req.resume();
    return true;
  }
  if (stream.destroyed || stream.closed) return true;
  stream.respond(
    { ":status": 200, ...responseHeaders },
    { waitForTrailers: true },
  );
  stream.once("wantTrailers", () => {
    if (!stream.destroyed) stream.sendTrailers(trailers);
  });
  stream.on("error", () => {});
  stream.end();
  stream.resume();
  return true;
}
