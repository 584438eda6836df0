// useNodeTextEncoding swaps protobuf-es's string encoder for Buffer.from: it must produce exactly
// TextEncoder's bytes for every string (including unpaired surrogates, which both turn into
// U+FFFD), and messages must round-trip.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { getTextEncoding } from "@bufbuild/protobuf/wire";
import { TaskConfigSchema } from "@nomadkit/protocol/driver";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { useNodeTextEncoding } from "../src/runtime/text-encoding.js";

const strings = fc.oneof(
  fc.string({ unit: "binary", maxLength: 64 }),
  fc.string({ unit: "binary", maxLength: 5000 }),
  fc.constantFrom("", "\ud800", "a\udc00b", "\udbff\udfff", "\udfff\ud800", "é€😀", "\u0000"),
);

describe("useNodeTextEncoding", () => {
  it("encodes every string to TextEncoder's bytes", () => {
    useNodeTextEncoding();
    const encode = getTextEncoding().encodeUtf8;
    expect(encode("x")).toBeInstanceOf(Buffer); // really the Buffer encoder
    const reference = new TextEncoder();
    fc.assert(
      fc.property(strings, (s) => {
        expect(Buffer.from(encode(s)).equals(Buffer.from(reference.encode(s)))).toBe(true);
      }),
      { numRuns: 2000, seed: 0x7e46 },
    );
  });

  it("is idempotent and keeps protobuf-es's decoder", () => {
    const before = getTextEncoding().decodeUtf8;
    useNodeTextEncoding();
    useNodeTextEncoding();
    expect(getTextEncoding().decodeUtf8).toBe(before);
  });

  it("messages with string fields round-trip", () => {
    useNodeTextEncoding();
    fc.assert(
      // Map key "__proto__" is left out: protobuf-es stores maps in plain objects, where it cannot be
      // an own key (a protobuf-es limitation, nothing to do with string encoding).
      fc.property(strings, strings, fc.dictionary(fc.string().filter((k) => k !== "__proto__"), strings, { maxKeys: 5 }), (id, name, env) => {
        const msg = create(TaskConfigSchema, { id, name, env });
        const back = fromBinary(TaskConfigSchema, toBinary(TaskConfigSchema, msg));
        // Unpaired surrogates are not representable in UTF-8: both sides turn them into U+FFFD.
        const wellFormed = (s: string) => new TextDecoder().decode(new TextEncoder().encode(s));
        expect(back.id).toBe(wellFormed(id));
        expect(back.name).toBe(wellFormed(name));
        expect(back.env).toEqual(Object.fromEntries(Object.entries(env).map(([k, v]) => [wellFormed(k), wellFormed(v)])));
      }),
      { numRuns: 500, seed: 0x7e47 },
    );
  });
});
