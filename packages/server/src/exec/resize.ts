/** Terminal resize events of an exec session. */

/** Terminal dimensions in character cells. */
export interface TerminalSize {
  /** Rows. */
  height: number;
  /** Columns. */
  width: number;
}

/**
 * The resize requests of one exec session. Nomad sends sizes right after `setup`, often before the
 * driver has started its terminal, so the latest size is kept: start a pty with
 * `resize.latest ?? default`, then follow changes with {@link TerminalResizes.on} or `for await`.
 *
 * @example
 * ```ts
 * const size = session.resize.latest ?? { height: 24, width: 80 };
 * const term = pty.spawn(cmd, args, { rows: size.height, cols: size.width });
 * const off = session.resize.on(({ height, width }) => term.resize(width, height));
 * ```
 */
export class TerminalResizes implements AsyncIterable<TerminalSize> {
  #latest: TerminalSize | undefined;
  readonly #listeners = new Set<(size: TerminalSize) => void>();
  #closed = false;

  /** The most recent size the client asked for, if any. */
  get latest(): TerminalSize | undefined {
    return this.#latest;
  }

  /** Call `listener` on every later resize; returns the function that unsubscribes. */
  on(listener: (size: TerminalSize) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Iterate sizes: the latest known one first (if any), then each new one, until the session ends.
   * Sizes that arrive while the consumer is busy collapse to the newest.
   */
  async *[Symbol.asyncIterator](): AsyncGenerator<TerminalSize, void, undefined> {
    let pending = this.#latest;
    let wake: (() => void) | undefined;
    const off = this.on((s) => {
      pending = s;
      wake?.();
    });
    const onClose = () => wake?.();
    this.#closeListeners.add(onClose);
    try {
      for (;;) {
        if (pending !== undefined) {
          const s = pending;
          pending = undefined;
          yield s;
          continue;
        }
        if (this.#closed) return;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
    } finally {
      off();
      this.#closeListeners.delete(onClose);
    }
  }

  readonly #closeListeners = new Set<() => void>();

  /** @internal Record a resize from the client. */
  push(size: TerminalSize): void {
    if (this.#closed) return;
    this.#latest = { height: size.height, width: size.width };
    for (const l of [...this.#listeners]) {
      try {
        l(this.#latest);
      } catch {
        // A terminal that is already gone cannot be resized; that is not the client's error.
      }
    }
  }

  /** @internal The session ended: iterators finish. */
  close(): void {
    this.#closed = true;
    for (const l of [...this.#closeListeners]) l();
  }
}
