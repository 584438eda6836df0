/**
 * The exec output handoff between a driver plugin and its task executor (both nomadkit): the
 * executor starts the command, but the command's stdout and stderr are FIFOs the plugin reads, so
 * the output crosses one process and one HTTP/2 connection (plugin → Nomad) instead of two
 * (executor → plugin → Nomad). Everything else (setup, stdin, the exit, errors) still travels as
 * Executor.ExecStreaming messages.
 *
 * 1. The plugin opens a pair of FIFOs for reading (output-pipes.ts, in its private directory) and
 *    calls ExecStreaming with their directory in the `nomadkit-exec-output` request header.
 * 2. The executor opens both for writing before it looks at the command, and gives them to the
 *    process as its stdout and stderr. An executor that cannot (a tty; paths it cannot open, or
 *    that are not FIFOs) sends the output as messages; one without the header does not know of any
 *    of this.
 * 3. The plugin forwards whatever comes either way. When the exit arrives the executor has long
 *    opened (or declined) the FIFOs, so the plugin lets go of its own write ends and reports the
 *    exit once both reached EOF: every process holding the output has let go of it.
 *
 * Cancelling the session kills the command's process group while it runs (the executor's call is
 * cancelled with it); after it exited, a process it left behind holding the output only loses its
 * reader (EPIPE), as with any pipe whose reader went away.
 */
import { closeSync, constants, fstatSync, lstatSync, openSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { OUTPUT_PIPE_NAMES } from "./output-pipes.js";

/** Request header naming the directory of the session's FIFOs (URI-encoded). */
export const OUTPUT_HANDOFF_HEADER = "nomadkit-exec-output";

/** Write ends of a session's output FIFOs, as the executor opened them: file descriptors. */
export interface HandedOutputs {
  /** Becomes the process's stdout. */
  stdout: number;
  /** Becomes the process's stderr. */
  stderr: number;
}

/**
 * The {@link OUTPUT_HANDOFF_HEADER} value for FIFOs in `dir` (see `openOutputPipes`).
 *
 * @example
 * ```ts
 * const headers = { [OUTPUT_HANDOFF_HEADER]: outputHandoffHeader(pipes.dir) };
 * ```
 */
export function outputHandoffHeader(dir: string): string {
  return encodeURIComponent(dir);
}

/**
 * The executor's side: open the FIFOs an {@link OUTPUT_HANDOFF_HEADER} value names, for writing.
 * Undefined if it names no absolute directory, a name there is not a FIFO (or a symlink), or nobody
 * reads them: the output then goes as messages.
 *
 * @example
 * ```ts
 * const value = context.requestHeader.get(OUTPUT_HANDOFF_HEADER);
 * const outputs = value === null ? undefined : openHandedOutputs(value);
 * await runExecCommand({ command, outputs }, session); // closes them once the process has them
 * ```
 */
export function openHandedOutputs(header: string): HandedOutputs | undefined {
  let dir: string;
  try {
    dir = decodeURIComponent(header);
  } catch {
    return undefined;
  }
  if (!isAbsolute(dir)) return undefined;
  const fds: number[] = [];
  try {
    for (const name of OUTPUT_PIPE_NAMES) {
      const path = join(dir, name);
      // Anything but a FIFO (a regular file, a device) is never opened, let alone written.
      if (!lstatSync(path).isFIFO()) return undefined;
      // Non-blocking: ENXIO at once if the plugin is not reading (it gave up), never a hang.
      fds.push(openSync(path, constants.O_WRONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW | constants.O_NOCTTY));
      // Swapped since the check: still nothing but a FIFO.
      if (!fstatSync(fds.at(-1)!).isFIFO()) return undefined;
    }
    const outputs = { stdout: fds[0]!, stderr: fds[1]! };
    fds.length = 0;
    return outputs;
  } catch {
    return undefined;
  } finally {
    for (const fd of fds) closeSync(fd);
  }
}

/**
 * Close handed outputs that will not be given to a process (`runExecCommand` closes those it takes).
 *
 * @example
 * ```ts
 * const outputs = openHandedOutputs(value);
 * if (outputs !== undefined && session.tty) closeHandedOutputs(outputs); // a terminal has no use for them
 * ```
 */
export function closeHandedOutputs(outputs: HandedOutputs): void {
  for (const fd of [outputs.stdout, outputs.stderr]) {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
  }
}
