/**
 * The hclog lines of a bundled plugin's load launch, written without pino: the same JSON lines
 * `createLogger` writes, made with `JSON.stringify` and written synchronously to stderr.
 * The launcher's fast path (goplugin/prelude.ts) serves a few recorded calls and exits, writing a
 * line or two; loading pino took ~5 ms of that process's ~40 ms of its own (BENCHMARKS.md). Once
 * the plugin itself loads, its servePlugin gives the transport the pino logger.
 * @module
 */
import { writeSync } from "node:fs";
import {
  envLevel,
  formatHclogTimestamp,
  HclogLoggerBase,
  LEVELS,
  nowMs,
  type LogFields,
  type Logger,
  type LogLevel,
} from "./hclog.js";

/** Options for {@link createLineLogger}. */
export interface LineLoggerOptions {
  /** `@module` of the root logger, as createLogger's `name`. */
  name?: string;
  /** Lowest level written: defaults as createLogger's (`NOMADKIT_LOG_LEVEL`, else `trace`). */
  level?: LogLevel;
  /** Receives each line with its newline; defaults to a synchronous write to file descriptor 2. */
  write?: (line: string) => void;
}

/**
 * A logger writing hclog JSON lines as createLogger's does, without loading pino.
 * @internal
 */
export function createLineLogger(options: LineLoggerOptions = {}): Logger {
  return new LineLogger(
    options.level ?? envLevel() ?? "trace",
    options.write ?? writeStderr,
    options.name ?? "",
    {},
  );
}

function writeStderr(line: string): void {
  try {
    writeSync(2, line);
  } catch {
    // stderr gone (the host stopped reading): nothing to tell anyone
  }
}

class LineLogger extends HclogLoggerBase {
  constructor(
    readonly level: LogLevel,
    private readonly out: (line: string) => void,
    module: string,
    fields: LogFields,
  ) {
    super(module, fields);
  }

  isLevelEnabled(level: LogLevel): boolean {
    return LEVELS.indexOf(level) >= LEVELS.indexOf(this.level);
  }

  protected write(
    level: LogLevel,
    message: string,
    fields: LogFields | undefined,
  ): void {
    // pino's order: level, time, the logger's bindings, the call's fields, the message.
    const head = {
      "@level": level,
      "@timestamp": formatHclogTimestamp(nowMs()),
      ...(this.module ? { "@module": this.module } : {}),
    };
    let line: string;
    try {
      line = JSON.stringify({ ...head, ...this.fields, ...fields, "@message": message });
    } catch (err) {
      // A cycle, or a toJSON that throws (in the call's fields or those bound with `with`): the
      // line without any of them, and why; a log call never throws.
      line = JSON.stringify({
        ...head,
        log_error: `fields not written: ${(err as Error).message}`,
        "@message": message,
      });
    }
    this.out(line + "\n");
  }

  protected derive(module: string, fields: LogFields): Logger {
    return new LineLogger(this.level, this.out, module, fields);
  }
}
