/** Whether a process id is in use, for the executor and the exec FIFOs (no dependencies). */
import { readFileSync } from "node:fs";

/**
 * True while any process has this pid, a zombie included (it still holds the pid).
 *
 * @example
 * ```ts
 * if (!pidExists(pid)) console.log("the pid is free");
 * ```
 */
export function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * True while a process with this pid exists and is not a zombie (for drivers' recover paths).
 *
 * @example
 * ```ts
 * import { decodeExecutorState, isProcessAlive } from "@nomadkit/server/executor";
 * const { executor } = decodeExecutorState(handle.driverState);
 * if (!isProcessAlive(executor.pid)) throw new Error("executor is gone; let Nomad restart the task");
 * ```
 */
export function isProcessAlive(pid: number): boolean {
  if (!pidExists(pid)) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return true; // no procfs: trust kill(0)
  }
}
