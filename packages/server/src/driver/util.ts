/** Small async helpers for the driver streams. */

/**
 * Resolve after `ms`, or as soon as any of `signals` aborts. Resolves true when the time passed,
 * false when aborted; never rejects, so stream loops can simply return.
 */
export function sleep(ms: number, ...signals: (AbortSignal | undefined)[]): Promise<boolean> {
  return wake(ms, undefined, ...signals);
}

/**
 * Resolve true after `ms` (if finite), or when `poke` registers a wake-up call, or false when any of
 * `signals` aborts.
 */
export function wake(ms: number, poke: ((fn: () => void) => () => void) | undefined, ...signals: (AbortSignal | undefined)[]): Promise<boolean> {
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  if (live.some((s) => s.aborted)) return Promise.resolve(false);
  return new Promise<boolean>((resolve) => {
    let timer: NodeJS.Timeout | undefined;
    let unpoke: (() => void) | undefined;
    const done = (v: boolean) => {
      clearTimeout(timer);
      unpoke?.();
      for (const s of live) s.removeEventListener("abort", onAbort);
      resolve(v);
    };
    const onAbort = () => done(false);
    for (const s of live) s.addEventListener("abort", onAbort, { once: true });
    if (Number.isFinite(ms)) timer = setTimeout(() => done(true), Math.max(0, ms));
    if (poke !== undefined) unpoke = poke(() => done(true));
  });
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
