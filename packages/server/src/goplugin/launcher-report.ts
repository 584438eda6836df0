/**
 * What a bundled plugin's launcher (`nomadkit bundle`, see @nomadkit/cli's bundle/launcher.ts)
 * tells the plugin it starts, for the plugin's own log: files of the bundle directory it did not
 * use because they are from another build, and the task executor files it points launchExecutor
 * at, with the SHA-256 each had when bundled. An upgrade that copies only some of the directory's
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
  /** The bundled task executor's files (absolute path → SHA-256, hex, when bundled). */
  executorFiles?: Record<string, string>;
}

/**
 * Logs the launcher's warnings with `logger` and checks, in the background, that the task
 * executor files are those bundled with the plugin (a warning names those that are not). Once per
 * process: the report is taken.
 */
export function logLauncherReport(logger: Logger): void {
  const g = globalThis as { [LAUNCHER_REPORT]?: unknown };
  const report = g[LAUNCHER_REPORT] as LauncherReport | undefined;
  delete g[LAUNCHER_REPORT];
  if (typeof report !== "object" || report === null) return;
  if (Array.isArray(report.warnings))
    for (const w of report.warnings) if (typeof w === "string") logger.warn(w);
  const files = report.executorFiles;
  if (typeof files === "object" && files !== null) {
    checkExecutorFiles(files, logger).catch((err: unknown) =>
      logger.debug("cannot check the bundled task executor's files", {
        error: err instanceof Error ? err.message : String(err),
      }),
    );
  }
}

/**
 * Warns when an executor file differs from the one bundled with the plugin, or is missing. Only a
 * warning: tasks still start (under an executor that may lack this build's fixes), where refusing
 * would fail every new task of a plugin that must keep running, for files only the operator can fix.
 */
async function checkExecutorFiles(
  files: Record<string, string>,
  logger: Logger,
): Promise<void> {
  const [{ readFile }, { createHash }] = await Promise.all([
    import("node:fs/promises"),
    import("node:crypto"),
  ]);
  const differ: string[] = [];
  const missing: string[] = [];
  await Promise.all(
    Object.entries(files).map(async ([file, sha256]) => {
      let bytes: Buffer;
      try {
        bytes = await readFile(file);
      } catch {
        missing.push(file);
        return;
      }
      if (createHash("sha256").update(bytes).digest("hex") !== sha256)
        differ.push(file);
    }),
  );
  if (differ.length === 0 && missing.length === 0) {
    logger.debug("the task executor files are those bundled with this plugin", {
      files: Object.keys(files).length,
    });
    return;
  }
  logger.warn(
    "the task executor files next to the plugin's launcher are not those `nomadkit bundle` wrote with this plugin (an install or upgrade that copied only some of the bundle's files?): new tasks run under an executor of another build, or none; install the whole bundle directory, every file of it from the same `nomadkit bundle`",
    { differ: differ.sort(), missing: missing.sort() },
  );
}
