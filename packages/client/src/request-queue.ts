/**
 * A request stream fed by hand: pass it as the requests of a client- or bidi-streaming call, push
 * messages as they come (terminal input, the steps of a test), and end it when the request side is
 * done. Until {@link RequestQueue.end} the call's request side stays open — Nomad itself never
 * half-closes ExecTaskStreaming's, so this is also how to drive an exec session as Nomad does.
 * One call consumes it; messages pushed after `end()` are dropped.
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
  #wake: (() => void) | undefined;
  #ended = false;

  /** Queues messages for the call, in order. Ignored once the queue has ended. */
  push(...items: T[]): void {
    if (this.#ended) return;
    this.#items.push(...items);
    this.#wake?.();
  }

  /** Half-closes the request side once the queued messages have been sent. Idempotent. */
  end(): void {
    this.#ended = true;
    this.#wake?.();
  }

  /** Whether {@link RequestQueue.end} was called. */
  get ended(): boolean {
    return this.#ended;
  }

  /** The queued messages in order, waiting for more until {@link RequestQueue.end}. One consumer. */
  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    for (;;) {
      if (this.#items.length > 0) {
        yield this.#items.shift()!;
        continue;
      }
      if (this.#ended) return;
      await new Promise<void>((r) => (this.#wake = r));
      this.#wake = undefined;
    }
  }
}
