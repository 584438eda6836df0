/** Classifies call failures: recoverable-error details, and transport failures that may mean the plugin died. */
import { Code, ConnectError } from "@connectrpc/connect";
import { RecoverableErrorSchema } from "@nomadkit/protocol/structs";
import { RecoverableError } from "../errors.js";

/**
 * Node / nghttp2 error codes and connect-node messages that mean the connection or stream broke,
 * rather than the server answering with a status.
 */
const transportCodes = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "EPIPE",
  "ENOENT",
  "ERR_STREAM_PREMATURE_CLOSE",
  "ERR_STREAM_DESTROYED",
  "ERR_HTTP2_STREAM_ERROR",
  "ERR_HTTP2_SESSION_ERROR",
  "ERR_HTTP2_GOAWAY_SESSION",
  "ERR_HTTP2_INVALID_SESSION",
  "ERR_HTTP2_INVALID_STREAM",
  "ERR_HTTP2_STREAM_CANCEL",
  "ERR_HTTP2_ERROR",
]);
const transportMessage =
  /http\/2 (stream|connection) closed|NGHTTP2_|socket hang up|premature close|connection aborted|sentinel completed early|expected open session|missing trailer|stream reset|GOAWAY|ECONNRESET|EPIPE/i;

/**
 * True when a failure looks like the transport broke (what Nomad treats as "maybe the plugin
 * exited"): Unavailable always, Canceled unless the plugin answered it as a status (a stream reset
 * or a lost connection is Canceled too; a plugin that sends a status is alive), Internal/Unknown/
 * Aborted only when the error chain shows a reset stream, closed connection or socket error (a
 * handler's own Unknown status does not).
 *
 * @example
 * ```ts
 * isTransportFailure(new ConnectError("connect ECONNREFUSED", Code.Unavailable)); // true
 * ```
 */
export function isTransportFailure(err: ConnectError): boolean {
  if (err.code === Code.Unavailable) return true;
  if (err.code === Code.Canceled) return !answeredByPlugin(err);
  if (err.code !== Code.Internal && err.code !== Code.Unknown && err.code !== Code.Aborted) return false;
  for (const { code, message } of causeChain(err)) {
    if (code !== undefined && transportCodes.has(code)) return true;
    if (message !== undefined && transportMessage.test(message)) return true;
  }
  return false;
}

/** `err` and its causes (at most 8 deep): each one's string `code` and message (a ConnectError's raw one). */
function* causeChain(err: unknown): Generator<{ code?: string; message?: string }> {
  for (let e: unknown = err, depth = 0; e !== undefined && e !== null && depth < 8; depth++) {
    if (typeof e !== "object") break;
    const o = e as { code?: unknown; message?: unknown; rawMessage?: unknown; cause?: unknown };
    const msg = typeof o.rawMessage === "string" ? o.rawMessage : o.message;
    yield { ...(typeof o.code === "string" && { code: o.code }), ...(typeof msg === "string" && { message: msg }) };
    e = o.cause;
  }
}

/**
 * Whether the failure is a status the server sent (grpc-status in its trailer or trailers-only
 * header), as opposed to one made on this side for a reset stream, a lost connection or a response
 * that is not gRPC at all (an HTTP 404 maps to Unimplemented too).
 *
 * @example
 * ```ts
 * answeredByPlugin(new ConnectError("gone", Code.Unavailable)); // false
 * ```
 */
export function answeredByPlugin(err: ConnectError): boolean {
  return err.metadata.has("grpc-status");
}

/**
 * A stream the server refused (RST_STREAM or a GOAWAY's REFUSED_STREAM: it was never processed, so
 * it may be sent again) as Unavailable, as grpc-go and grpc-js report it; Node's HTTP/2 reports it
 * as a stream error, which connect-node and the direct path would otherwise turn into Internal.
 * Undefined for any other failure.
 *
 * @example
 * ```ts
 * const err = refusedStream(ce) ?? ce; // Code.Unavailable for a refused stream
 * ```
 */
export function refusedStream(err: ConnectError): ConnectError | undefined {
  // A status the plugin sent was processed, whatever its message says.
  if (err.code !== Code.Internal || answeredByPlugin(err)) return undefined;
  for (const { message } of causeChain(err)) {
    if (message !== undefined && /\b(NGHTTP2_)?REFUSED_STREAM\b/.test(message)) {
      return new ConnectError(err.rawMessage, Code.Unavailable, err.metadata, undefined, err);
    }
  }
  return undefined;
}

/** The RecoverableError a FailedPrecondition status carries as a detail, if any. */
export function recoverableFrom(err: ConnectError): RecoverableError | undefined {
  if (err.code !== Code.FailedPrecondition) return undefined;
  const [detail] = err.findDetails(RecoverableErrorSchema);
  if (detail === undefined) return undefined;
  return new RecoverableError(err.rawMessage, detail.recoverable, { cause: err });
}
