// Golden wire bytes of pre-framed exec output (the exec engine's hand-written 5-byte prefix +
// protobuf header in front of the payload) and of relayed frames: they must be exactly what the
// protobuf encoder gives for the same message, at every varint boundary, however the bytes are split.
import { create, fromBinary, isMessage, toBinary } from "@bufbuild/protobuf";
import { ExecTaskStreamingRequestSchema, ExecTaskStreamingResponseSchema, type ExecTaskStreamingRequest } from "@nomadkit/protocol/driver";
import { describe, expect, it } from "vitest";
import { execStreaming } from "../src/exec/index.js";
import { outputHeader, outputMessage } from "../src/exec/wire.js";
import { messageFromFrame, wireFrameOf } from "../src/runtime/wire-frame.js";
import { RequestQueue } from "@nomadkit/client";


const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
/** The enveloped encoding of a message: flags 0, big-endian length, protobuf bytes. */
function enveloped(bytes: Uint8Array): Buffer {
  const out = Buffer.alloc(5 + bytes.byteLength);
  out.writeUInt32BE(bytes.byteLength, 1);
  out.set(bytes, 5);
  return out;
}
const joined = (parts: readonly Uint8Array[]) => Buffer.concat(parts.map((p) => Buffer.from(p.buffer, p.byteOffset, p.byteLength)));

describe("pre-framed exec output", () => {
  it('stdout "hello": 00 00000009 | 0a 07 | 0a 05 | hello (derived by hand from driver.proto)', () => {
    expect(hex(outputHeader("stdout", 5))).toBe("00000000090a070a05");
    const msg = outputMessage("stdout", [Buffer.from("hello")], 5);
    expect(hex(joined(wireFrameOf(msg)!.parts))).toBe("00000000090a070a0568656c6c6f");
  });

  it("stderr uses field 2 (tag 12)", () => {
    // 00 00000008 | 12 06 | 0a 04
    expect(hex(outputHeader("stderr", 4))).toBe("000000000812060a04");
  });

  it("equals the protobuf encoding at every varint boundary, for both fields, in one or many parts", () => {
    for (const size of [1, 126, 127, 128, 129, 16_381, 16_383, 16_384, 65_536, 2_097_149, 2_097_151, 2_097_152]) {
      const data = Buffer.alloc(size);
      for (let i = 0; i < size; i += 997) data[i] = i & 0xff;
      for (const field of ["stdout", "stderr"] as const) {
        const expected = enveloped(toBinary(ExecTaskStreamingResponseSchema, create(ExecTaskStreamingResponseSchema, { [field]: { data } })));
        const whole = outputMessage(field, [data], size);
        expect(hex(joined(wireFrameOf(whole)!.parts))).toBe(hex(expected));
        const cuts = [0, Math.floor(size / 3), Math.floor(size / 2), size].filter((v, i, a) => a.indexOf(v) === i);
        const parts = cuts.slice(1).map((end, i) => data.subarray(cuts[i], end));
        const split = outputMessage(field, parts, size);
        expect(hex(joined(wireFrameOf(split)!.parts))).toBe(hex(expected));
        // Read as a message, it is the same message (joined on demand), and encodes the same.
        expect(Buffer.from(split[field]!.data).equals(data)).toBe(true);
        expect(hex(enveloped(toBinary(ExecTaskStreamingResponseSchema, split)))).toBe(hex(expected));
        expect(isMessage(split, ExecTaskStreamingResponseSchema)).toBe(true);
      }
    }
  });

  it("a single part is carried as a view, never a copy", () => {
    const data = Buffer.alloc(1000, 3);
    const msg = outputMessage("stdout", [data.subarray(10, 500)], 490);
    expect(msg.stdout!.data.buffer).toBe(data.buffer);
    expect(wireFrameOf(msg)!.parts[1]!.buffer).toBe(data.buffer);
  });
});

describe("relayed frames", () => {
  it("decode lazily to the same message and re-encode to the same bytes, however they are split", () => {
    const original = create(ExecTaskStreamingResponseSchema, { exited: true, result: { exitCode: 137, signal: 9 } });
    const bytes = enveloped(toBinary(ExecTaskStreamingResponseSchema, original));
    for (const cuts of [[bytes.length], [2, bytes.length], [5, 6, bytes.length], [1, 3, 4, 9, bytes.length]]) {
      const parts = cuts.map((end, i) => bytes.subarray(i === 0 ? 0 : cuts[i - 1], end));
      const msg = messageFromFrame(ExecTaskStreamingResponseSchema, { parts, byteLength: bytes.length });
      expect(isMessage(msg, ExecTaskStreamingResponseSchema)).toBe(true);
      expect(wireFrameOf(msg)!.parts).toBe(parts);
      expect(msg.exited).toBe(true);
      expect(msg.result?.exitCode).toBe(137);
      expect(msg.stdout).toBeUndefined();
      expect(hex(toBinary(ExecTaskStreamingResponseSchema, msg))).toBe(hex(bytes.subarray(5)));
      expect(fromBinary(ExecTaskStreamingResponseSchema, toBinary(ExecTaskStreamingResponseSchema, msg))).toEqual(original);
    }
  });
});

describe("output writes that pile up", () => {
  it("travel as one message of views (up to maxChunkSize), each write completing once its message was pulled", async () => {
    const requests = new RequestQueue<ExecTaskStreamingRequest>();
    requests.push(create(ExecTaskStreamingRequestSchema, { setup: { taskId: "t", command: ["x"] } }));
    const chunks = Array.from({ length: 6 }, (_, i) => Buffer.alloc(1000, i));
    const done: number[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const responses = execStreaming(
      requests,
      {
        async exec(s) {
          s.stdout.write(chunks[0], () => done.push(0));
          // Written while the first message is still in flight: they pile up in the writable.
          for (let i = 1; i < chunks.length; i++) s.stdout.write(chunks[i], () => done.push(i));
          await gate;
          return { exitCode: 0 };
        },
      },
      { maxChunkSize: 2500 },
    );
    const first = (await responses.next()).value!;
    expect(first.stdout!.data).toBe(chunks[0]);
    const sizes: number[] = [];
    const buffers: ArrayBufferLike[] = [];
    for (;;) {
      const r = (await responses.next()).value!;
      if (!r.stdout?.data.length) break;
      const frame = wireFrameOf(r)!;
      sizes.push(frame.parts.slice(1).reduce((n, p) => n + p.byteLength, 0));
      for (const p of frame.parts.slice(1)) buffers.push(p.buffer);
      if (sizes.reduce((a, b) => a + b, 0) === 5000) {
        release();
      }
    }
    // 5000 bytes in messages of at most 2500, each part a view of the written chunks.
    expect(sizes).toEqual([2500, 2500]);
    expect(new Set(buffers)).toEqual(new Set(chunks.slice(1).map((c) => c.buffer)));
    for await (const _ of responses) {
      // close markers and exited
    }
    expect(done.sort()).toEqual([0, 1, 2, 3, 4, 5]);
    requests.end();
  });
});
