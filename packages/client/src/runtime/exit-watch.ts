/** Tracks a plugin's "done" signal (AbortSignal or promise) so failures can wait for it briefly. */

/**
 * A signal that fires when the plugin process is known to be gone.
 *
 * @example
 * ```ts
 * const exited: PluginExitSignal = once(child, "exit");
 * ```
 */
export type PluginExitSignal = AbortSignal | PromiseLike<unknown>;

/** Outcome of waiting for the plugin to exit after a transport failure. */
export type ExitWaitOutcome = "exited" | "timeout" | "cancelled";

export class ExitWatch {
  #exited = false;
  readonly #waiters = new Set<() => void>();

  constructor(done: PluginExitSignal) {
    const fire = () => {
      this.#exited = true;
      for (const w of this.#waiters) w();
      this.#waiters.clear();
    };
    if (isAbortSignal(done)) {
      if (done.aborted) this.#exited = true;
      else done.addEventListener("abort", fire, { once: true });
    } else {
      // Rejection also means "done": an exit promise that rejects reports a crashed plugin.
      Promise.resolve(done).then(fire, fire);
    }
  }

  get exited(): boolean {
    return this.#exited;
  }

  /**
   * Wait up to `graceMs` for the exit. Any of `cancel` aborting ends the wait early: the caller's
   * own signal, or the connection closed on this side (nothing then awaits the outcome, and the
   * timer must not hold the process for the rest of the grace).
   */
  wait(graceMs: number, ...cancel: (AbortSignal | undefined)[]): Promise<ExitWaitOutcome> {
    if (this.#exited) return Promise.resolve("exited");
    if (cancel.some((s) => s?.aborted)) return Promise.resolve("cancelled");
    return new Promise<ExitWaitOutcome>((resolve) => {
      const finish = (o: ExitWaitOutcome) => {
        clearTimeout(timer);
        this.#waiters.delete(onExit);
        for (const s of cancel) s?.removeEventListener("abort", onAbort);
        resolve(o);
      };
      const onExit = () => finish("exited");
      const onAbort = () => finish(this.#exited ? "exited" : "cancelled");
      // Not unref'd: a short-lived script awaiting the call must see its outcome.
      const timer = setTimeout(() => finish("timeout"), graceMs);
      this.#waiters.add(onExit);
      for (const s of cancel) s?.addEventListener("abort", onAbort, { once: true });
    });
  }
}

function isAbortSignal(v: PluginExitSignal): v is AbortSignal {
  return typeof (v as AbortSignal).addEventListener === "function" && "aborted" in v;
}
