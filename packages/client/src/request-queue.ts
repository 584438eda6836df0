/**
 * A request stream fed by hand: pass it as the requests of a client- or bidi-streaming call, push
 * messages as they come (terminal input, the steps of a test), and end it when the request side is
 * done. Until {@link RequestQueue.end} the call's request side stays open — Nomad itself never
 * half-closes ExecTaskStreaming's, so this is also how to drive an exec session as Nomad does.
 * One call consumes it; messages pushed after `end()` are dropped.
 *
 * The queue holds whatever is pushed: a producer faster than the call (a file piped into an exec
 * session) should stop when {@link RequestQueue.push} returns false and go on once
 * {@link RequestQueue.drained} resolves, as with a `Writable`'s `write()` and `'drain'`. The call
 * takes a message only once the previous one was written to the HTTP/2 stream, so flow control
 * reaches the producer that way.
 *
 * @example
 * ```ts
 * import { launchPlugin, RequestQueue } from "@nomadkit/client";
 * import type { ExecTaskStreamingRequestSchema } from "@nomadkit/protocol/driver";
 * import type { MessageInitShape } from "@bufbuild/protobuf";
 *
 * const requests = new RequestQueue<MessageInitShape<typeof ExecTaskStreamingRequestSchema>>();
 * requests.push({ setup: { taskId, command: ["cat"] } }, { stdin: { data: new TextEncoder().encode("hi") } });
 * for await (const res of plugin.driver.execTaskStreaming(requests)) {
 *   if (res.stdout?.data.length) process.stdout.write(res.stdout.data);
 *   if (res.exited) requests.end();
 * }
 * ```
 */
export class RequestQueue<T> implements AsyncIterable<T> {
  readonly #items: T[] = [];
  readonly #highWaterMark: number;
  #wake: (() => void) | undefined;
  #drained: (() => void)[] = [];
  #ended = false;

  constructor(options: RequestQueueOptions = {}) {
    this.#highWaterMark = options.highWaterMark ?? 16;
  }

  /**
   * Queues messages for the call, in order. Ignored once the queue has ended. Returns false when
   * {@link RequestQueue.length} has reached the high-water mark: push no more until
   * {@link RequestQueue.drained} resolves (what is pushed meanwhile is still queued, not dropped).
   */
  push(...items: T[]): boolean {
    if (this.#ended) return false;
    this.#items.push(...items);
    this.#wake?.();
    return this.#items.length < this.#highWaterMark;
  }

  /** Half-closes the request side once the queued messages have been sent. Idempotent. */
  end(): void {
    this.#ended = true;
    this.#wake?.();
    // Nothing more can be pushed: a producer waiting to push must not wait for a call that may be gone.
    this.#settleDrained();
  }

  /** Messages queued and not yet taken by the call. */
  get length(): number {
    return this.#items.length;
  }

  /**
   * Resolves once the call has taken every queued message (at once when none is queued), or when
   * the queue has ended.
   */
  drained(): Promise<void> {
    if (this.#items.length === 0 || this.#ended) return Promise.resolve();
    return new Promise((resolve) => this.#drained.push(resolve));
  }

  #settleDrained(): void {
    for (const resolve of this.#drained.splice(0)) resolve();
  }

  /** Whether {@link RequestQueue.end} was called. */
  get ended(): boolean {
    return this.#ended;
  }

  /** The queued messages in order, waiting for more until {@link RequestQueue.end}. One consumer. */
  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    for (;;) {
      if (this.#items.length > 0) {
        const item = this.#items.shift()!;
        if (this.#items.length === 0) this.#settleDrained();
        yield item;
        continue;
      }
      if (this.#ended) return;
      await new Promise<void>((r) => (this.#wake = r));
      this.#wake = undefined;
    }
  }
}

/** Options of a {@link RequestQueue}. */
export interface RequestQueueOptions {
  /** Queued messages at which {@link RequestQueue.push} returns false; default 16. */
  highWaterMark?: number;
}
