// Helpers for the executor tests: reading an exec session's answers; ending what a test left
// running, whatever it did.
import type { ExecTaskStreamingResponse } from "@nomadkit/protocol/driver";
import { isProcessAlive, type ExecutorHandle } from "../src/executor.js";

/** An exec session's output, close markers and exit, read to its end (`onStdout`: stdout so far, after each piece). */
export async function collectExec(responses: AsyncIterable<ExecTaskStreamingResponse>, onStdout?: (text: string) => void) {
  const r = { stdout: "", stderr: "", stdoutClosed: 0, stderrClosed: 0, exited: 0, exitCode: -1 };
  for await (const m of responses) {
    if (m.stdout?.data.length) {
      r.stdout += Buffer.from(m.stdout.data).toString();
      onStdout?.(r.stdout);
    }
    if (m.stderr?.data.length) r.stderr += Buffer.from(m.stderr.data).toString();
    if (m.stdout?.close) r.stdoutClosed++;
    if (m.stderr?.close) r.stderrClosed++;
    if (m.exited) {
      r.exited++;
      r.exitCode = m.result?.exitCode ?? -1;
    }
  }
  return r;
}


/**
 * Ends the executors a test launched or reattached (their task first, SIGKILL, then the executor;
 * one already gone, as an unused executor exits by itself, is only let go) and SIGKILLs the stray
 * pids (tasks that escaped, processes spawned by hand). Empties both lists.
 */
export async function endExecutors(
  handles: ExecutorHandle[],
  stray: number[],
): Promise<void> {
  for (const h of handles.splice(0)) {
    if (isProcessAlive(h.pid)) {
      await h.shutdownTask("SIGKILL", 0).catch(() => undefined);
      await h.kill().catch(() => undefined);
    }
    h.close();
  }
  for (const pid of stray.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      /* gone */
    }
  }
}
