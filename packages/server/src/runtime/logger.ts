/** The logging surface the server runtime needs; pino loggers (and nomadkit's hclog logger) fit it. */

/** One log method as the runtime calls it: `log({ rpc, err }, "message")` (pino and hclog order). */
export type LogFn = (fields: Record<string, unknown>, message?: string) => void;

/**
 * Minimal structural logger, compatible with pino.
 *
 * @example
 * ```ts
 * import pino from "pino";
 * const runtime = new ServerRuntime({ logger: pino() });
 * ```
 */
export interface Logger {
  // Method syntax on purpose: loggers with richer overloads (pino, nomadkit's hclog logger) fit.
  /** Log `message` with `fields` at trace. */
  trace(fields: Record<string, unknown>, message?: string): void;
  /** Log at debug: cancelled calls and expected failures (RecoverableError, ConnectError). */
  debug(fields: Record<string, unknown>, message?: string): void;
  /** Log at info. */
  info(fields: Record<string, unknown>, message?: string): void;
  /** Log at warn. */
  warn(fields: Record<string, unknown>, message?: string): void;
  /** Log at error: unexpected handler failures (answered Unknown), once per error. */
  error(fields: Record<string, unknown>, message?: string): void;
}

const noop: LogFn = () => {};

/**
 * A logger that drops everything; the default.
 *
 * @example
 * ```ts
 * new ServerRuntime({ logger: noopLogger });
 * ```
 */
export const noopLogger: Logger = Object.freeze({
  trace: noop,
  debug: noop,
  info: noop,
  warn: noop,
  error: noop,
});
