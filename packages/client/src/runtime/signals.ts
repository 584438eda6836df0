/**
 * One signal for several: `AbortSignal.any` where Node has it (20.3 and later), else the same by
 * listeners. The packages declare Node ≥ 20, and 20.0–20.2 lack it: without this a host failed at
 * every handshake there ("AbortSignal.any is not a function").
 */

/**
 * A signal that aborts, with the same reason, as soon as any of `signals` does (at once when one
 * already has).
 *
 * @example
 * ```ts
 * import { anySignal } from "@nomadkit/client/runtime";
 * const signal = anySignal([callSignal, AbortSignal.timeout(5000)]);
 * ```
 */
export function anySignal(signals: readonly AbortSignal[]): AbortSignal {
  if (typeof AbortSignal.any === "function") return AbortSignal.any(signals as AbortSignal[]);
  const ac = new AbortController();
  const onAbort = (e: Event) => {
    for (const s of signals) s.removeEventListener("abort", onAbort);
    ac.abort((e.target as AbortSignal).reason);
  };
  for (const s of signals) {
    if (s.aborted) {
      ac.abort(s.reason);
      for (const t of signals) t.removeEventListener("abort", onAbort);
      break;
    }
    s.addEventListener("abort", onAbort, { once: true });
  }
  return ac.signal;
}
