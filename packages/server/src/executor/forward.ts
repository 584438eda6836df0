import type { ExecutorClient } from "@nomadkit/client";
import { rawBidiStream } from "@nomadkit/client/runtime";
import { ExecTaskStreamingResponseSchema } from "@nomadkit/protocol/driver";
import { Executor } from "@nomadkit/protocol/executor";
import type { ExecTaskStream } from "../exec/session.js";
import { messageFromFrame } from "../runtime/wire-frame.js";
import type { ExecutorHandle } from "./launch.js";

/**
 * Forwards a driver's ExecTaskStreaming call to the task's executor (Executor.ExecStreaming),
 * message for message: requests (setup, stdin, resizes, heartbeats) go through untranslated, and
 * every response (output chunks, close markers, the final `exited`) is sent back as received.
 * Each response is handed on before the next is pulled, so Nomad's flow control reaches the
 * executor's process. Use it as a driver's raw exec handler.
 *
 * With an {@link ExecutorHandle}, responses are relayed as the bytes the executor sent (never
 * decoded, re-encoded or copied); with a bare `ExecutorClient` they are decoded and re-encoded.
 *
 * @example
 * ```ts
 * import { forwardExecStream } from "@nomadkit/server/executor";
 * // in the driver definition (raw exec form):
 * execTaskStreamingRaw: (stream) => forwardExecStream(stream, executors.get(stream.taskId)!),
 * ```
 */
export async function forwardExecStream(stream: ExecTaskStream, executor: ExecutorClient | ExecutorHandle): Promise<void> {
  if ("plugin" in executor) {
    const frames = rawBidiStream(executor.plugin.runtime, Executor.method.execStreaming, stream.withSetup(), { signal: stream.signal });
    if (frames !== undefined) {
      for await (const frame of frames) await stream.send(messageFromFrame(ExecTaskStreamingResponseSchema, frame));
      return;
    }
  }
  const client = "client" in executor ? executor.client : executor;
  for await (const response of client.execStreaming(stream.withSetup(), { signal: stream.signal })) {
    await stream.send(response);
  }
}
