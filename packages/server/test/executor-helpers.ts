// Helpers for the executor tests: ending what a test left running, whatever it did.
import { isProcessAlive, type ExecutorHandle } from "../src/executor.js";

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
