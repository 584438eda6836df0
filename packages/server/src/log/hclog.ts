/**
 * What every hclog line nomadkit writes has in common, without a logging library: the Logger
 * interface, the levels, hclog's timestamp, field values made JSON-safe and the two argument
 * orders. The pino logger (index.ts) writes with these; so does the line writer (lines.ts) of the
 * bundled launcher's load fast path, which must not load pino.
 * @module
 */

/** hclog levels, lowest first. */
export type LogLevel = "trace" | "debug" | "info" | "warn" | "error";

/** Extra key/value pairs attached to one log line (hclog "args"). */
export type LogFields = Record<string, unknown>;

/**
 * A small hclog-style logger. Every method writes one JSON line synchronously, so nothing is lost
 * when the process exits right after logging.
 */
export interface Logger {
  /** Log at `trace`: per-message detail, off in most hosts. */
  trace: LogMethod;
  /** Log at `debug`. */
  debug: LogMethod;
  /** Log at `info`. */
  info: LogMethod;
  /** Log at `warn`. */
  warn: LogMethod;
  /** Log at `error`. */
  error: LogMethod;
  /** A sub-logger whose `@module` is `<this module>.<name>` (hclog `Named`). */
  named(name: string): Logger;
  /** A sub-logger that adds `fields` to every line (hclog `With`). */
  with(fields: LogFields): Logger;
  /** Whether a line at `level` would be written. */
  isLevelEnabled(level: LogLevel): boolean;
  /** The lowest level written. */
  readonly level: LogLevel;
}

/**
 * One level's log method. Both argument orders work: hclog-like `(message, fields?)` and pino-like
 * `(fields, message?)`, so this logger also fits anything that expects a pino logger (such as
 * `ServerRuntime`). An `Error` value (or an `Error` passed as `fields`) is logged as its message.
 */
export interface LogMethod {
  (message: string, fields?: LogFields): void;
  (fields: LogFields | Error, message?: string): void;
}

export const LEVELS: readonly LogLevel[] = [
  "trace",
  "debug",
  "info",
  "warn",
  "error",
];

function pad(n: number, width: number): string {
  return String(n).padStart(width, "0");
}

/**
 * Formats a time the way Go formats `2006-01-02T15:04:05.000000Z07:00`: local time, microseconds,
 * `Z` for UTC or a `+hh:mm` offset.
 * @internal
 */
export function formatHclogTimestamp(epochMs: number): string {
  const whole = Math.floor(epochMs);
  const micros = Math.floor((epochMs - whole) * 1000);
  const d = new Date(whole);
  const offsetMin = -d.getTimezoneOffset();
  const zone =
    offsetMin === 0
      ? "Z"
      : `${offsetMin > 0 ? "+" : "-"}${pad(Math.floor(Math.abs(offsetMin) / 60), 2)}:${pad(Math.abs(offsetMin) % 60, 2)}`;
  return (
    `${pad(d.getFullYear(), 4)}-${pad(d.getMonth() + 1, 2)}-${pad(d.getDate(), 2)}` +
    `T${pad(d.getHours(), 2)}:${pad(d.getMinutes(), 2)}:${pad(d.getSeconds(), 2)}` +
    `.${pad(d.getMilliseconds() * 1000 + micros, 6)}${zone}`
  );
}

// Microseconds, as hclog writes them: Date.now() has only milliseconds, so a wall clock reading is
// advanced by the monotonic clock (as performance.timeOrigin + performance.now() would be, but the
// `performance` global loads perf_hooks, 1-2 ms of every plugin's start-up). Re-read whenever the
// two disagree by a millisecond: the wall clock was stepped (NTP at boot, a VM resumed), and an
// executor lives as long as its task, so its lines would carry the old offset for weeks.
let anchorMs = Date.now();
let anchorNs = process.hrtime.bigint();
export function nowMs(): number {
  const ns = process.hrtime.bigint();
  const wall = Date.now();
  const est = anchorMs + Number(ns - anchorNs) / 1e6;
  if (Math.abs(est - wall) < 1) return est;
  anchorMs = wall;
  anchorNs = ns;
  return wall;
}

// hclog renders errors (and anything with a custom String method) as text, not as nested objects.
/**
 * A field value JSON can show: an Error as its message (JSON.stringify makes it `{}`), a bigint as
 * its digits (it would throw), also inside arrays and plain objects (a few levels deep). Returns
 * `v` itself when nothing changes.
 */
function loggable(v: unknown, depth = 0): unknown {
  if (v instanceof Error) return v.message;
  if (typeof v === "bigint") return v.toString();
  if (depth >= 4 || v === null || typeof v !== "object") return v;
  if (Array.isArray(v)) {
    const m = v.map((x) => loggable(x, depth + 1));
    return m.some((x, i) => x !== v[i]) ? m : v;
  }
  const proto = Object.getPrototypeOf(v) as unknown;
  if (proto !== Object.prototype && proto !== null) return v;
  let out: Record<string, unknown> | undefined;
  for (const [k, x] of Object.entries(v)) {
    const nx = loggable(x, depth + 1);
    if (nx !== x) (out ??= { ...(v as Record<string, unknown>) })[k] = nx;
  }
  return out ?? v;
}

export function normaliseFields(fields: LogFields): LogFields {
  let out: LogFields | undefined;
  for (const [k, v] of Object.entries(fields)) {
    const nv = loggable(v);
    // go-plugin's host reads @level, @message, @timestamp and @module with unchecked string casts:
    // a field of another type under such a name (the last key wins) would panic the Nomad agent.
    const nk = k.startsWith("@") ? `_${k}` : k;
    if (nv !== v || nk !== k) {
      out ??= { ...fields };
      if (nk !== k) delete out[k];
      out[nk] = nv;
    }
  }
  return out ?? fields;
}

/**
 * {@link normaliseFields}, or, when reading the fields throws (a getter that throws, a revoked
 * proxy), a field saying so: a log call never throws.
 */
function safeFields(fields: LogFields): LogFields {
  try {
    return normaliseFields(fields);
  } catch (err) {
    let why: string;
    try {
      why = err instanceof Error ? err.message : String(err);
    } catch {
      why = "unreadable error";
    }
    return { log_error: `fields not written: ${why}` };
  }
}

export function envLevel(): LogLevel | undefined {
  const v = process.env.NOMADKIT_LOG_LEVEL?.toLowerCase();
  return v && (LEVELS as readonly string[]).includes(v)
    ? (v as LogLevel)
    : undefined;
}

/**
 * One log call's message and fields, from either argument order: hclog's `(message, fields?)` or
 * pino's `(fields, message?)`; an `Error` in either place is logged as `{ error }`.
 */
function logArgs(
  a: unknown,
  b: unknown,
): { message: string; fields: LogFields | undefined } {
  if (typeof a === "string") {
    const fields =
      b !== null && typeof b === "object"
        ? b instanceof Error
          ? { error: b }
          : (b as LogFields)
        : undefined;
    return { message: a, fields };
  }
  const message =
    typeof b === "string" ? b : a instanceof Error ? a.message : "";
  const fields =
    a instanceof Error
      ? { error: a }
      : a !== null && typeof a === "object"
        ? (a as LogFields)
        : undefined;
  return { message, fields };
}

/**
 * What every hclog logger here shares: both argument orders, fields made JSON-safe, `named` and
 * `with`. A subclass says whether a level is written and writes one line.
 */
export abstract class HclogLoggerBase implements Logger {
  constructor(
    protected readonly module: string,
    protected readonly fields: LogFields,
  ) {}

  abstract readonly level: LogLevel;
  abstract isLevelEnabled(level: LogLevel): boolean;
  /** Writes one line at an enabled `level`; `fields` already JSON-safe. */
  protected abstract write(
    level: LogLevel,
    message: string,
    fields: LogFields | undefined,
  ): void;
  /** A logger like this one with another `@module` and bound fields. */
  protected abstract derive(module: string, fields: LogFields): Logger;

  private log(level: LogLevel, a: unknown, b: unknown): void {
    if (!this.isLevelEnabled(level)) return;
    const { message, fields } = logArgs(a, b);
    this.write(level, message, fields && safeFields(fields));
  }

  readonly trace: LogMethod = (a: unknown, b?: unknown) =>
    this.log("trace", a, b);
  readonly debug: LogMethod = (a: unknown, b?: unknown) =>
    this.log("debug", a, b);
  readonly info: LogMethod = (a: unknown, b?: unknown) =>
    this.log("info", a, b);
  readonly warn: LogMethod = (a: unknown, b?: unknown) =>
    this.log("warn", a, b);
  readonly error: LogMethod = (a: unknown, b?: unknown) =>
    this.log("error", a, b);

  named(name: string): Logger {
    return this.derive(
      this.module ? `${this.module}.${name}` : name,
      this.fields,
    );
  }

  with(fields: LogFields): Logger {
    return this.derive(this.module, {
      ...this.fields,
      ...safeFields(fields),
    });
  }
}
