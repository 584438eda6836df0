/**
 * The `nomadkit` command line as a library: {@link main}, {@link createProgram} and
 * {@link bundlePlugin} (for build scripts). Most users run the `nomadkit` binary instead
 * (`nomadkit --help`).
 *
 * @example
 * ```ts
 * import { main } from "@nomadkit/cli";
 *
 * // Same as `nomadkit capabilities ./my-driver --json`; resolves with the exit status.
 * process.exitCode = await main(["node", "nomadkit", "capabilities", "./my-driver", "--json"]);
 * ```
 * @module
 */
export { createProgram, main } from "./program.js";
export { CliError } from "./errors.js";
export { exitWith, installInterruptHandlers } from "./interrupt.js";
export { bundlePlugin, ALWAYS_EXTERNAL } from "./bundle/bundle.js";
export type { BundleOptions, BundleResult } from "./bundle/bundle.js";
export type { RunState, GlobalOptions } from "./plugin.js";
