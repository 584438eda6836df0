/**
 * Error classes and predicates shared by both sides of the plugin protocol. `@nomadkit/server`
 * re-exports them, so a handler that throws {@link RecoverableError} and a host that catches it use
 * one class.
 *
 * Classes are recognised by a `Symbol.for` brand as well as by prototype, so `instanceof` still works
 * when the ESM and CommonJS builds of this package are both loaded (dual package hazard).
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";

const recoverableBrand = Symbol.for("@nomadkit/client/RecoverableError");
const shutdownBrand = Symbol.for("@nomadkit/client/PluginShutdownError");
const cancelledBrand = Symbol.for("@nomadkit/client/cancelled");

function branded(v: unknown, brand: symbol): boolean {
  return typeof v === "object" && v !== null && (v as Record<symbol, unknown>)[brand] === true;
}

/**
 * A failure that says whether retrying the task could succeed, like Go's
 * `structs.RecoverableError`. Thrown by a handler, it travels as FailedPrecondition with a
 * `hashicorp.nomad.plugins.shared.structs.RecoverableError` detail; the client turns that back into
 * this class. Nomad restarts a task only when `recoverable` is true.
 *
 * @example
 * ```ts
 * throw new RecoverableError("image pull timed out", true);
 * ```
 */
export class RecoverableError extends Error {
  /** Whether Nomad may retry (restart) the task. */
  readonly recoverable: boolean;

  constructor(message: string, recoverable: boolean, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "RecoverableError";
    this.recoverable = recoverable;
    Object.defineProperty(this, recoverableBrand, { value: true });
  }

  /** True for instances from either build (ESM or CommonJS) of this package; subclasses check the prototype. */
  static override [Symbol.hasInstance](v: unknown): boolean {
    // Subclasses keep ordinary prototype checks; the base class also accepts the other build's copy.
    if (this !== RecoverableError) return Function.prototype[Symbol.hasInstance].call(this, v);
    return branded(v, recoverableBrand);
  }
}

/**
 * The call failed because the plugin process is gone: the transport failed (Unavailable, a reset
 * stream, a closed connection) and the plugin's exit signal fired within the grace period. Nomad's
 * equivalent is `base.ErrPluginShutdown` ("plugin is shut down"). The transport error is `cause`.
 *
 * @example
 * ```ts
 * try { await driver.inspectTask({ taskId }); }
 * catch (err) { if (err instanceof PluginShutdownError) relaunch(); else throw err; }
 * ```
 */
export class PluginShutdownError extends Error {
  constructor(options?: { cause?: unknown }) {
    super("plugin is shut down", options);
    this.name = "PluginShutdownError";
    Object.defineProperty(this, shutdownBrand, { value: true });
  }

  /** True for instances from either build (ESM or CommonJS) of this package; subclasses check the prototype. */
  static override [Symbol.hasInstance](v: unknown): boolean {
    if (this !== PluginShutdownError) return Function.prototype[Symbol.hasInstance].call(this, v);
    return branded(v, shutdownBrand);
  }
}

/**
 * Create the error a call rejects with when its caller cancelled it: a `ConnectError` with code
 * Canceled (so servers relaying it answer Canceled) that {@link isCancellation} recognises.
 *
 * @example
 * ```ts
 * if (signal.aborted) throw cancellationError(signal.reason);
 * ```
 */
export function cancellationError(cause?: unknown, message = "call cancelled by caller"): ConnectError {
  const err = new ConnectError(message, Code.Canceled, undefined, undefined, cause);
  Object.defineProperty(err, cancelledBrand, { value: true });
  return err;
}

/**
 * True when `err` means "the caller gave up", not "the call failed": the error nomadkit clients
 * reject with after the caller's AbortSignal fired, or a DOM `AbortError`. Cancellations are
 * expected and must not be logged as failures. A deadline (DeadlineExceeded) is a failure, not a
 * cancellation; so is a Canceled status the caller did not ask for.
 *
 * @example
 * ```ts
 * try { for await (const s of driver.taskStats(req, { signal })) show(s); }
 * catch (err) { if (!isCancellation(err)) log.error({ err }, "stats failed"); }
 * ```
 */
export function isCancellation(err: unknown): boolean {
  if (branded(err, cancelledBrand)) return true;
  return err instanceof Error && err.name === "AbortError";
}
