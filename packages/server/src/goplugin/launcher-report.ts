/**
 * What a bundled plugin's launcher (`nomadkit bundle`, see @nomadkit/cli's bundle/launcher.ts)
 * tells the plugin it starts, for the plugin's own log: files of the bundle directory it did not
 * use because they are from another build. An upgrade that copies only some of the directory's
 * files leaves old ones next to new ones; the plugin keeps running and says so.
 * @module
 */
import type { Logger } from "../log/index.js";

/** Where the launcher leaves its {@link LauncherReport} (process-wide: the launcher shares no module with the plugin). */
export const LAUNCHER_REPORT = Symbol.for("@nomadkit/server.launcherReport");

/** What the launcher leaves at {@link LAUNCHER_REPORT}. */
export interface LauncherReport {
  /** Messages for the plugin's log, at warn (e.g. why the load launch's fast path was not used). */
  warnings?: string[];
}

/** Logs the launcher's warnings with `logger`. Once per process: the report is taken. */
export function logLauncherReport(logger: Logger): void {
  const g = globalThis as { [LAUNCHER_REPORT]?: unknown };
  const report = g[LAUNCHER_REPORT] as LauncherReport | undefined;
  delete g[LAUNCHER_REPORT];
  if (typeof report !== "object" || report === null) return;
  if (Array.isArray(report.warnings))
    for (const w of report.warnings) if (typeof w === "string") logger.warn(w);
}
