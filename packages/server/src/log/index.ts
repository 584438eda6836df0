/**
 * hclog-compatible structured logging on stderr, built on pino.
 *
 * go-plugin hosts (Nomad) read a plugin's stderr line by line; JSON lines carrying `@level`,
 * `@message` and `@timestamp` become structured entries in the host's own log, with every other key
 * kept as a field. This module produces exactly that shape.
 * @module
 */
import pino from "pino";

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

/** Options for {@link createLogger}. */
export interface LoggerOptions {
  /** `@module` of the root logger (hclog `Name`). Omitted from lines when empty. */
  name?: string;
  /**
   * Lowest level written. Defaults to `NOMADKIT_LOG_LEVEL`, else `trace`: like go-plugin's own
   * default logger, the plugin emits everything and the host filters by its own level.
   */
  level?: LogLevel;
  /**
   * Where lines go (a pino destination fits). Defaults to a synchronous writer on file descriptor 2
   * (stderr). Structural, so the public types do not depend on pino's.
   */
  destination?: {
    /** Receives one complete JSON line (with its newline) per log call; should write synchronously. */
    write(line: string): unknown;
  };
}

const LEVELS: readonly LogLevel[] = ["trace", "debug", "info", "warn", "error"];

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
function nowMs(): number {
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

function normaliseFields(fields: LogFields): LogFields {
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

function envLevel(): LogLevel | undefined {
  const v = process.env.NOMADKIT_LOG_LEVEL?.toLowerCase();
  return v && (LEVELS as readonly string[]).includes(v)
    ? (v as LogLevel)
    : undefined;
}

// Sub-loggers are always children of the root pino logger carrying all their bindings: pino
// concatenates bindings of nested children, which would repeat `@module` in one line.
class HclogLogger implements Logger {
  private readonly p: pino.Logger;

  constructor(
    private readonly root: pino.Logger,
    private readonly module: string,
    private readonly fields: LogFields,
  ) {
    const bindings = module ? { "@module": module, ...fields } : fields;
    this.p = Object.keys(bindings).length > 0 ? root.child(bindings) : root;
  }

  get level(): LogLevel {
    return this.p.level as LogLevel;
  }

  isLevelEnabled(level: LogLevel): boolean {
    return this.p.isLevelEnabled(level);
  }

  private log(level: LogLevel, a: unknown, b: unknown): void {
    if (!this.p.isLevelEnabled(level)) return;
    let message: string;
    let fields: LogFields | undefined;
    if (typeof a === "string") {
      message = a;
      if (b !== null && typeof b === "object")
        fields = b instanceof Error ? { error: b } : (b as LogFields);
    } else {
      message = typeof b === "string" ? b : a instanceof Error ? a.message : "";
      if (a instanceof Error) fields = { error: a };
      else if (a !== null && typeof a === "object") fields = a as LogFields;
    }
    if (fields) this.p[level](normaliseFields(fields), message);
    else this.p[level](message);
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
    const module = this.module ? `${this.module}.${name}` : name;
    return new HclogLogger(this.root, module, this.fields);
  }

  with(fields: LogFields): Logger {
    return new HclogLogger(this.root, this.module, {
      ...this.fields,
      ...normaliseFields(fields),
    });
  }
}

/**
 * Creates an hclog-compatible JSON logger writing to stderr.
 *
 * Lines look like
 * `{"@level":"info","@timestamp":"2025-01-02T15:04:05.123456+01:00","@module":"my-driver","task_id":"t1","@message":"started"}`.
 *
 * @example
 * ```ts
 * import { createLogger } from "@nomadkit/server";
 * const log = createLogger({ name: "my-driver" });
 * log.info("task started", { task_id: "t1" });
 * log.named("fingerprint").debug("sent fingerprint");
 * ```
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  const level = options.level ?? envLevel() ?? "trace";
  const destination = (options.destination ??
    pino.destination({ fd: 2, sync: true })) as pino.DestinationStream;
  const name = options.name ?? "";
  const p = pino(
    {
      level,
      base: null,
      messageKey: "@message",
      timestamp: () => `,"@timestamp":"${formatHclogTimestamp(nowMs())}"`,
      formatters: {
        level: (label) => ({ "@level": label }),
      },
    },
    destination,
  );
  return new HclogLogger(p, name, {});
}
