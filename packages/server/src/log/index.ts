/**
 * hclog-compatible structured logging on stderr, built on pino.
 *
 * go-plugin hosts (Nomad) read a plugin's stderr line by line; JSON lines carrying `@level`,
 * `@message` and `@timestamp` become structured entries in the host's own log, with every other key
 * kept as a field. This module produces exactly that shape.
 * @module
 */
import pino from "pino";
import { envLevel, formatHclogTimestamp, HclogLoggerBase, nowMs, type LogFields, type Logger, type LogLevel } from "./hclog.js";

export type { LogFields, Logger, LogLevel, LogMethod } from "./hclog.js";
export { formatHclogTimestamp } from "./hclog.js";

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

// Sub-loggers are always children of the root pino logger carrying all their bindings: pino
// concatenates bindings of nested children, which would repeat `@module` in one line.
class HclogLogger extends HclogLoggerBase {
  private readonly p: pino.Logger;

  constructor(
    private readonly root: pino.Logger,
    module: string,
    fields: LogFields,
  ) {
    super(module, fields);
    const bindings = module ? { "@module": module, ...fields } : fields;
    this.p = Object.keys(bindings).length > 0 ? root.child(bindings) : root;
  }

  get level(): LogLevel {
    return this.p.level as LogLevel;
  }

  isLevelEnabled(level: LogLevel): boolean {
    return this.p.isLevelEnabled(level);
  }

  protected write(level: LogLevel, message: string, fields: LogFields | undefined): void {
    if (fields) this.p[level](fields, message);
    else this.p[level](message);
  }

  protected derive(module: string, fields: LogFields): Logger {
    return new HclogLogger(this.root, module, fields);
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
