/** Errors a driver throws, with the statuses Nomad expects. */
import { Code, ConnectError } from "@connectrpc/connect";
import { RecoverableError } from "@nomadkit/client/runtime";

export { RecoverableError };

/**
 * A failure Nomad may retry (restart the task): StartTask and TaskStats answer FailedPrecondition
 * with a `RecoverableError{recoverable: true}` detail.
 *
 * @example
 * ```ts
 * throw recoverable("image registry unreachable");
 * ```
 */
export function recoverable(message: string, cause?: unknown): RecoverableError {
  return new RecoverableError(message, true, cause === undefined ? undefined : { cause });
}

/**
 * A failure retrying cannot fix (bad image name, permission denied): FailedPrecondition with
 * `RecoverableError{recoverable: false}`, so Nomad does not restart the task.
 *
 * @example
 * ```ts
 * throw unrecoverable(`image ${name} does not exist`);
 * ```
 */
export function unrecoverable(message: string, cause?: unknown): RecoverableError {
  return new RecoverableError(message, false, cause === undefined ? undefined : { cause });
}

/**
 * NotFound naming the task id, like Go's `drivers.ErrTaskNotFound` ("task not found for given id").
 * The SDK answers it itself for ids it does not know; throw it for tasks that vanished.
 *
 * @example
 * ```ts
 * const proc = procs.get(taskId);
 * if (proc === undefined) throw taskNotFound(taskId);
 * ```
 */
export function taskNotFound(taskId: string): ConnectError {
  return new ConnectError(`task not found for given id: ${JSON.stringify(taskId)}`, Code.NotFound);
}

/**
 * InvalidArgument naming a request field.
 *
 * @example
 * ```ts
 * throw invalidArgument("task.user", `unknown user ${JSON.stringify(user)}`); // "task.user: unknown user ..."
 * ```
 */
export function invalidArgument(field: string, problem: string): ConnectError {
  return new ConnectError(`${field}: ${problem}`, Code.InvalidArgument);
}

/**
 * FailedPrecondition: the task is not in the state the call needs, such as destroying a running
 * task without `force` or signalling one that has exited. (A plain Error answers Unknown.)
 *
 * @example
 * ```ts
 * if (task.exited) throw failedPrecondition(`task ${taskId} has already exited`);
 * ```
 */
export function failedPrecondition(message: string): ConnectError {
  return new ConnectError(message, Code.FailedPrecondition);
}
