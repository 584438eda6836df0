/**
 * Messages that already know their wire bytes. A response message may carry the exact bytes of its
 * gRPC framing (5-byte prefix + protobuf encoding) as a list of parts; the plugin server's direct
 * path writes those parts as they are instead of encoding the message, so bulk payloads (exec
 * output) are never copied or re-encoded. Everything else (connect's own path, code reading the
 * message) sees an ordinary message: the parts must always encode exactly the message's fields, and
 * such a message must not be modified.
 */

import { fromBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";

/** Property holding a message's {@link WireFrame}. */
export const WIRE_FRAME: unique symbol = Symbol.for("@nomadkit/server.wireFrame") as never;

/** A message's gRPC framing: 5-byte prefix + protobuf bytes, split over `parts` (in order). */
export interface WireFrame {
  readonly parts: readonly Uint8Array[];
  /** Sum of the parts' lengths. */
  readonly byteLength: number;
  /**
   * Called by a writer that has written the parts out and holds no reference to them any more
   * (the plugin server's direct path does, once the HTTP/2 write completed), so their memory may be
   * reused. Writers that copy the message instead (connect's path) never call it.
   */
  readonly written?: (() => void) | undefined;
}

/** The wire frame a message carries, if any. */
export function wireFrameOf(message: unknown): WireFrame | undefined {
  return typeof message === "object" && message !== null ? (message as { [WIRE_FRAME]?: WireFrame })[WIRE_FRAME] : undefined;
}

/** Attach `frame` to `message` (non-enumerable, so copies and comparisons do not see it). */
export function attachWireFrame<T extends object>(message: T, frame: WireFrame): T {
  Object.defineProperty(message, WIRE_FRAME, { value: frame, enumerable: false, configurable: true });
  return message;
}

/** Write the 5-byte gRPC message prefix (uncompressed, big-endian length) at `pos`. */
export function writeEnvelopePrefix(buf: Uint8Array, pos: number, length: number): number {
  buf[pos] = 0;
  buf[pos + 1] = (length >>> 24) & 0xff;
  buf[pos + 2] = (length >>> 16) & 0xff;
  buf[pos + 3] = (length >>> 8) & 0xff;
  buf[pos + 4] = length & 0xff;
  return pos + 5;
}

/**
 * Per schema: property descriptors whose getters decode the instance's frame on first use. They are
 * own properties of each message (protobuf-es tests message fields with hasOwnProperty).
 */
const lazyDescriptors = new WeakMap<DescMessage, PropertyDescriptorMap>();
const FRAME_DECODED = Symbol("decoded");

interface LazyMessage {
  [WIRE_FRAME]: WireFrame;
  [FRAME_DECODED]?: Record<string, unknown>;
}

function decodeFrame(schema: DescMessage, frame: WireFrame): Record<string, unknown> {
  const bytes = new Uint8Array(frame.byteLength - 5);
  let off = -5;
  for (const p of frame.parts) {
    // The 5-byte prefix may span parts.
    if (off < 0) {
      const skip = Math.min(-off, p.byteLength);
      bytes.set(p.subarray(skip), 0);
    } else {
      bytes.set(p, off);
    }
    off += p.byteLength;
  }
  return fromBinary(schema, bytes) as unknown as Record<string, unknown>;
}

function descriptorsFor(schema: DescMessage): PropertyDescriptorMap {
  let map = lazyDescriptors.get(schema);
  if (map !== undefined) return map;
  map = {};
  const decoded = (self: LazyMessage) => (self[FRAME_DECODED] ??= decodeFrame(schema, self[WIRE_FRAME]));
  for (const member of schema.members) {
    map[member.localName] = {
      enumerable: true,
      configurable: true,
      get(this: LazyMessage) {
        return decoded(this)[member.localName];
      },
    };
  }
  map.$unknown = {
    configurable: true,
    get(this: LazyMessage) {
      return decoded(this).$unknown;
    },
  };
  lazyDescriptors.set(schema, map);
  return map;
}

/**
 * A message known only by its wire frame (e.g. relayed unchanged from another plugin): it carries
 * the frame, and its fields are decoded from it only if something reads them.
 */
export function messageFromFrame<Desc extends DescMessage>(schema: Desc, frame: WireFrame): MessageShape<Desc> {
  const msg = { $typeName: schema.typeName } as Record<string | symbol, unknown>;
  Object.defineProperty(msg, WIRE_FRAME, { value: frame, enumerable: false });
  Object.defineProperties(msg, descriptorsFor(schema));
  return msg as MessageShape<Desc>;
}
