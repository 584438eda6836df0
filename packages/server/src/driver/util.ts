/** Small async helpers for the driver streams. */

import { timerDelayMs } from "../runtime/timer-delay.js";

/**
 * The waits of one stream (a TaskStats stream waits once per sample, a TaskEvents stream once per
 * event): it listens to `signals` once for the stream's life and reuses one timer, instead of adding
 * and removing abort listeners and making a timer on every wait. One wait at a time.
 *
 * @example
 * ```ts
 * const waits = new StreamWaits(call.signal, lifetime);
 * try {
 *   while (await waits.next(1000)) yield sample(); // false once a signal aborted
 * } finally {
 *   waits.close();
 * }
 * ```
 */
export class StreamWaits {
  // As given (a rest parameter's array is exactly sized; one built by filter() has room for 16):
  // undefined entries are skipped where it is read. One of these lives as long as its stream.
  readonly #signals: readonly (AbortSignal | undefined)[];
  #pending: ((woke: boolean) => void) | undefined;
  #timer: NodeJS.Timeout | undefined;
  #timerMs = 0;
  #ended = false;
  readonly #onAbort = (): void => this.close();
  readonly #onTime = (): void => this.#settle(true);

  constructor(...signals: (AbortSignal | undefined)[]) {
    this.#signals = signals;
    if (signals.some((s) => s?.aborted)) this.#ended = true;
    else for (const s of signals) s?.addEventListener("abort", this.#onAbort, { once: true });
  }

  /**
   * Resolve true after `ms` (never, when infinite) or at the next `poke()`; false once any signal
   * aborted or `close()` was called. Never rejects, so a stream loop can simply return.
   */
  next(ms = Infinity): Promise<boolean> {
    if (this.#ended) return Promise.resolve(false);
    if (this.#pending !== undefined) throw new Error("StreamWaits: one wait at a time");
    return new Promise<boolean>((resolve) => {
      this.#pending = resolve;
      if (!Number.isFinite(ms)) return;
      const delay = Math.max(1, timerDelayMs(ms));
      // A timer that fired (or is still due, after a poke) is re-armed rather than replaced.
      if (this.#timer !== undefined && this.#timerMs === delay) this.#timer.refresh();
      else {
        clearTimeout(this.#timer);
        this.#timer = setTimeout(this.#onTime, delay);
        this.#timerMs = delay;
      }
    });
  }

  /** End the pending wait with true; nothing when no wait is pending. */
  readonly poke = (): void => this.#settle(true);

  /** Detach from the signals, stop the timer, and end the pending wait (and every later one) with false. */
  close(): void {
    if (!this.#ended) {
      this.#ended = true;
      for (const s of this.#signals) s?.removeEventListener("abort", this.#onAbort);
    }
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#settle(false);
  }

  #settle(woke: boolean): void {
    const pending = this.#pending;
    if (pending === undefined) return;
    this.#pending = undefined;
    pending(woke);
  }
}

/** A signal that aborts when any of `signals` does; `dispose` detaches the listeners. */
export function anySignal(...signals: (AbortSignal | undefined)[]): { signal: AbortSignal; dispose: () => void } {
  const ac = new AbortController();
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  const onAbort = (e: Event) => ac.abort((e.target as AbortSignal).reason);
  for (const s of live) {
    if (s.aborted) {
      ac.abort(s.reason);
      break;
    }
    s.addEventListener("abort", onAbort, { once: true });
  }
  return { signal: ac.signal, dispose: () => live.forEach((s) => s.removeEventListener("abort", onAbort)) };
}
