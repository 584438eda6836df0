/**
 * Classifies call failures: recoverable-error details, failures to connect, and transport failures
 * that may mean the plugin died.
 */
import { statSync } from "node:fs";
import { getSystemErrorMap } from "node:util";
import { Code, ConnectError } from "@connectrpc/connect";
import { RecoverableErrorSchema } from "@nomadkit/protocol/structs";
import { RecoverableError } from "../errors.js";
import { MAX_UNIX_SOCKET_PATH } from "./unix-socket.js";

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

/** One error of a cause chain: its string `code` and message, and a Node system error's details. */
interface ChainLink {
  code?: string;
  message?: string;
  /** The failed system call (`connect` for a socket that could not be connected to). */
  syscall?: string;
  errno?: number;
  /** The socket's path (unix) or IP address (tcp). */
  address?: string;
  port?: number;
}

/** `err` and its causes (at most 8 deep): each one's string `code` and message (a ConnectError's raw one). */
function* causeChain(err: unknown): Generator<ChainLink> {
  for (let e: unknown = err, depth = 0; e !== undefined && e !== null && depth < 8; depth++) {
    if (typeof e !== "object") break;
    const o = e as Record<keyof ChainLink | "rawMessage" | "cause", unknown>;
    const msg = typeof o.rawMessage === "string" ? o.rawMessage : o.message;
    yield {
      ...(typeof o.code === "string" && { code: o.code }),
      ...(typeof msg === "string" && { message: msg }),
      ...(typeof o.syscall === "string" && { syscall: o.syscall }),
      ...(typeof o.errno === "number" && { errno: o.errno }),
      ...(typeof o.address === "string" && { address: o.address }),
      ...(typeof o.port === "number" && { port: o.port }),
    };
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

/**
 * A call whose connection could not be made (connect(2) on the plugin's socket failed: no such
 * file, nothing listening, not a socket, no permission) as Unavailable naming the socket and why,
 * as grpc-go fails an RPC whose dial failed (Unavailable, "transport: Error while dialing: dial unix
 * <path>: connect: <errno text>"): Nomad waits for the plugin's exit on exactly that code. Node and
 * connect-node report most of these (ENOENT, ENOTDIR, EACCES, EAGAIN) as Internal with a bare
 * errno. The dial's own error stays in the cause chain. Undefined for any other failure.
 *
 * @example
 * ```ts
 * const err = dialFailure(ce) ?? ce; // Code.Unavailable: "cannot connect to the plugin at unix:/tmp/p.sock: ..."
 * ```
 */
export function dialFailure(err: ConnectError): ConnectError | undefined {
  if (!dialCodes.has(err.code) || answeredByPlugin(err)) return undefined;
  for (const link of causeChain(err)) {
    if (link.syscall !== "connect" || link.code === undefined) continue;
    const host = link.address?.includes(":") ? `[${link.address}]` : link.address;
    const where = link.address === undefined ? "" : link.port === undefined ? ` at unix:${link.address}` : ` at tcp:${host}:${link.port}`;
    const text = link.errno === undefined ? undefined : getSystemErrorMap().get(link.errno)?.[1];
    const why = text === undefined ? link.message ?? link.code : `${text} (${link.code})`;
    const unix = link.address !== undefined && link.port === undefined ? link.address : undefined;
    const because = unix === undefined ? "" : link.code === "ECONNREFUSED" ? refusedBecause(unix) : link.code === "EINVAL" ? tooLongBecause(unix) : "";
    return new ConnectError(`cannot connect to the plugin${where}: ${why}${because}`, Code.Unavailable, err.metadata, undefined, err);
  }
  return undefined;
}

/** The codes connect-node and `ConnectError.from` give a Node error (a dial's among them). */
const dialCodes = new Set([Code.Internal, Code.Unknown, Code.Aborted, Code.Unavailable]);

/**
 * Why connecting to unix socket `path` was refused: Linux refuses a path that is not a socket the
 * same way as a socket nobody listens on (one its plugin left as it died).
 */
function refusedBecause(path: string): string {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(path, { throwIfNoEntry: false });
  } catch {
    return ""; // out of reach now: nothing more to say than the errno
  }
  if (st === undefined || st.isSocket()) return ": nothing listens on it";
  const kind = st.isFile() ? "a regular file" : st.isDirectory() ? "a directory" : "something else";
  return `: it is ${kind}, not a socket`;
}

/** Why unix socket `path` is invalid, when it is for its length (see unix-socket.ts). */
function tooLongBecause(path: string): string {
  const bytes = Buffer.byteLength(path);
  return bytes > MAX_UNIX_SOCKET_PATH ? `: the path is ${bytes} bytes long, over the ${MAX_UNIX_SOCKET_PATH} bytes a unix socket address holds` : "";
}

/** The RecoverableError a FailedPrecondition status carries as a detail, if any. */
export function recoverableFrom(err: ConnectError): RecoverableError | undefined {
  if (err.code !== Code.FailedPrecondition) return undefined;
  const [detail] = err.findDetails(RecoverableErrorSchema);
  if (detail === undefined) return undefined;
  return new RecoverableError(err.rawMessage, detail.recoverable, { cause: err });
}
