// GRPCStdio's capture: what a host has not read yet is bounded, keeping the newest output.
import { describe, expect, it } from "vitest";
import { Writable } from "node:stream";
import { StdioCapture } from "../src/goplugin/stdio.js";
import { createLogger } from "../src/log/index.js";

type Chunk = { channel: number; data: Uint8Array };
const push = (c: StdioCapture, chunk: Chunk) => (c as unknown as { push(c: Chunk): void }).push(chunk);

describe("StdioCapture", () => {
  it("keeps the newest 1 MiB for a subscriber that does not read, and delivers it in order", async () => {
    const sink = new Writable({ write: (_c, _e, cb) => cb() });
    const capture = new StdioCapture(createLogger({ destination: sink }));
    const ac = new AbortController();
    const it = capture.subscribe(ac.signal)[Symbol.asyncIterator]();
    const first = it.next(); // subscribes, then waits for output
    await new Promise((r) => setImmediate(r));
    // 64 MiB written while the host reads nothing.
    for (let i = 0; i < 64; i++) push(capture, { channel: 2, data: Buffer.alloc(1 << 20, i) });
    const got: number[] = [];
    let bytes = 0;
    let r = await first;
    while (!r.done) {
      got.push(r.value.data[0]!);
      bytes += r.value.data.length;
      if (got.length === 1) capture.close(); // ends the stream after what is queued
      r = await it.next();
    }
    expect(bytes).toBeLessThanOrEqual(2 << 20);
    expect(got.at(-1)).toBe(63);
    expect(got).toEqual([...got].sort((a, b) => a - b));
  });
});
