/**
 * Reused read buffers for a process's output. Node's own sockets read into a fresh 64 KiB buffer
 * each time; at exec rates that is hundreds of MB/s of short-lived external memory, which V8 frees
 * only at its next major GC (~30 MiB later per process), and one JavaScript event per 64 KiB.
 * Here a `net.Socket` reads (`onread`) into 256 KiB blocks, consecutive reads filling one block, and
 * a block is reused once every byte of it has been written out.
 *
 * Ownership is counted per block: the reader holds the block it is filling, each chunk it hands
 * out holds it until the chunk's write callback, and whoever keeps bytes longer (the exec session's
 * output messages) takes its own hold with {@link retainChunk} and gives it back with
 * {@link releaseChunk} once the bytes have left the process. A hold that is never given back only
 * means the block is not reused: the garbage collector takes it, as it would any buffer.
 */

import type { Socket } from "node:net";
import type { Writable } from "node:stream";

const BLOCK_SIZE = 256 * 1024;
/** A read gets at least this much room; a block with less left is done. */
const MIN_READ = 16 * 1024;
/** Free blocks kept for reuse, per process (4 MiB). */
const KEEP_FREE = 16;

interface Block {
  readonly bytes: Buffer;
  /** Holds: the reader filling it, chunks not yet written, retained views. */
  refs: number;
  /** Bytes handed out so far. */
  used: number;
}

const blocks = new WeakMap<ArrayBufferLike, Block>();
const free: Block[] = [];
let created = 0;
let taken = 0;

function take(): Block {
  taken++;
  const b = free.pop();
  if (b !== undefined) return b;
  // Its own ArrayBuffer (not Node's shared pool), so the block is found from any view of it.
  const bytes = Buffer.allocUnsafeSlow(BLOCK_SIZE);
  const block: Block = { bytes, refs: 0, used: 0 };
  blocks.set(bytes.buffer, block);
  created++;
  return block;
}

function unref(b: Block): void {
  if (--b.refs > 0) return;
  b.used = 0;
  if (free.length < KEEP_FREE) free.push(b);
}

/**
 * Writables that promise to {@link retainChunk} whatever part of a written chunk they keep after
 * the write's callback (and to {@link releaseChunk} it later, or never): only into those may a
 * {@link PooledReader} write its chunks, whose memory is reused after the callback.
 */
export const RETAINS_CHUNKS: unique symbol = Symbol("@nomadkit/server.retainsChunks") as never;

/** Whether `w` keeps the {@link RETAINS_CHUNKS} promise. */
export function retainsChunks(w: object): boolean {
  return (w as { [RETAINS_CHUNKS]?: boolean })[RETAINS_CHUNKS] === true;
}

/** Take a hold on the block under `view`, if it is a pooled one (no-op otherwise). */
export function retainChunk(view: Uint8Array): void {
  const b = blocks.get(view.buffer);
  if (b !== undefined) b.refs++;
}

/** Give back a hold taken with {@link retainChunk} (no-op for memory not from the pool). */
export function releaseChunk(view: Uint8Array): void {
  const b = blocks.get(view.buffer);
  if (b !== undefined) unref(b);
}

/**
 * The buffer side of one socket's `onread`: `next` is `onread.buffer`, `chunk(n)` turns the bytes
 * of the last read into a chunk holding its block (release it with {@link releaseChunk} in the
 * write callback).
 *
 * @example
 * ```ts
 * const reader = new PooledReader();
 * const socket = net.connect({ path, onread: {
 *   buffer: reader.next,
 *   callback: (n) => { const c = reader.chunk(n); return out.write(c, () => releaseChunk(c)); },
 * }});
 * socket.once("close", () => reader.close());
 * ```
 */
export class PooledReader {
  #block: Block | undefined;

  /** Room for the next read: the rest of the current block, or a new one. */
  readonly next = (): Buffer => {
    let b = this.#block;
    if (b === undefined || BLOCK_SIZE - b.used < MIN_READ) {
      if (b !== undefined) unref(b);
      b = this.#block = take();
      b.refs = 1;
    }
    return b.bytes.subarray(b.used);
  };

  /** The `n` bytes the last read put into the buffer from {@link next}, as a held chunk. */
  chunk(n: number): Buffer {
    const b = this.#block!;
    const c = b.bytes.subarray(b.used, b.used + n);
    b.used += n;
    b.refs++;
    return c;
  }

  /** The socket is done: drop the reader's hold on its current block. */
  close(): void {
    const b = this.#block;
    this.#block = undefined;
    if (b !== undefined) unref(b);
  }
}

/** For tests and diagnostics: blocks free for reuse now, blocks allocated and taken for reading so far. */
export function readBufferStats(): { free: number; created: number; taken: number } {
  return { free: free.length, created, taken };
}

/** A socket read into pooled buffers and written into a Writable ({@link readSocketInto}). */
export interface PooledSocketReader {
  /** Give these to `net.connect` (or `new net.Socket`) as its `onread`. */
  readonly onread: { buffer: () => Buffer; callback: (n: number) => boolean };
  /**
   * The socket made with {@link onread}: from now on its EOF ends `target` (unless `end` was false).
   * Resolves once it has closed (EOF, an error or `destroy()`), with the reader's buffers given back.
   */
  attach(socket: Socket): Promise<void>;
}

/**
 * Reads a socket into `target` like `pipe()` would, from pooled buffers: `target` must keep the
 * {@link RETAINS_CHUNKS} promise; a write it does not accept at once pauses the socket until `drain`.
 *
 * @example
 * ```ts
 * const r = readSocketInto(session.stdout);
 * const eof = r.attach(net.connect({ path, onread: r.onread }));
 * ```
 */
export function readSocketInto(target: Writable, { end = true }: { end?: boolean } = {}): PooledSocketReader {
  const reader = new PooledReader();
  let socket: Socket | undefined;
  const callback = (n: number): boolean => {
    const chunk = reader.chunk(n);
    // Once the callback ran, the writable took its own hold on what it keeps.
    if (target.write(chunk, () => releaseChunk(chunk))) return true;
    target.once("drain", () => socket?.resume());
    return false;
  };
  return {
    onread: { buffer: reader.next, callback },
    attach(s) {
      socket = s;
      s.on("error", () => {}); // a destroyed target or a killed process: the exit says what happened
      return new Promise<void>((resolve) => {
        if (end) s.once("end", () => target.end());
        s.once("close", () => {
          reader.close();
          resolve();
        });
      });
    },
  };
}
