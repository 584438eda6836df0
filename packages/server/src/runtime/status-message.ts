/**
 * What a status message must be to reach the caller. grpc-message travels percent-encoded in the
 * trailers: a lone UTF-16 surrogate cannot be encoded at all (connect's encoder throws a URIError,
 * and the call was never answered), and a header block over 64 KiB makes Node reset the stream
 * (FRAME_SIZE_ERROR: the caller gets Internal instead of the code and the field's name).
 */
import { ConnectError } from "@connectrpc/connect";

/**
 * Longest status message sent, in characters (up to 3 bytes each once percent-encoded).
 */
export const MAX_STATUS_MESSAGE = 8 * 1024;

/** A surrogate not part of a pair (in a `u` regexp a pair is one code point, never matched). */
const LONE_SURROGATE = /\p{Surrogate}/gu;

/**
 * `err`, or a copy of it whose message can be sent: lone surrogates become U+FFFD (as UTF-8
 * encoding does) and a message longer than {@link MAX_STATUS_MESSAGE} is cut, saying how much more
 * there was. Code, metadata, details and cause are kept.
 *
 * @example
 * ```ts
 * setTrailerStatus(trailers, sendableStatus(new ConnectError("bad name \ud800", Code.InvalidArgument)));
 * ```
 */
export function sendableStatus(err: ConnectError): ConnectError {
  let m = err.rawMessage;
  const long = m.length > MAX_STATUS_MESSAGE;
  const malformed = LONE_SURROGATE.test(m);
  LONE_SURROGATE.lastIndex = 0;
  if (!long && !malformed) return err;
  if (long) {
    // Not between the halves of a surrogate pair.
    const at = /[\uD800-\uDBFF]/.test(m[MAX_STATUS_MESSAGE - 1]!)
      ? MAX_STATUS_MESSAGE - 1
      : MAX_STATUS_MESSAGE;
    m = `${m.slice(0, at)}… (${m.length - at} more characters)`;
  }
  if (malformed) m = m.replace(LONE_SURROGATE, "\uFFFD");
  return new ConnectError(
    m,
    err.code,
    err.metadata,
    err.details as ConstructorParameters<typeof ConnectError>[3],
    err.cause,
  );
}
