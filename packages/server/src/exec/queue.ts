/**
 * A pull queue between producers (output writables, raw `send`) and the connect response stream.
 * Each item may carry a callback that runs once the consumer has taken the item AND asked for the
 * next one: connect pulls the next response only after writing the previous one to the HTTP/2 stream
 * (waiting for "drain"), so the callback means "written, flow control permitting". That is what
 * turns HTTP/2 flow control into backpressure on the producer.
 */

/** Called with an error when the item will never be consumed (the call ended first). */
export type Consumed = (err?: Error) => void;

interface Item<T> {
  value: T;
  onConsumed: Consumed | undefined;
}

export class OutboundQueue<T> {
  readonly #items: Item<T>[] = [];
  #head = 0;
  #ended = false;
  #error: { err: unknown } | undefined;
  #wake: (() => void) | undefined;
  #closedReason: Error | undefined;
  #inflight: Item<T> | undefined;

  /** Enqueue `value`; `onConsumed` runs when it has been consumed (or with an error if it never will). */
  push(value: T, onConsumed?: Consumed): void {
    if (this.#closedReason !== undefined || this.#ended || this.#error !== undefined) {
      onConsumed?.(this.#closedReason ?? new Error("exec stream already finished"));
      return;
    }
    this.#items.push({ value, onConsumed });
    this.#notify();
  }

  /** No more items: the consumer finishes after the queued ones. */
  end(): void {
    this.#ended = true;
    this.#notify();
  }

  /** Fail the consumer with `err` (after nothing else; queued items are dropped). */
  fail(err: unknown): void {
    if (this.#error !== undefined) return;
    this.#error = { err };
    this.#notify();
  }

  /** Items queued and not yet consumed. */
  get size(): number {
    return this.#items.length - this.#head;
  }

  #notify(): void {
    const w = this.#wake;
    this.#wake = undefined;
    w?.();
  }

  /** Drop everything and refuse further items; pending callbacks get `reason`. */
  close(reason: Error): void {
    if (this.#closedReason !== undefined) return;
    this.#closedReason = reason;
    const pending = this.#items.slice(this.#head);
    this.#items.length = 0;
    this.#head = 0;
    for (const it of pending) it.onConsumed?.(reason);
    this.#notify();
  }

  /**
   * The consumer side. `materialize` turns an item into what is yielded (lets the caller reuse one
   * message object per stream). Single consumer.
   */
  async *drain<U>(materialize: (value: T) => U): AsyncGenerator<U, void, undefined> {
    try {
      for (;;) {
        if (this.#error !== undefined) throw this.#error.err;
        if (this.#closedReason !== undefined) return;
        if (this.#head < this.#items.length) {
          const item = this.#items[this.#head]!;
          this.#items[this.#head] = undefined as unknown as Item<T>;
          this.#head++;
          if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
            this.#items.splice(0, this.#head);
            this.#head = 0;
          }
          this.#inflight = item;
          yield materialize(item.value);
          // Resumed: the consumer asked for the next item, so this one has been written.
          this.#inflight = undefined;
          item.onConsumed?.();
          continue;
        }
        if (this.#ended) return;
        await new Promise<void>((resolve) => (this.#wake = resolve));
      }
    } finally {
      const reason = new Error("exec stream closed");
      this.#inflight?.onConsumed?.(reason);
      this.#inflight = undefined;
      this.close(reason);
    }
  }
}
