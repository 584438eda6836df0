/**
 * A spawn that found no free file descriptor (EMFILE, ENFILE): Node then makes neither the process
 * nor its stdio, and reports the failure as an "error" event on the next tick, which crashes a
 * process where nobody listens. Callers that read the child's stdio at once check here first.
 */
import type { ChildProcess } from "node:child_process";
import { Code, ConnectError } from "@connectrpc/connect";

/**
 * Throws ResourceExhausted naming `file` for a child Node could not even set up (its later "error"
 * event is then taken care of); returns it otherwise, including one whose failure (ENOENT, EACCES)
 * comes as an "error" event with stdio in place.
 */
export function assertSpawned(child: ChildProcess, file: string): ChildProcess {
  if (child.pid !== undefined || child.stdio != null) return child;
  child.once("error", () => undefined);
  throw new ConnectError(`cannot start ${JSON.stringify(file)}: no file descriptor left for it (spawn EMFILE or ENFILE)`, Code.ResourceExhausted);
}
