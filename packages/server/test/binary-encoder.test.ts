// encodeBinary must write exactly toBinary's bytes for every message it accepts, and for every
// init shape exactly what toBinary writes for create() of it; it must decline (not mis-encode) what
// it does not handle. Messages are random, built from the descriptors of every
// message type in @nomadkit/protocol (and the well-known types they reach), so a field kind or
// type added to the protos is covered without editing this file.
import { create, toBinary, ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { createFileRegistry, type MessageInitShape } from "@bufbuild/protobuf";
import {
  DescriptorProtoSchema,
  DurationSchema,
  FieldDescriptorProto_Label,
  FieldDescriptorProto_Type,
  FieldDescriptorProtoSchema,
  FileDescriptorProtoSchema,
  StructSchema,
  TimestampSchema,
} from "@bufbuild/protobuf/wkt";
import * as protocol from "@nomadkit/protocol";
import { InspectTaskResponseSchema, TaskState } from "@nomadkit/protocol/driver";
import { TaskStatsResponseSchema } from "@nomadkit/protocol/driver";
import { StatObjectSchema, StatValueSchema } from "@nomadkit/protocol/structs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { encodeBinary } from "../src/runtime/binary-encoder.js";

/** Every message type reachable from @nomadkit/protocol's files, nested types and field types included. */
function allMessages(): DescMessage[] {
  const seen = new Map<string, DescMessage>();
  const visit = (m: DescMessage) => {
    if (seen.has(m.typeName)) return;
    seen.set(m.typeName, m);
    for (const n of m.nestedMessages) visit(n);
    for (const f of m.fields) if (f.message !== undefined) visit(f.message);
  };
  for (const ns of Object.values(protocol)) {
    for (const v of Object.values(ns as Record<string, unknown>)) {
      const d = v as { kind?: string; messages?: DescMessage[] };
      if (d?.kind === "file") for (const m of d.messages ?? []) visit(m);
    }
  }
  return [...seen.values()].sort((a, b) => a.typeName.localeCompare(b.typeName));
}

const int32 = fc.oneof(fc.constantFrom(0, -1, 1, 127, 128, -0x80000000, 0x7fffffff), fc.integer());
const uint32 = fc.oneof(fc.constantFrom(0, 1, 127, 128, 0xffffffff), fc.nat({ max: 0xffffffff }));
const int64 = fc.oneof(fc.constantFrom(0n, -1n, 1n, -(2n ** 63n), 2n ** 63n - 1n, 2n ** 53n, -(2n ** 53n) - 1n), fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }));
const uint64 = fc.oneof(fc.constantFrom(0n, 1n, 2n ** 64n - 1n, 2n ** 32n, 2n ** 53n + 1n), fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }));
const strings = fc.oneof(fc.string({ maxLength: 8 }), fc.string({ unit: "binary", maxLength: 80 }), fc.constantFrom("", "\ud800", "é€😀"));

function scalar(type: ScalarType): fc.Arbitrary<unknown> {
  switch (type) {
    case ScalarType.STRING:
      return strings;
    case ScalarType.BYTES:
      return fc.uint8Array({ maxLength: 40 });
    case ScalarType.BOOL:
      return fc.boolean();
    case ScalarType.DOUBLE:
      return fc.oneof(fc.double(), fc.constantFrom(0, -0, NaN, Infinity));
    case ScalarType.FLOAT:
      return fc.oneof(fc.float(), fc.constantFrom(0, -0, NaN, -Infinity));
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return int32;
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return uint32;
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return int64;
    default:
      return uint64;
  }
}

function mapKeyArb(type: ScalarType): fc.Arbitrary<string> {
  if (type === ScalarType.STRING) return strings.filter((k) => k !== "__proto__");
  if (type === ScalarType.BOOL) return fc.constantFrom("true", "false");
  return scalar(type).map(String);
}

/** A random message of `desc` as create() input, nested `depth` levels at most. */
function messageArb(desc: DescMessage, depth: number): fc.Arbitrary<Record<string, unknown>> {
  const value = (f: DescField): fc.Arbitrary<unknown> | undefined => {
    switch (f.fieldKind) {
      case "scalar":
        return scalar(f.scalar);
      case "enum":
        return fc.constantFrom(...f.enum.values.map((v) => v.number));
      case "message":
        // protobuf-es holds singular wrapper fields unboxed, and Struct fields as JSON objects.
        if (isWrapper(f.message) && f.oneof === undefined) return scalar(f.message.fields[0]!.scalar!);
        if (f.message.typeName === "google.protobuf.Struct" && desc.typeName !== "google.protobuf.Value") return fc.dictionary(strings, fc.oneof(strings, fc.boolean()), { maxKeys: 2 });
        return depth > 0 ? messageArb(f.message, depth - 1) : undefined;
      case "list": {
        const item = f.listKind === "scalar" ? scalar(f.scalar) : f.listKind === "enum" ? fc.constantFrom(...f.enum.values.map((v) => v.number)) : depth > 0 ? messageArb(f.message, depth - 1) : undefined;
        return item && fc.array(item, { maxLength: 4 });
      }
      case "map": {
        const v = f.mapKind === "scalar" ? scalar(f.scalar) : f.mapKind === "enum" ? fc.constantFrom(...f.enum.values.map((x) => x.number)) : depth > 0 ? messageArb(f.message, depth - 1) : undefined;
        return v && fc.dictionary(mapKeyArb(f.mapKey), v, { maxKeys: 3 });
      }
    }
  };
  const parts: Record<string, fc.Arbitrary<unknown>> = {};
  for (const f of desc.fields) {
    if (f.oneof !== undefined) continue;
    const a = value(f);
    if (a !== undefined) parts[f.localName] = a;
  }
  for (const o of desc.oneofs) {
    const cases = o.fields.flatMap((f) => {
      const a = value(f);
      return a === undefined ? [] : [a.map((v) => ({ case: f.localName, value: v }))];
    });
    parts[o.localName] = fc.oneof(fc.constant({ case: undefined }), ...cases);
  }
  return fc.record(parts, { requiredKeys: [] });
}

const isWrapper = (m: DescMessage) => /^google\.protobuf\.\w+Value$/.test(m.typeName) && m.typeName !== "google.protobuf.Value";

/**
 * A proto3 message with every scalar type (implicit, optional and packed/unpacked repeated), maps
 * keyed by each key type and a oneof: the protocol itself uses only some of these.
 */
function allTypesMessage(): DescMessage {
  const T = FieldDescriptorProto_Type;
  const L = FieldDescriptorProto_Label;
  const scalars: [string, FieldDescriptorProto_Type][] = [
    ["double", T.DOUBLE], ["float", T.FLOAT], ["int64", T.INT64], ["uint64", T.UINT64], ["int32", T.INT32],
    ["fixed64", T.FIXED64], ["fixed32", T.FIXED32], ["bool", T.BOOL], ["string", T.STRING], ["bytes", T.BYTES],
    ["uint32", T.UINT32], ["sfixed32", T.SFIXED32], ["sfixed64", T.SFIXED64], ["sint32", T.SINT32], ["sint64", T.SINT64],
  ];
  const field: MessageInitShape<typeof FieldDescriptorProtoSchema>[] = [];
  const nested: MessageInitShape<typeof DescriptorProtoSchema>[] = [];
  let n = 1;
  scalars.forEach(([name, type], i) => {
    field.push({ name: `s_${name}`, number: n++, type, label: L.OPTIONAL, jsonName: `s${i}` });
    field.push({ name: `o_${name}`, number: n++, type, label: L.OPTIONAL, proto3Optional: true, oneofIndex: i, jsonName: `o${i}` });
    field.push({ name: `r_${name}`, number: n++, type, label: L.REPEATED, jsonName: `r${i}` });
    field.push({ name: `u_${name}`, number: n++, type, label: L.REPEATED, options: { packed: false }, jsonName: `u${i}` });
    if (type !== T.DOUBLE && type !== T.FLOAT && type !== T.BYTES) {
      const entry = `M${i}Entry`;
      nested.push({
        name: entry,
        options: { mapEntry: true },
        field: [
          { name: "key", number: 1, type, label: L.OPTIONAL, jsonName: "key" },
          { name: "value", number: 2, type: scalars[(i + 3) % scalars.length]![1], label: L.OPTIONAL, jsonName: "value" },
        ],
      });
      field.push({ name: `m${i}`, number: n++, type: T.MESSAGE, typeName: `.t.All.${entry}`, label: L.REPEATED, jsonName: `m${i}` });
    }
  });
  const oneofs = scalars.map(([name]) => ({ name: `_o_${name}` }));
  field.push({ name: "c_sint64", number: n++, type: T.SINT64, label: L.OPTIONAL, oneofIndex: oneofs.length, jsonName: "cSint64" });
  field.push({ name: "c_all", number: n++, type: T.MESSAGE, typeName: ".t.All", label: L.OPTIONAL, oneofIndex: oneofs.length, jsonName: "cAll" });
  field.push({ name: "child", number: n++, type: T.MESSAGE, typeName: ".t.All", label: L.OPTIONAL, jsonName: "child" });
  const file = create(FileDescriptorProtoSchema, {
    name: "t/all.proto",
    package: "t",
    syntax: "proto3",
    messageType: [{ name: "All", field, nestedType: nested, oneofDecl: [...oneofs, { name: "choice" }] }],
  });
  return createFileRegistry(file, () => undefined).getMessage("t.All")!;
}

const messages = allMessages();

/** Whether protobuf-es holds this field's message unboxed (wrappers) or as JSON (Struct). */
const unboxed = (parent: DescMessage, f: DescField) =>
  f.message !== undefined && ((isWrapper(f.message) && f.oneof === undefined) || (f.message.typeName === "google.protobuf.Struct" && parent.typeName !== "google.protobuf.Value"));

/** A deterministic coin for one property run. */
function coin(seed: number): () => boolean {
  let x = seed | 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x & 4) !== 0;
  };
}

/**
 * `init` as callers write it: some nested values already messages (create() takes them as they
 * are), the others plain objects, and some absent fields and oneofs null (create() ignores null).
 */
function mixedInit(desc: DescMessage, init: Record<string, unknown>, pick: () => boolean): Record<string, unknown> {
  const out: Record<string, unknown> = { ...init };
  const sub = (d: DescMessage, v: unknown) => (pick() ? create(d, v as never) : mixedInit(d, v as Record<string, unknown>, pick));
  for (const f of desc.fields) {
    if (f.oneof !== undefined) continue;
    const v = out[f.localName];
    if (v === undefined) {
      if (pick()) out[f.localName] = null;
    } else if (f.fieldKind === "message" && !unboxed(desc, f)) out[f.localName] = sub(f.message, v);
    else if (f.fieldKind === "list" && f.listKind === "message") out[f.localName] = (v as unknown[]).map((x) => sub(f.message, x));
    else if (f.fieldKind === "map" && f.mapKind === "message")
      out[f.localName] = Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([k, x]) => [k, sub(f.message, x)]));
  }
  for (const o of desc.oneofs) {
    const g = out[o.localName] as { case?: string; value?: unknown } | undefined;
    if (g === undefined || g.case === undefined) {
      if (pick()) out[o.localName] = g === undefined ? null : undefined;
      continue;
    }
    const f = o.fields.find((x) => x.localName === g.case);
    if (f?.fieldKind === "message") out[o.localName] = { case: g.case, value: sub(f.message, g.value) };
  }
  return out;
}

describe("encodeBinary", () => {
  it("covers the protocol's message types", () => {
    expect(messages.length).toBeGreaterThan(100);
    const declined = messages.filter((m) => encodeBinary(m, create(m)) === undefined).map((m) => m.typeName);
    // Only types holding unboxed wrappers or Struct fields (protobuf-es represents them differently).
    expect(declined.sort()).toEqual(
      messages
        .filter((m) => m.fields.some((f) => f.message !== undefined && (isWrapper(f.message) || (f.message.typeName === "google.protobuf.Struct" && m.typeName !== "google.protobuf.Value"))))
        .map((m) => m.typeName)
        .sort(),
    );
  });

  for (const desc of messages) {
    it(`writes toBinary's bytes: ${desc.typeName}`, () => {
      fc.assert(
        fc.property(messageArb(desc, 2), (init) => {
          const msg = create(desc, init as never);
          const expected = Buffer.from(toBinary(desc, msg));
          const got = encodeBinary(desc, msg, 5);
          if (got === undefined) return; // declined: the caller uses toBinary
          expect(got.subarray(5).equals(expected)).toBe(true);
        }),
        { numRuns: 60, seed: 0xb1e0 + desc.typeName.length },
      );
    });
  }

  for (const desc of messages) {
    it(`writes toBinary's bytes for create() of an init shape: ${desc.typeName}`, () => {
      fc.assert(
        fc.property(messageArb(desc, 2), fc.integer(), (init, seed) => {
          const shape = mixedInit(desc, init, coin(seed));
          const got = encodeBinary(desc, shape, 5);
          if (got === undefined) return; // declined: the caller creates the message and uses toBinary
          expect(got.subarray(5).equals(Buffer.from(toBinary(desc, create(desc, shape as never))))).toBe(true);
        }),
        { numRuns: 60, seed: 0x1417 + desc.typeName.length },
      );
    });
  }

  it("writes toBinary's bytes for every scalar type, presence, list and map key kind", () => {
    const all = allTypesMessage();
    let accepted = 0;
    fc.assert(
      fc.property(messageArb(all, 2), (init) => {
        const msg = create(all, init as never);
        const got = encodeBinary(all, msg, 5);
        expect(got).toBeDefined();
        accepted++;
        expect(got!.subarray(5).equals(Buffer.from(toBinary(all, msg)))).toBe(true);
      }),
      { numRuns: 300, seed: 0xa11 },
    );
    expect(accepted).toBe(300);
  });

  it("takes every init shape of that message without declining", () => {
    const all = allTypesMessage();
    let accepted = 0;
    fc.assert(
      fc.property(messageArb(all, 2), fc.integer(), (init, seed) => {
        const shape = mixedInit(all, init, coin(seed));
        const got = encodeBinary(all, shape, 5);
        expect(got).toBeDefined();
        accepted++;
        expect(got!.subarray(5).equals(Buffer.from(toBinary(all, create(all, shape as never))))).toBe(true);
      }),
      { numRuns: 300, seed: 0x1a11 },
    );
    expect(accepted).toBe(300);
  });

  it("encodes a handler's reply as it is, and declines init shapes create() would not take as they are", () => {
    const reply = {
      task: { id: "t1", name: "web", state: TaskState.RUNNING, startedAt: { seconds: 1_700_000_000n, nanos: 5 }, completedAt: undefined },
      driver: { attributes: { pid: "42" } },
      networkOverride: null,
    };
    const got = encodeBinary(InspectTaskResponseSchema, reply);
    expect(got?.equals(Buffer.from(toBinary(InspectTaskResponseSchema, create(InspectTaskResponseSchema, reply as never))))).toBe(true);
    // A nested value typed as another message: create() would copy its fields over.
    expect(encodeBinary(InspectTaskResponseSchema, { task: { startedAt: { $typeName: "google.protobuf.Duration", seconds: 1n } } })).toBeUndefined();
    // Not an object where a message goes, a map given as an array, a oneof case without a value.
    expect(encodeBinary(InspectTaskResponseSchema, { task: "t1" })).toBeUndefined();
    expect(encodeBinary(InspectTaskResponseSchema, { driver: { attributes: ["a"] } })).toBeUndefined();
    expect(encodeBinary(StructSchema, { fields: { a: { kind: { case: "stringValue", value: null } } } })).toBeUndefined();
    // Values create() keeps as given but toBinary converts (an int64 as a number) or rejects (a
    // fractional int32): toBinary's to handle.
    expect(encodeBinary(TimestampSchema, { seconds: 1 })).toBeUndefined();
    expect(() => toBinary(TimestampSchema, create(TimestampSchema, { nanos: 1.5 }))).toThrow(/nanos/);
    expect(encodeBinary(TimestampSchema, { nanos: 1.5 })).toBeUndefined();
  });

  it("accepts the messages the plugin server sends most", () => {
    const msg = create(InspectTaskResponseSchema, {
      task: { id: "t1", name: "web", state: TaskState.RUNNING, startedAt: { seconds: 1_700_000_000n, nanos: 5 } },
      driver: { attributes: { pid: "42", "exec.mode": "raw" } },
    });
    const got = encodeBinary(InspectTaskResponseSchema, msg);
    expect(got).toBeDefined();
    expect(got!.equals(Buffer.from(toBinary(InspectTaskResponseSchema, msg)))).toBe(true);
    expect(encodeBinary(TimestampSchema, create(TimestampSchema, { seconds: -5n, nanos: 1 }))).toBeDefined();
    expect(encodeBinary(DurationSchema, create(DurationSchema, { seconds: 3n }))).toBeDefined();
  });

  it("declines what it does not handle, and values of the wrong type", () => {
    // StatValue holds wrapper fields (unboxed in protobuf-es messages): declined, also when nested.
    expect(encodeBinary(StatValueSchema, create(StatValueSchema, { stringVal: "x" }))).toBeUndefined();
    expect(encodeBinary(StatObjectSchema, create(StatObjectSchema, {}))).toBeDefined();
    expect(encodeBinary(StatObjectSchema, create(StatObjectSchema, { attributes: { a: { boolVal: true } } }))).toBeUndefined();
    expect(encodeBinary(TaskStatsResponseSchema, create(TaskStatsResponseSchema, { stats: { id: "t", timestamp: { seconds: 1n } } }))).toBeDefined();
    expect(encodeBinary(StructSchema, create(StructSchema, {}))).toBeDefined();
    const bad = create(InspectTaskResponseSchema, { task: { id: "x" } });
    (bad.task as unknown as Record<string, unknown>).result = { $typeName: "wrong.Type" };
    expect(encodeBinary(InspectTaskResponseSchema, bad)).toBeUndefined();
    const badInt = create(TimestampSchema, {});
    (badInt as unknown as Record<string, unknown>).nanos = 1.5;
    expect(encodeBinary(TimestampSchema, badInt)).toBeUndefined();
    expect(() => toBinary(TimestampSchema, badInt)).toThrow(/nanos/); // the caller's fallback names the field
    // Malformed messages are toBinary's to reject, not written without the field.
    const missing = create(TimestampSchema, { seconds: 1n });
    delete (missing as unknown as Record<string, unknown>).nanos;
    expect(encodeBinary(TimestampSchema, missing)).toBeUndefined();
    const emptyCase = create(StructSchema, { fields: { a: { kind: { case: "stringValue", value: "x" } } } });
    (emptyCase.fields.a!.kind as { value?: unknown }).value = undefined;
    expect(encodeBinary(StructSchema, emptyCase)).toBeUndefined();
    const withUnknown = create(TimestampSchema, { seconds: 1n });
    withUnknown.$unknown = [{ no: 99, wireType: 0, data: new Uint8Array([1]) }];
    expect(encodeBinary(TimestampSchema, withUnknown)).toBeUndefined();
  });
});
