/**
 * Lenient decoding of `grpc-message`. The gRPC spec says a client decoding an invalid
 * percent-encoded value "MUST NOT error or throw away the message", and grpc-go and grpc-js keep
 * what they cannot decode as it is. connect decodes it with `decodeURIComponent`, which throws on
 * a bare `%` or an escape that is not UTF-8: the caller got a URIError (or Unknown "URI malformed")
 * instead of the plugin's status.
 */
import type * as http2 from "node:http2";

/**
 * grpc-go's decoding: each `%XX` with two hex digits is that byte, anything else stays as it is;
 * the bytes are then read as UTF-8 (what is not UTF-8 becomes U+FFFD).
 */
function decodeLeniently(value: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (
      c === 37 /* % */ &&
      /^[0-9a-fA-F]{2}$/.test(value.slice(i + 1, i + 3))
    ) {
      bytes.push(parseInt(value.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      // Header values reach us as latin1 text: one byte per character.
      bytes.push(c & 0xff);
    }
  }
  return new TextDecoder().decode(new Uint8Array(bytes));
}

/**
 * Rewrites, in place, a `grpc-message` in response headers or trailers that `decodeURIComponent`
 * would refuse, as the valid encoding of its lenient decoding; a valid value is left alone. Run
 * before connect's listeners see the headers, so both call paths (connect's and h2-call's) get the
 * plugin's status with its message.
 */
export function repairGrpcMessage(headers: http2.IncomingHttpHeaders): void {
  const value = headers["grpc-message"];
  if (typeof value !== "string") return;
  try {
    decodeURIComponent(value);
  } catch {
    headers["grpc-message"] = encodeURIComponent(decodeLeniently(value));
  }
}
