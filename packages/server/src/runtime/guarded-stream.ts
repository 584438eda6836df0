/**
 * A streaming handler's responses as the server runtime hands them to the transport: failures
 * mapped to a status, and the call's cancellation obeyed even by a handler that ignores its signal.
 *
 * A hand-written iterator rather than an async generator around the handler's: each message then
 * costs one promise instead of the half dozen (and as many microtask turns) an async generator
 * wrapping another takes, which was most of what a TaskStats sample cost the runtime.
 */
import type { ConnectError } from "@connectrpc/connect";
import { Aborted, abortedBy } from "./until-aborted.js";

const DONE: IteratorReturnResult<undefined> = Object.freeze({ done: true, value: undefined });

/**
 * The responses of one streaming call. `start` runs the handler at the first `next()`; its
 * iterator's failures come out as `mapError(err)`. When `signal` aborts, a pending `next()` rejects
 * at once (with `mapError` of the signal's reason) and the handler's iterator is ended without
 * waiting for it, since a handler that ignores its signal may never get there. Consumed by one
 * loop: one `next()` at a time.
 *
 * @example
 * ```ts
 * const responses = new GuardedStream(() => handler(request, ctx), ctx.signal, (err) => toStatus(err));
 * for await (const message of responses) send(message);
 * ```
 */
export class GuardedStream<O> implements AsyncIterableIterator<O> {
  readonly #start: () => AsyncIterable<O>;
  readonly #signal: AbortSignal;
  readonly #mapError: (err: unknown) => ConnectError;
  #iter: AsyncIterator<O> | undefined;
  #finished = false;
  /** The handler's iterator finished on its own (returned or threw): nothing left to end. */
  #handlerDone = false;
  #resolve: ((r: IteratorResult<O>) => void) | undefined;
  #reject: ((err: unknown) => void) | undefined;

  constructor(start: () => AsyncIterable<O>, signal: AbortSignal, mapError: (err: unknown) => ConnectError) {
    this.#start = start;
    this.#signal = signal;
    this.#mapError = mapError;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<O>> {
    if (this.#finished) return Promise.resolve(DONE);
    if (this.#resolve !== undefined) return Promise.reject(new Error("GuardedStream: one next() at a time"));
    let pending: Promise<IteratorResult<O>>;
    try {
      if (this.#iter === undefined) {
        // One listener for the whole call, on the abort itself: when the client cancels while a
        // response write waits for HTTP/2 flow control, the transport does not ask for the next
        // message, and the handler (an exec session, its process, a subscription) must still end.
        this.#signal.addEventListener("abort", this.#onAbort, { once: true });
        this.#iter = this.#start()[Symbol.asyncIterator]();
      }
      if (this.#signal.aborted) throw abortedBy(this.#signal);
      pending = this.#iter.next();
    } catch (err) {
      return Promise.reject(this.#fail(err));
    }
    return new Promise<IteratorResult<O>>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
      pending.then(this.#onResult, this.#onError);
    });
  }

  /** The consumer stops early (the call failed or ended): the handler's stream is ended, not awaited. */
  return(): Promise<IteratorResult<O>> {
    const resolve = this.#resolve;
    this.#clearPending();
    this.#finish();
    resolve?.(DONE);
    return Promise.resolve(DONE);
  }

  /** Like {@link return}, then rejects with `err`. */
  throw(err: unknown): Promise<IteratorResult<O>> {
    void this.return();
    return Promise.reject(err);
  }

  readonly #onResult = (r: IteratorResult<O>): void => {
    const resolve = this.#resolve;
    // Already answered: the call was cancelled or the consumer returned meanwhile.
    if (resolve === undefined) return;
    this.#clearPending();
    if (r.done === true) {
      this.#handlerDone = true;
      this.#finish();
      resolve(DONE);
    } else resolve(r);
  };

  readonly #onError = (err: unknown): void => {
    const reject = this.#reject;
    if (reject === undefined) return;
    this.#clearPending();
    reject(this.#fail(err));
  };

  readonly #onAbort = (): void => {
    const reject = this.#reject;
    if (reject === undefined) {
      // The consumer is busy (or gone); its next `next()` sees the abort.
      this.#endHandler();
      return;
    }
    this.#clearPending();
    reject(this.#fail(abortedBy(this.#signal)));
  };

  /**
   * The status for `err`, the stream finished; the handler ended unless it failed itself. Should
   * `mapError` throw, what it threw is the failure: the consumer's promise must settle either way.
   */
  #fail(err: unknown): unknown {
    const aborted = err instanceof Aborted;
    if (!aborted) this.#handlerDone = true;
    let status: unknown;
    try {
      status = this.#mapError(aborted ? err.reason : err);
    } catch (mappingFailed) {
      status = mappingFailed;
    }
    this.#finish();
    return status;
  }

  #clearPending(): void {
    this.#resolve = undefined;
    this.#reject = undefined;
  }

  #finish(): void {
    if (this.#finished) return;
    this.#finished = true;
    this.#signal.removeEventListener("abort", this.#onAbort);
    this.#endHandler();
  }

  #endHandler(): void {
    const iter = this.#iter;
    if (this.#handlerDone || iter?.return === undefined) return;
    this.#handlerDone = true;
    iter.return().then(undefined, () => {});
  }
}
