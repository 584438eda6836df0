/**
 * A faster protobuf binary encoder for the plugin server's replies, byte-identical to protobuf-es's
 * `toBinary` for the messages it accepts and declining the rest.
 *
 * protobuf-es's `BinaryWriter` pushes every byte into an array, turns each string into its own
 * chunk and copies each nested message twice (fork/join); with its reflection that was a fifth of
 * an InspectTask round trip's CPU time, more than the HTTP/2 work. This encoder measures first
 * (nested lengths and string byte lengths remembered in order), then writes once into one Buffer
 * that already has room for the 5-byte gRPC prefix. Per message type it keeps a plan of its fields
 * (sorted by number, tags precomputed).
 *
 * It also encodes `create()` input (a message init shape: plain objects, absent or null fields)
 * without creating the message first: on the plugin's unary path, protobuf-es's `create` cost
 * more than the encoding itself.
 *
 * It is deliberately narrow: values must have exactly the types protobuf-es's own messages hold
 * (or `create()` keeps as they are), and message types whose representation differs from their
 * wire shape (fields of wrapper or `google.protobuf.Struct` types, which protobuf-es unboxes),
 * proto2 required fields, group encoding and unknown fields of messages are declined. Declined
 * means `undefined`: the caller then creates the message and uses `toBinary`, which also produces
 * protobuf-es's errors for bad values. Fast-check properties (`binary-encoder.test.ts`) hold it to
 * `toBinary`'s bytes for every message type of the protocol, as messages and as init shapes.
 */
import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";

// google.protobuf.FeatureSet.FieldPresence
const IMPLICIT = 2;
const LEGACY_REQUIRED = 3;

const SCALAR = 0;
const ENUM = 1;
const MESSAGE = 2;
const LIST = 3;
const PACKED = 4;
const LIST_MESSAGE = 5;
const MAP = 6;

interface FieldPlan {
  readonly kind: number;
  readonly name: string;
  /** The oneof's local name, for a member of a oneof group. */
  readonly oneof: string | undefined;
  /** Set means "own property, not undefined" (explicit presence) rather than "not the zero value". */
  readonly explicit: boolean;
  /** Tag varint (field number and wire type) and its length. */
  readonly tag: number;
  readonly tagSize: number;
  /** Scalar type of a scalar, list item or map value (enums: INT32, their wire type). */
  readonly scalar: ScalarType;
  /** Message type of a message field, list item or map value. */
  readonly message: DescMessage | undefined;
  /** Map fields: key scalar type and value kind (SCALAR, enums included, or MESSAGE). */
  readonly mapKey: ScalarType;
  readonly mapValue: number;
  /** An enum field's zero value (its first value), unset when implicit. */
  readonly enumZero: number;
}

type Plan = readonly FieldPlan[];

const plans = new WeakMap<DescMessage, Plan | null>();

const UNBOXED_WRAPPERS = new Set([
  "google.protobuf.DoubleValue",
  "google.protobuf.FloatValue",
  "google.protobuf.Int64Value",
  "google.protobuf.UInt64Value",
  "google.protobuf.Int32Value",
  "google.protobuf.UInt32Value",
  "google.protobuf.BoolValue",
  "google.protobuf.StringValue",
  "google.protobuf.BytesValue",
]);

function wireType(scalar: ScalarType): number {
  switch (scalar) {
    case ScalarType.BYTES:
    case ScalarType.STRING:
      return 2;
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return 1;
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
    case ScalarType.FLOAT:
      return 5;
    default:
      return 0;
  }
}

/** A message type protobuf-es represents differently from its wire shape, in this field. */
function represented(field: DescField, message: DescMessage): boolean {
  if (UNBOXED_WRAPPERS.has(message.typeName)) return false;
  return !(message.typeName === "google.protobuf.Struct" && field.parent.typeName !== "google.protobuf.Value");
}

function buildPlan(desc: DescMessage): Plan | null {
  const out: FieldPlan[] = [];
  for (const f of [...desc.fields].sort((a, b) => a.number - b.number)) {
    if (f.presence === LEGACY_REQUIRED) return null;
    let kind: number;
    let scalar = ScalarType.INT32;
    let message: DescMessage | undefined;
    let mapKey = ScalarType.STRING;
    let mapValue = SCALAR;
    let wt = 2;
    let enumZero = 0;
    switch (f.fieldKind) {
      case "scalar":
        kind = SCALAR;
        scalar = f.scalar;
        wt = wireType(scalar);
        break;
      case "enum":
        kind = ENUM;
        wt = 0;
        enumZero = f.enum.values[0]?.number ?? 0;
        break;
      case "message":
        if (f.delimitedEncoding || !represented(f, f.message)) return null;
        kind = MESSAGE;
        message = f.message;
        break;
      case "list":
        if (f.listKind === "message") {
          if (f.delimitedEncoding || !represented(f, f.message)) return null;
          kind = LIST_MESSAGE;
          message = f.message;
        } else {
          scalar = f.listKind === "enum" ? ScalarType.INT32 : f.scalar;
          kind = f.packed ? PACKED : LIST;
          wt = f.packed ? 2 : wireType(scalar);
        }
        break;
      case "map":
        kind = MAP;
        mapKey = f.mapKey;
        // A message value, or a scalar one (an enum's stays INT32, the default above).
        if (f.mapKind === "message") {
          if (!represented(f, f.message)) return null;
          mapValue = MESSAGE;
          message = f.message;
        } else if (f.mapKind === "scalar") scalar = f.scalar;
        break;
    }
    const tag = ((f.number << 3) | wt) >>> 0;
    out.push({
      kind,
      name: f.localName,
      oneof: f.oneof?.localName,
      explicit: f.oneof === undefined && f.presence !== IMPLICIT,
      tag,
      tagSize: varint32Size(tag),
      scalar,
      message,
      mapKey,
      mapValue,
      enumZero,
    });
  }
  return out;
}

function planOf(desc: DescMessage): Plan | null {
  let plan = plans.get(desc);
  if (plan === undefined) {
    plan = buildPlan(desc);
    plans.set(desc, plan);
  }
  return plan;
}

// Lengths found while measuring (nested messages, packed lists, map entries, strings), in the order
// the writer needs them. Encoding is synchronous, so one list serves every call.
const lengths: number[] = [];
let cursor = 0;
/** Declined: thrown while measuring, caught by the entry point. */
const DECLINE = Symbol("decline");

function decline(): never {
  throw DECLINE;
}

/** Bytes of `n` (0 to 2^32 - 1) as a protobuf varint. */
export function varint32Size(n: number): number {
  return n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5;
}

const INT32_MIN = -0x80000000;
const INT32_MAX = 0x7fffffff;
const UINT32_MAX = 0xffffffff;
const FLOAT32_MAX = 3.4028234663852886e38;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const UINT64_MAX = 2n ** 64n - 1n;
const TWO32 = 4294967296;

// The two 32-bit halves of the 64-bit value last split (two's complement), to avoid allocating.
let lo = 0;
let hi = 0;

/** Split a 64-bit value; declines values protobuf-es would reject or convert. */
function split64(v: unknown, signed: boolean): void {
  if (typeof v !== "bigint") decline();
  if (signed ? v < INT64_MIN || v > INT64_MAX : v < 0n || v > UINT64_MAX) decline();
  if (v >= -9007199254740991n && v <= 9007199254740991n) {
    const n = Number(v);
    lo = n >>> 0;
    hi = Math.floor(n / TWO32) >>> 0;
  } else {
    const u = BigInt.asUintN(64, v);
    lo = Number(u & 0xffffffffn);
    hi = Number(u >> 32n);
  }
}

function varint64Size(l: number, h: number): number {
  let size = 1;
  while (h !== 0 || l > 0x7f) {
    l = ((l >>> 7) | (h << 25)) >>> 0;
    h >>>= 7;
    size++;
  }
  return size;
}

function writeVarint64(buf: Buffer, o: number, l: number, h: number): number {
  while (h !== 0 || l > 0x7f) {
    buf[o++] = (l & 0x7f) | 0x80;
    l = ((l >>> 7) | (h << 25)) >>> 0;
    h >>>= 7;
  }
  buf[o++] = l;
  return o;
}

/** Write `n` (0 to 2^32 - 1) as a varint at `o`; returns the position after it. */
export function writeVarint32(buf: Uint8Array, o: number, n: number): number {
  while (n > 0x7f) {
    buf[o++] = (n & 0x7f) | 0x80;
    n >>>= 7;
  }
  buf[o++] = n;
  return o;
}

function isInt32(v: unknown): v is number {
  return typeof v === "number" && Number.isInteger(v) && v >= INT32_MIN && v <= INT32_MAX;
}

function isUint32(v: unknown): v is number {
  return typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= UINT32_MAX;
}

/** Zig-zag halves of the last split 64-bit value, in place. */
function zigzag64(): void {
  const sign = hi >> 31;
  const h = ((hi << 1) | (lo >>> 31)) ^ sign;
  lo = ((lo << 1) ^ sign) >>> 0;
  hi = h >>> 0;
}

function utf8Length(s: string): number {
  const n = s.length;
  if (n > 64) return Buffer.byteLength(s, "utf8");
  for (let i = 0; i < n; i++) if (s.charCodeAt(i) >= 0x80) return Buffer.byteLength(s, "utf8");
  return n;
}

/** Bytes of one scalar value (without tag); declines values of the wrong type or range. */
function scalarSize(type: ScalarType, v: unknown): number {
  switch (type) {
    case ScalarType.STRING: {
      if (typeof v !== "string") decline();
      const n = utf8Length(v);
      lengths.push(n);
      return varint32Size(n) + n;
    }
    case ScalarType.BYTES:
      if (!(v instanceof Uint8Array)) decline();
      return varint32Size(v.byteLength) + v.byteLength;
    case ScalarType.BOOL:
      if (typeof v !== "boolean") decline();
      return 1;
    case ScalarType.DOUBLE:
      if (typeof v !== "number") decline();
      return 8;
    case ScalarType.FLOAT:
      if (typeof v !== "number" || (Number.isFinite(v) && (v > FLOAT32_MAX || v < -FLOAT32_MAX))) decline();
      return 4;
    case ScalarType.INT32:
      if (!isInt32(v)) decline();
      return v < 0 ? 10 : varint32Size(v);
    case ScalarType.SINT32:
      if (!isInt32(v)) decline();
      return varint32Size(((v << 1) ^ (v >> 31)) >>> 0);
    case ScalarType.UINT32:
      if (!isUint32(v)) decline();
      return varint32Size(v);
    case ScalarType.FIXED32:
      if (!isUint32(v)) decline();
      return 4;
    case ScalarType.SFIXED32:
      if (!isInt32(v)) decline();
      return 4;
    case ScalarType.INT64:
      split64(v, true);
      return varint64Size(lo, hi);
    case ScalarType.UINT64:
      split64(v, false);
      return varint64Size(lo, hi);
    case ScalarType.SINT64:
      split64(v, true);
      zigzag64();
      return varint64Size(lo, hi);
    case ScalarType.FIXED64:
      split64(v, false);
      return 8;
    case ScalarType.SFIXED64:
      split64(v, true);
      return 8;
  }
  return decline();
}

/** Write one scalar value measured by {@link scalarSize} (so of the right type and range). */
function writeScalar(buf: Buffer, o: number, type: ScalarType, v: unknown): number {
  switch (type) {
    case ScalarType.STRING: {
      const s = v as string;
      const n = lengths[cursor++]!;
      o = writeVarint32(buf, o, n);
      if (n === s.length && n <= 64) {
        for (let i = 0; i < n; i++) buf[o + i] = s.charCodeAt(i);
      } else buf.write(s, o, n, "utf8");
      return o + n;
    }
    case ScalarType.BYTES: {
      const b = v as Uint8Array;
      o = writeVarint32(buf, o, b.byteLength);
      buf.set(b, o);
      return o + b.byteLength;
    }
    case ScalarType.BOOL:
      buf[o] = v ? 1 : 0;
      return o + 1;
    case ScalarType.DOUBLE:
      return buf.writeDoubleLE(v as number, o);
    case ScalarType.FLOAT:
      return buf.writeFloatLE(v as number, o);
    case ScalarType.INT32: {
      const n = v as number;
      return n < 0 ? writeVarint64(buf, o, n >>> 0, 0xffffffff) : writeVarint32(buf, o, n);
    }
    case ScalarType.SINT32: {
      const n = v as number;
      return writeVarint32(buf, o, ((n << 1) ^ (n >> 31)) >>> 0);
    }
    case ScalarType.UINT32:
      return writeVarint32(buf, o, v as number);
    case ScalarType.FIXED32:
      return buf.writeUInt32LE(v as number, o);
    case ScalarType.SFIXED32:
      return buf.writeInt32LE(v as number, o);
    case ScalarType.INT64:
    case ScalarType.UINT64:
      split64(v, type === ScalarType.INT64);
      return writeVarint64(buf, o, lo, hi);
    case ScalarType.SINT64:
      split64(v, true);
      zigzag64();
      return writeVarint64(buf, o, lo, hi);
    default:
      // FIXED64, SFIXED64
      split64(v, type === ScalarType.SFIXED64);
      o = buf.writeUInt32LE(lo, o);
      return buf.writeUInt32LE(hi, o);
  }
}

/**
 * The value of a field when it is set (protobuf-es's `isSet`), else undefined. In an init shape
 * (`init`), undefined and null mean unset, as `create()` ignores them.
 */
function setValue(f: FieldPlan, m: Record<string, unknown>, init: boolean): unknown {
  if (f.oneof !== undefined) {
    const group = m[f.oneof] as { case?: string; value?: unknown } | undefined;
    if (group === undefined || group === null) return init ? undefined : decline();
    if (group.case !== f.name) return undefined;
    // Selected but without a value: toBinary's error, not an empty field.
    return group.value === undefined || group.value === null ? decline() : group.value;
  }
  const v = m[f.name];
  if (init) {
    if (v === undefined || v === null) return undefined;
    if (f.explicit) return v;
  } else if (f.explicit) return v !== undefined && Object.prototype.hasOwnProperty.call(m, f.name) ? v : undefined;
  // A field without presence always holds a value in a well-formed message.
  else if (v === undefined) decline();
  switch (f.kind) {
    case SCALAR:
      switch (f.scalar) {
        case ScalarType.BOOL:
          return v === false ? undefined : v;
        case ScalarType.STRING:
          return v === "" ? undefined : v;
        case ScalarType.BYTES:
          return v instanceof Uint8Array && v.byteLength === 0 ? undefined : v;
        case ScalarType.DOUBLE:
        case ScalarType.FLOAT:
          return Object.is(v, 0) ? undefined : v;
        default:
          // Loose, like protobuf-es: 0n and 0 (and "0", which the measuring then declines).
          return v == 0 ? undefined : v;
      }
    case ENUM:
      return v === f.enumZero ? undefined : v;
    case LIST:
    case PACKED:
    case LIST_MESSAGE:
      if (!Array.isArray(v)) decline();
      return v.length > 0 ? v : undefined;
    case MAP:
      // create() converts the values of an init shape's map only when it is a plain object.
      if (typeof v !== "object" || v === null || (init && Array.isArray(v))) decline();
      return v;
  }
  return decline();
}

/** Map keys are object keys (strings); protobuf-es converts them back to the key type. */
function mapKey(type: ScalarType, key: string): unknown {
  switch (type) {
    case ScalarType.STRING:
      return key;
    case ScalarType.BOOL:
      if (key === "true") return true;
      if (key === "false") return false;
      return decline();
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      if (!/^-?\d+$/.test(key) || String(BigInt(key)) !== key) decline();
      return BigInt(key);
    default: {
      const n = Number(key);
      if (String(n) !== key) decline();
      return n;
    }
  }
}

function isMessageOf(v: unknown, desc: DescMessage): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && (v as { $typeName?: unknown }).$typeName === desc.typeName;
}

/**
 * Whether `m` is read as an init shape: in init mode, anything but a message of this type, which
 * `create()` takes as it is (nested values included). A plain object without `$typeName` only.
 */
function readAsInit(desc: DescMessage, m: unknown, init: boolean): boolean {
  if (!init || isMessageOf(m, desc)) return false;
  if (typeof m !== "object" || m === null || Array.isArray(m) || (m as { $typeName?: unknown }).$typeName !== undefined) decline();
  return true;
}

/** Size of a message's fields; records lengths for the writer. */
function messageSize(desc: DescMessage, m: unknown, init: boolean): number {
  const plan = planOf(desc);
  if (plan === null) decline();
  const asInit = readAsInit(desc, m, init);
  if (!asInit) {
    if (!isMessageOf(m, desc)) decline();
    const unknown = m.$unknown as unknown[] | undefined;
    if (unknown !== undefined && unknown.length > 0) decline();
  }
  const fields = m as Record<string, unknown>;
  let size = 0;
  for (let i = 0; i < plan.length; i++) {
    const f = plan[i]!;
    const v = setValue(f, fields, asInit);
    if (v === undefined) continue;
    switch (f.kind) {
      case SCALAR:
      case ENUM:
        size += f.tagSize + scalarSize(f.scalar, v);
        break;
      case MESSAGE:
        size += f.tagSize + nestedSize(f.message!, v, asInit);
        break;
      case LIST: {
        const list = v as unknown[];
        for (let j = 0; j < list.length; j++) size += f.tagSize + scalarSize(f.scalar, list[j]);
        break;
      }
      case PACKED: {
        const list = v as unknown[];
        const at = lengths.length;
        lengths.push(0);
        let n = 0;
        for (let j = 0; j < list.length; j++) n += scalarSize(f.scalar, list[j]);
        lengths[at] = n;
        size += f.tagSize + varint32Size(n) + n;
        break;
      }
      case LIST_MESSAGE: {
        const list = v as unknown[];
        for (let j = 0; j < list.length; j++) size += f.tagSize + nestedSize(f.message!, list[j], asInit);
        break;
      }
      case MAP: {
        const map = v as Record<string, unknown>;
        for (const key of Object.keys(map)) {
          const at = lengths.length;
          lengths.push(0);
          // key = field 1, value = field 2; both always written (protobuf-es does).
          let n = 1 + scalarSize(f.mapKey, mapKey(f.mapKey, key));
          const value = map[key];
          if (f.mapValue === MESSAGE) n += 1 + nestedSize(f.message!, value, asInit);
          else n += 1 + scalarSize(f.scalar, value);
          lengths[at] = n;
          size += f.tagSize + varint32Size(n) + n;
        }
        break;
      }
    }
  }
  return size;
}

/** Length prefix + size of a nested message. */
function nestedSize(desc: DescMessage, m: unknown, init: boolean): number {
  const at = lengths.length;
  lengths.push(0);
  const n = messageSize(desc, m, init);
  lengths[at] = n;
  return varint32Size(n) + n;
}

function writeMessage(buf: Buffer, o: number, desc: DescMessage, m: Record<string, unknown>, init: boolean): number {
  const plan = planOf(desc)!;
  // Measured first: the same decision as there, and it does not decline here.
  const asInit = readAsInit(desc, m, init);
  for (let i = 0; i < plan.length; i++) {
    const f = plan[i]!;
    const v = setValue(f, m, asInit);
    if (v === undefined) continue;
    switch (f.kind) {
      case SCALAR:
      case ENUM:
        o = writeScalar(buf, writeVarint32(buf, o, f.tag), f.scalar, v);
        break;
      case MESSAGE:
        o = writeNested(buf, writeVarint32(buf, o, f.tag), f.message!, v, asInit);
        break;
      case LIST: {
        const list = v as unknown[];
        for (let j = 0; j < list.length; j++) o = writeScalar(buf, writeVarint32(buf, o, f.tag), f.scalar, list[j]);
        break;
      }
      case PACKED: {
        const list = v as unknown[];
        o = writeVarint32(buf, writeVarint32(buf, o, f.tag), lengths[cursor++]!);
        for (let j = 0; j < list.length; j++) o = writeScalar(buf, o, f.scalar, list[j]);
        break;
      }
      case LIST_MESSAGE: {
        const list = v as unknown[];
        for (let j = 0; j < list.length; j++) o = writeNested(buf, writeVarint32(buf, o, f.tag), f.message!, list[j], asInit);
        break;
      }
      case MAP: {
        const map = v as Record<string, unknown>;
        for (const key of Object.keys(map)) {
          o = writeVarint32(buf, writeVarint32(buf, o, f.tag), lengths[cursor++]!);
          o = writeScalar(buf, writeVarint32(buf, o, (1 << 3) | wireType(f.mapKey)), f.mapKey, mapKey(f.mapKey, key));
          const value = map[key];
          if (f.mapValue === MESSAGE) o = writeNested(buf, writeVarint32(buf, o, (2 << 3) | 2), f.message!, value, asInit);
          else o = writeScalar(buf, writeVarint32(buf, o, (2 << 3) | wireType(f.scalar)), f.scalar, value);
        }
        break;
      }
    }
  }
  return o;
}

function writeNested(buf: Buffer, o: number, desc: DescMessage, m: unknown, init: boolean): number {
  o = writeVarint32(buf, o, lengths[cursor++]!);
  return writeMessage(buf, o, desc, m as Record<string, unknown>, init);
}

/**
 * Encode `message` after `reserve` unwritten bytes: a protobuf-es message of type `schema`, or an
 * init shape of one (`create()` input, encoded without creating the message). Undefined when this
 * encoder declines it (then use `toBinary(schema, create(schema, message))`); otherwise the bytes
 * after `reserve` are exactly those.
 *
 * @example
 * ```ts
 * const reply = { task: { id: "t1", state: TaskState.RUNNING } };
 * const bytes = encodeBinary(InspectTaskResponseSchema, reply) ?? toBinary(InspectTaskResponseSchema, create(InspectTaskResponseSchema, reply));
 * ```
 */
export function encodeBinary(schema: DescMessage, message: unknown, reserve = 0): Buffer | undefined {
  lengths.length = 0;
  cursor = 0;
  let size: number;
  try {
    size = messageSize(schema, message, true);
  } catch (e) {
    if (e === DECLINE) return undefined;
    throw e;
  }
  const buf = Buffer.allocUnsafe(reserve + size);
  const end = writeMessage(buf, reserve, schema, message as Record<string, unknown>, true);
  if (end !== buf.length) throw new Error(`binary encoder: wrote ${end - reserve} of ${size} bytes for ${schema.typeName}`);
  return buf;
}
