/**
 * The `nomadkit` command line as a library: {@link main} and {@link createProgram}.
 * @module
 */
export { createProgram, main } from "./program.js";
export { CliError } from "./errors.js";
export type { RunState, GlobalOptions } from "./plugin.js";
