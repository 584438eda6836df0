import { CHECKS } from "./checks.js";
import type { CheckResult, ConformanceReport } from "./types.js";
import { formatMs } from "./util.js";

/** Options of {@link formatReport}. */
export interface FormatOptions {
  /** Colour PASS/FAIL/SKIP with ANSI escapes (for terminals). Default false. */
  color?: boolean;
  /** Wrap messages at this width; default 100. */
  width?: number;
}

const COLORS = { pass: "\x1b[32m", fail: "\x1b[31m", skip: "\x1b[33m" } as const;

/** Width of the CHECK column: the longest check name. */
export const NAME_WIDTH = Math.max(...CHECKS.map((c) => c.name.length));

/**
 * The table header matching {@link formatResult} rows.
 *
 * @example
 * ```ts
 * console.log(formatHeader());
 * await runConformance({ plugin, onResult: (r) => console.log(formatResult(r)) });
 * ```
 */
export function formatHeader(): string {
  return `${"CHECK".padEnd(NAME_WIDTH)}  STATUS     TIME  MESSAGE`;
}

/**
 * The closing line of a report: counts, total time and the verdict.
 *
 * @example
 * ```ts
 * console.log(formatSummary(report)); // "31 checks: 30 passed, 0 failed, 1 skipped in 24.1s — CONFORMS"
 * ```
 */
export function formatSummary(report: ConformanceReport): string {
  return (
    `${report.results.length} checks: ${report.passed} passed, ${report.failed} failed, ${report.skipped} skipped ` +
    `in ${formatMs(report.durationMs)} — ${report.interrupted ? "INTERRUPTED" : report.ok ? "CONFORMS" : "DOES NOT CONFORM"}`
  );
}

/**
 * One table row for a result: check, status, duration, message.
 *
 * @example
 * ```ts
 * await runConformance({ plugin, onResult: (r) => console.log(formatResult(r, { color: true })) });
 * ```
 */
export function formatResult(r: CheckResult, options: FormatOptions = {}, nameWidth = NAME_WIDTH): string {
  const status = r.status.toUpperCase().padEnd(4);
  const st = options.color ? `${COLORS[r.status]}${status}\x1b[0m` : status;
  return `${r.name.padEnd(nameWidth)}  ${st}  ${formatMs(r.durationMs).padStart(7)}  ${r.message}`;
}

/**
 * Renders a report as a plain-text table (check, PASS/FAIL/SKIP, duration, message) with a
 * summary line.
 *
 * @example
 * ```ts
 * console.log(formatReport(await runConformance({ plugin: "./bin/my-driver" }), { color: process.stdout.isTTY }));
 * ```
 */
export function formatReport(report: ConformanceReport, options: FormatOptions = {}): string {
  const lines = [
    `Conformance of ${report.plugin}`,
    "",
    formatHeader(),
    ...report.results.map((r) => formatResult(r, options)),
    "",
    formatSummary(report),
  ];
  return lines.join("\n");
}
