import type { ExecutorClient } from "@nomadkit/client";
import type { ExecTaskStream } from "../exec/session.js";
import type { ExecutorHandle } from "./launch.js";

/**
 * Forwards a driver's ExecTaskStreaming call to the task's executor (Executor.ExecStreaming),
 * message for message: requests (setup, stdin, resizes, heartbeats) go through untranslated, and
 * every response (output chunks, close markers, the final `exited`) is sent back as received.
 * Each response is handed on before the next is pulled, so Nomad's flow control reaches the
 * executor's process. Use it as a driver's raw exec handler.
 *
 * @example
 * ```ts
 * import { forwardExecStream } from "@nomadkit/server/executor";
 * // in the driver definition (raw exec form):
 * execTaskStreamingRaw: (stream) => forwardExecStream(stream, executors.get(stream.taskId)!),
 * ```
 */
export async function forwardExecStream(stream: ExecTaskStream, executor: ExecutorClient | ExecutorHandle): Promise<void> {
  const client = "client" in executor ? executor.client : executor;
  for await (const response of client.execStreaming(stream.withSetup(), { signal: stream.signal })) {
    await stream.send(response);
  }
}
