import { StringDecoder } from "node:string_decoder";

/** hclog levels as a host sees them. */
export type PluginLogLevel = "trace" | "debug" | "info" | "warn" | "error";

/** One line of a plugin's stderr, parsed the way go-plugin does. */
export interface PluginLogEntry {
  /** `@level` of a JSON line (`warning` → `warn`, unknown → `info`), the `[LEVEL]` prefix of a text line, else `debug`. */
  level: PluginLogLevel;
  /** `@message`, or the text after the `[LEVEL]` prefix, or the whole line. */
  message: string;
  /** `@timestamp` as sent (hclog format), when the line was JSON. */
  timestamp?: string;
  /** `@module`, when present. */
  module?: string;
  /** Every non-`@` key of a JSON line. */
  fields: Record<string, unknown>;
  /** Whether the line was an hclog JSON line (false: plain text, logged at debug). */
  structured: boolean;
  /** The line as read. */
  raw: string;
}

/** Receives the plugin's log lines. */
export type PluginLogger = (entry: PluginLogEntry) => void;

const LEVELS: Record<string, PluginLogLevel> = {
  trace: "trace",
  debug: "debug",
  info: "info",
  warn: "warn",
  warning: "warn",
  error: "error",
};

/**
 * Parses one stderr line: hclog JSON (`@level`, `@message`, `@timestamp`, `@module`, fields), a
 * `[LEVEL] text` line, or plain text (debug), mirroring go-plugin's host.
 *
 * @example
 * ```ts
 * parseLogLine('{"@level":"info","@message":"started","@module":"drv","task_id":"t1"}');
 * // { level: "info", message: "started", module: "drv", fields: { task_id: "t1" }, structured: true, ... }
 * ```
 */
export function parseLogLine(raw: string): PluginLogEntry {
  const line = raw.replace(/\r$/, "");
  if (line.startsWith("{")) {
    try {
      const obj = JSON.parse(line) as Record<string, unknown>;
      if (obj && typeof obj === "object" && "@message" in obj) {
        const fields: Record<string, unknown> = {};
        for (const [k, v] of Object.entries(obj))
          if (!k.startsWith("@")) fields[k] = v;
        return {
          level: LEVELS[String(obj["@level"]).toLowerCase()] ?? "info",
          message: String(obj["@message"]),
          timestamp:
            typeof obj["@timestamp"] === "string"
              ? obj["@timestamp"]
              : undefined,
          module:
            typeof obj["@module"] === "string" ? obj["@module"] : undefined,
          fields,
          structured: true,
          raw: line,
        };
      }
    } catch {
      // not JSON after all: plain text below
    }
  }
  const m = /^\[(TRACE|DEBUG|INFO|WARN|ERROR)\]\s?(.*)$/.exec(line);
  if (m)
    return {
      level: LEVELS[m[1]!.toLowerCase()]!,
      message: m[2]!,
      fields: {},
      structured: false,
      raw: line,
    };
  return {
    level: "debug",
    message: line,
    fields: {},
    structured: false,
    raw: line,
  };
}

/** Longer lines are passed on in pieces of this size, like go-plugin's 64 KiB stderr buffer. */
const MAX_LINE = 64 * 1024;

/**
 * Splits a plugin's output (byte chunks as a pipe delivers them) into lines, as go-plugin's host
 * reads a plugin's stderr: UTF-8 decoded across chunk boundaries, a trailing `\r` dropped, and a line
 * longer than 64 KiB passed on in pieces. Keeps the last few lines for error messages.
 *
 * @example
 * ```ts
 * import { LineReader, parseLogLine } from "@nomadkit/client";
 * const lines = new LineReader((line) => console.log(parseLogLine(line).message));
 * child.stderr.on("data", (chunk: Buffer) => lines.push(chunk));
 * child.stderr.once("end", () => lines.end());
 * ```
 */
export class LineReader {
  private partial = "";
  private readonly tail: string[] = [];
  private readonly decoder = new StringDecoder("utf8");

  constructor(
    /** Called with each line, without its line break. */
    private readonly onLine: (line: string) => void,
    /** How many of the last lines {@link LineReader.recent} returns. */
    private readonly keep = 20,
  ) {}

  /** Takes the next chunk of output; calls `onLine` for each line it completes. */
  push(chunk: Buffer | string): void {
    // Only the new text is searched, and a pending line never grows past MAX_LINE: linear in
    // what the plugin writes, however long its lines (re-splitting the whole pending line on
    // every chunk was quadratic: 16 MiB without a newline blocked the host for half a minute).
    const text = typeof chunk === "string" ? chunk : this.decoder.write(chunk);
    let start = 0;
    for (let nl = text.indexOf("\n"); nl >= 0; nl = text.indexOf("\n", start)) {
      this.emit(this.partial + text.slice(start, nl));
      this.partial = "";
      start = nl + 1;
    }
    this.partial += text.slice(start);
    while (this.partial.length > MAX_LINE) {
      this.emit(this.partial.slice(0, MAX_LINE));
      this.partial = this.partial.slice(MAX_LINE);
    }
  }

  /** The output has ended: passes on a last line that had no line break. */
  end(): void {
    this.partial += this.decoder.end();
    if (this.partial) this.emit(this.partial);
    this.partial = "";
  }

  /** The last lines seen (including a pending partial one), joined by newlines. */
  recent(): string {
    const lines = this.partial ? [...this.tail, this.partial] : this.tail;
    return lines.slice(-this.keep).join("\n");
  }

  private emit(line: string): void {
    const l = line.replace(/\r$/, "");
    this.tail.push(l.length > 1000 ? l.slice(0, 1000) + "…" : l);
    if (this.tail.length > this.keep) this.tail.shift();
    this.onLine(l);
  }
}
