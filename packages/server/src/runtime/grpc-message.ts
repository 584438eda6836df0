/**
 * grpc-message's encoding, in a module of its own that imports nothing: the go-plugin transport
 * uses it in the load launch's fast path, which must not load connect (see goplugin/prelude.ts).
 * @module
 */

/** Bytes sent as they are: printable ASCII but space (trimmed by some) and '%'. */
const PLAIN_MESSAGE = /^[\x21-\x24\x26-\x7E]*$/;

/**
 * `message` as the value of grpc-message: UTF-8, percent-encoded as the gRPC spec and grpc-go do,
 * so every other printable ASCII character is sent as it is. connect encodes with
 * encodeURIComponent, which also escapes `:`, `/`, `,`, `=` ...; grpc-js decodes with decodeURI,
 * which leaves those escapes in place ("open %2Fvar%2Flib"). Spaces stay encoded (`%20`), which
 * every decoder takes, so a message never starts or ends with whitespace on the wire.
 *
 * @example
 * ```ts
 * grpcMessageValue("open /x: 100% é"); // "open%20/x:%20100%25%20%C3%A9"
 * ```
 */
export function grpcMessageValue(message: string): string {
  if (PLAIN_MESSAGE.test(message)) return message;
  let out = "";
  for (const b of Buffer.from(message, "utf8")) {
    out +=
      b >= 0x21 && b <= 0x7e && b !== 0x25
        ? String.fromCharCode(b)
        : `%${b < 16 ? "0" : ""}${b.toString(16).toUpperCase()}`;
  }
  return out;
}
