/**
 * What a status message must be to reach the caller. grpc-message travels percent-encoded in the
 * trailers: a lone UTF-16 surrogate cannot be encoded at all (connect's encoder throws a URIError,
 * and the call was never answered), and a header block over 64 KiB makes Node reset the stream
 * (FRAME_SIZE_ERROR: the caller gets Internal instead of the code and the field's name).
 */
import { ConnectError, type Interceptor } from "@connectrpc/connect";

/**
 * Most bytes a status message takes in grpc-message, percent-encoded, counted as the most either
 * encoding (connect's, {@link grpcMessageValue}) can take: 3 an ASCII character, 3 per UTF-8 byte
 * otherwise (9 for "日"). With the details, which repeat the message (base64), the trailers stay
 * well within Node's 64 KiB. Up to 8192 ASCII characters.
 */
export const MAX_STATUS_MESSAGE_BYTES = 24 * 1024;

/** A surrogate not part of a pair (in a `u` regexp a pair is one code point, never matched). */
const LONE_SURROGATE = /\p{Surrogate}/gu;

/** How many UTF-16 units of `m` fit in {@link MAX_STATUS_MESSAGE_BYTES}; never half a pair. */
function fittingLength(m: string): number {
  // No UTF-16 unit takes more than 9 bytes.
  if (m.length * 9 <= MAX_STATUS_MESSAGE_BYTES) return m.length;
  let bytes = 0;
  for (let i = 0; i < m.length;) {
    const c = m.codePointAt(i)!;
    bytes += c < 0x80 ? 3 : c < 0x800 ? 6 : c < 0x10000 ? 9 : 12;
    if (bytes > MAX_STATUS_MESSAGE_BYTES) return i;
    i += c > 0xffff ? 2 : 1;
  }
  return m.length;
}

/**
 * `err`, or a copy of it whose message can be sent: lone surrogates become U+FFFD (as UTF-8
 * encoding does) and a message over {@link MAX_STATUS_MESSAGE_BYTES} encoded is cut, saying how
 * much more there was. Code, metadata, details and cause are kept.
 *
 * @example
 * ```ts
 * setTrailerStatus(trailers, sendableStatus(new ConnectError("bad name \ud800", Code.InvalidArgument)));
 * ```
 */
export function sendableStatus(err: ConnectError): ConnectError {
  let m = err.rawMessage;
  const at = fittingLength(m);
  const malformed = LONE_SURROGATE.test(m);
  LONE_SURROGATE.lastIndex = 0;
  if (at === m.length && !malformed) return err;
  if (at < m.length)
    m = `${m.slice(0, at)}… (${m.length - at} more characters)`;
  if (malformed) m = m.replace(LONE_SURROGATE, "\uFFFD");
  return new ConnectError(
    m,
    err.code,
    err.metadata,
    err.details as ConstructorParameters<typeof ConnectError>[3],
    err.cause,
  );
}

export { grpcMessageValue } from "./grpc-message.js";

/**
 * A connect interceptor that passes every ConnectError a handler (or an interceptor after this
 * one) throws through {@link sendableStatus}, for the calls connect serves itself (compressed or
 * JSON requests, or all of them when adapter options turn the direct path off). connect
 * percent-encodes grpc-message with encodeURIComponent, which throws on a lone surrogate: the call
 * was never answered. Handlers wrapped by the server runtime are sendable already; raw router
 * handlers are not. Other errors are left as they are (connect answers them "internal error").
 *
 * @example
 * ```ts
 * connectNodeAdapter({ ...pluginAdapterDefaults, interceptors: [sendableErrors], routes });
 * ```
 */
export const sendableErrors: Interceptor = (next) => async (req) => {
  let res: Awaited<ReturnType<typeof next>>;
  try {
    res = await next(req);
  } catch (e) {
    throw sendableError(e);
  }
  return res.stream ? { ...res, message: sendableMessages(res.message) } : res;
};

function sendableError(e: unknown): unknown {
  return e instanceof ConnectError ? sendableStatus(e) : e;
}

async function* sendableMessages<T>(messages: AsyncIterable<T>): AsyncIterable<T> {
  try {
    // yield* hands return() on to `messages`: a call ended early still ends the handler's stream.
    yield* messages;
  } catch (e) {
    throw sendableError(e);
  }
}
