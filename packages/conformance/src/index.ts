/**
 * `@nomadkit/conformance`: a lifecycle suite that drives any Nomad task-driver plugin binary (Go
 * or TypeScript) exactly as Nomad does and reports what conforms.
 *
 * @example
 * ```ts
 * import { formatReport, runConformance } from "@nomadkit/conformance";
 * const report = await runConformance({ plugin: "/opt/nomad/plugins/nomadkit-rawexec" });
 * console.log(formatReport(report));
 * ```
 * @module
 */
export { runConformance, listChecks } from "./runner.js";
export { formatHeader, formatReport, formatResult, formatSummary } from "./report.js";
export type { FormatOptions } from "./report.js";
export { shapeConfig, encodeConfig, configProblems, encodeCheckedConfig, ConfigRefusedError } from "./config.js";
export { runExecStream } from "./exec.js";
export type { ExecOutcome, ExecRequest } from "./exec.js";
export { DEFAULT_MEMORY_MB, defaultTaskConfig } from "./suite.js";
export type { CheckInfo, CheckResult, CheckStatus, ConformanceOptions, ConformanceReport } from "./types.js";
