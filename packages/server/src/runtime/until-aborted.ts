/**
 * Answering a call once its caller has gone, whether or not the handler notices: what Nomad's Go
 * shims do with `select { case <-result: case <-ctx.Done(): }`. Handlers that ignore their signal
 * then neither hold a stream open nor keep their call's response pending.
 */
import { cancellationError } from "@nomadkit/client/runtime";

/** Rejection of {@link untilAborted}: the call's signal fired while the handler was still busy. */
export class Aborted {
  constructor(readonly reason: unknown) {}
}

/**
 * Resolve with `p`, or reject with {@link Aborted} (carrying the signal's reason) as soon as
 * `signal` fires. A later rejection of `p` is then handled, not reported as unhandled.
 */
export function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    p.then(undefined, () => {});
    return Promise.reject(abortedBy(signal));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      p.then(undefined, () => {});
      reject(abortedBy(signal));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

/** The {@link Aborted} for a signal that fired: its reason, or a plain cancellation. */
export function abortedBy(signal: AbortSignal): Aborted {
  return new Aborted(signal.reason ?? cancellationError());
}
