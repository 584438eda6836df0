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
  // `p` may outlive the call by far (WaitTask's: until the task exits, and Nomad gives up on a
  // WaitTask at every agent restart): its reactions hold only this box, which lets go of the call
  // (its promise, signal, context and stream) once the signal fires.
  const box: SettleBox = {};
  forwardTo(p, box);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      box.settle = undefined;
      reject(abortedBy(signal));
    };
    box.settle = (ok, value) => {
      box.settle = undefined;
      signal.removeEventListener("abort", onAbort);
      if (ok) resolve(value as T);
      else reject(value);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

interface SettleBox {
  settle?: ((ok: boolean, value: unknown) => void) | undefined;
}

/**
 * `p`'s outcome to whatever `box` holds then. A function of its own: V8 gives closures made in one
 * scope one shared context, so reactions made in untilAborted would keep its `signal` alive.
 */
function forwardTo(p: Promise<unknown>, box: SettleBox): void {
  p.then(
    (v) => box.settle?.(true, v),
    (e: unknown) => box.settle?.(false, e),
  );
}

/** The {@link Aborted} for a signal that fired: its reason, or a plain cancellation. */
export function abortedBy(signal: AbortSignal): Aborted {
  return new Aborted(signal.reason ?? cancellationError());
}
