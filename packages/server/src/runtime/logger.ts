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
  trace(fields: Record<string, unknown>, message?: string): void;
  debug(fields: Record<string, unknown>, message?: string): void;
  info(fields: Record<string, unknown>, message?: string): void;
  warn(fields: Record<string, unknown>, message?: string): void;
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
