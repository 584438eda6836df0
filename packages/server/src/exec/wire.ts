/**
 * Exec output messages with their wire bytes attached: `{stdout|stderr: {data}}` is a 5-byte gRPC
 * prefix, a small protobuf header (`0a|12 <len> 0a <len>`) and then the payload itself, so the
 * plugin server writes the header and the process output as they are — no encoding, no copy, and
 * several pipe reads can travel as one message. The message object is still an ordinary
 * ExecTaskStreamingResponse for everything else (connect's path, the raw form, tests). Once the
 * direct path has written it, the frame gives back its holds on pooled read buffers
 * (read-buffers.ts): from then on its `data` may be reused memory.
 */
import {
  ExecTaskStreamingIOOperationSchema,
  ExecTaskStreamingResponseSchema,
  type ExecTaskStreamingIOOperation,
  type ExecTaskStreamingResponse,
} from "@nomadkit/protocol/driver";
import { releaseChunk } from "./read-buffers.js";
import { varint32Size, writeVarint32 } from "../runtime/binary-encoder.js";
import { attachWireFrame, writeEnvelopePrefix } from "../runtime/wire-frame.js";

/** Field tags of ExecTaskStreamingResponse.stdout (1) and .stderr (2), wire type LEN; data is field 1 inside. */
const TAG = { stdout: 0x0a, stderr: 0x12 } as const;
const DATA_TAG = 0x0a;
const RESPONSE_TYPE = ExecTaskStreamingResponseSchema.typeName as ExecTaskStreamingResponse["$typeName"];
const IO_TYPE = ExecTaskStreamingIOOperationSchema.typeName as ExecTaskStreamingIOOperation["$typeName"];

/** The 5-byte prefix and protobuf header of an output message carrying `size` payload bytes. */
export function outputHeader(field: "stdout" | "stderr", size: number): Buffer {
  const inner = 1 + varint32Size(size) + size; // ExecTaskStreamingIOOperation {data}
  const message = 1 + varint32Size(inner) + inner; // ExecTaskStreamingResponse {field}
  const head = Buffer.allocUnsafe(5 + 1 + varint32Size(inner) + 1 + varint32Size(size));
  let p = writeEnvelopePrefix(head, 0, message);
  head[p++] = TAG[field];
  p = writeVarint32(head, p, inner);
  head[p++] = DATA_TAG;
  writeVarint32(head, p, size);
  return head;
}

function concat(parts: readonly Uint8Array[], size: number): Uint8Array {
  const out = new Uint8Array(size);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.byteLength;
  }
  return out;
}

/**
 * `{[field]: {data: parts joined}}` carrying its wire frame. With one part, `data` is that part (a
 * view, never a copy); with several, `data` is joined only if someone reads it.
 */
export function outputMessage(field: "stdout" | "stderr", parts: readonly Uint8Array[], size: number): ExecTaskStreamingResponse {
  // Plain literals shaped exactly like create()'s output (create() is slow on this hot path).
  let io: ExecTaskStreamingIOOperation;
  if (parts.length === 1) {
    io = { $typeName: IO_TYPE, data: parts[0]!, close: false };
  } else {
    let joined: Uint8Array | undefined;
    io = { $typeName: IO_TYPE, close: false } as ExecTaskStreamingIOOperation;
    Object.defineProperty(io, "data", { enumerable: true, configurable: true, get: () => (joined ??= concat(parts, size)) });
  }
  const msg = { $typeName: RESPONSE_TYPE, exited: false, [field]: io } as ExecTaskStreamingResponse;
  const head = outputHeader(field, size);
  return attachWireFrame(msg, { parts: [head, ...parts], byteLength: head.byteLength + size, written: () => parts.forEach(releaseChunk) });
}
