/**
 * A terminal's input with backpressure. node-pty's `write()` queues without limit and, while the
 * terminal's input buffer is full (a program that is not reading), retries on every turn of the
 * event loop: a large paste into a busy program grew the process without bound and kept a core
 * busy. Nomad's executor writes blocking, so it stops reading the client's messages and HTTP/2 flow
 * control reaches the client. Here the input stream is paused while a chunk waits for room, and a
 * full buffer is retried on a timer.
 *
 * The writes are synchronous (the master is non-blocking: a full buffer is EAGAIN, never a wait),
 * so none is ever in flight on the threadpool: once {@link PtyInput.dispose} returns, nothing more
 * reaches the descriptor number, which the next file opened may get once the terminal is closed.
 */
import { writeSync } from "node:fs";
import type { Readable } from "node:stream";

/** Longest wait between two tries at a full terminal buffer. */
const MAX_RETRY_MS = 50;

/**
 * Writes `input`'s chunks to the terminal master `fd` in order, pausing `input` until each is
 * written; `end()` writes the terminal's end of input after them. A write error other than a full
 * buffer (the terminal is gone) drops the rest: nobody can read it any more.
 *
 * @example
 * ```ts
 * const feed = new PtyInput(term.fd, session.stdin);
 * session.stdin.on("data", (c) => feed.push(c)).on("end", () => feed.end());
 * ```
 */
export class PtyInput {
  readonly #queue: Buffer[] = [];
  #offset = 0;
  #failed = false;
  #timer: NodeJS.Timeout | undefined;
  #lastByte = -1;

  constructor(
    private readonly fd: number,
    private readonly input: Readable,
  ) {}

  /** Queue a chunk of input; `input` stays paused until it is written. */
  push(chunk: Buffer): void {
    if (this.#failed || chunk.byteLength === 0) return;
    this.#queue.push(chunk);
    this.#lastByte = chunk[chunk.byteLength - 1]!;
    this.input.pause();
    // Waiting for room: the timer goes on, in order.
    if (this.#timer === undefined) this.#next();
  }

  /**
   * End of input, as a terminal user types it: ^D. A partial line needs two (the first only hands
   * the line to the reader), so the program's read sees end-of-file either way.
   */
  end(): void {
    const partial = this.#lastByte !== -1 && this.#lastByte !== 0x0a && this.#lastByte !== 0x0d;
    this.push(Buffer.from(partial ? "\x04\x04" : "\x04"));
  }

  /**
   * Stop writing: the session is over, or the terminal is about to be closed (call it before the
   * descriptor is). Input from then on is drained and dropped.
   */
  dispose(): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#queue.length = 0;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.input.resume();
  }

  #next(delay = 1): void {
    this.#timer = undefined;
    while (!this.#failed) {
      const chunk = this.#queue[0];
      if (chunk === undefined) {
        this.input.resume();
        return;
      }
      let n: number;
      try {
        n = writeSync(this.fd, chunk, this.#offset, chunk.byteLength - this.#offset);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "EAGAIN") {
          this.#timer = setTimeout(() => this.#next(Math.min(delay * 2, MAX_RETRY_MS)), delay);
          return;
        }
        this.dispose(); // the terminal is gone: nobody can read the rest
        return;
      }
      this.#offset += n;
      if (this.#offset >= chunk.byteLength) {
        this.#queue.shift();
        this.#offset = 0;
      }
    }
  }
}
