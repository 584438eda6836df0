/**
 * The end of a buffered exec's output. Nomad's executor keeps the last 4 KiB of a script check's
 * output (a ring buffer, `drivers.CheckBufSize`): the status line a check prints last is what
 * Consul and Nomad show, so the start of a long output is what gets dropped.
 */

/** Nomad's `drivers.CheckBufSize`: output kept for a buffered exec (script checks). */
export const CHECK_OUTPUT_LIMIT = 4 * 1024;

/**
 * Keeps the last `limit` bytes pushed into it (copies: the caller may reuse its buffers).
 *
 * @example
 * ```ts
 * const tail = new OutputTail(4);
 * tail.push(Buffer.from("abcdef"));
 * tail.bytes().toString(); // "cdef"
 * ```
 */
export class OutputTail {
  #chunks: Buffer[] = [];
  #size = 0;

  constructor(readonly limit: number) {}

  push(data: Uint8Array): void {
    if (this.limit <= 0 || data.byteLength === 0) return;
    if (data.byteLength >= this.limit) {
      this.#chunks = [Buffer.from(data.subarray(data.byteLength - this.limit))];
      this.#size = this.limit;
      return;
    }
    this.#chunks.push(Buffer.from(data));
    this.#size += data.byteLength;
    // Drop whole chunks nobody will see; bytes() trims the one that is partly over the limit.
    while (this.#size - this.#chunks[0]!.byteLength >= this.limit) this.#size -= this.#chunks.shift()!.byteLength;
  }

  /** The last `limit` bytes (fewer if less was pushed). */
  bytes(): Buffer {
    const all = Buffer.concat(this.#chunks, this.#size);
    return all.byteLength > this.limit ? all.subarray(all.byteLength - this.limit) : all;
  }
}
