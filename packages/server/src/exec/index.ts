/**
 * Exec streaming: the protocol engine for `ExecTaskStreaming` in both of Nomad's forms, and a
 * helper that runs a local command (pipes or pty) for the high-level form.
 * @module
 */
export {
  execStreaming,
  serveExecSession,
  toExitResult,
  DEFAULT_EXEC_CHUNK_SIZE,
  type ExecSession,
  type ExecResult,
  type ExecTaskStream,
  type ExecStreamingHandler,
  type ExecStreamingOptions,
} from "./session.js";
export { TerminalResizes, type TerminalSize } from "./resize.js";
export { runExecCommand, type ExecCommandOptions, type ExecIO, type GatedCommand, type PtyGate } from "./local.js";
