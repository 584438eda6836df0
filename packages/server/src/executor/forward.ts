import type { ExecutorClient } from "@nomadkit/client";
import { PLUGIN_STREAM_WINDOW, rawBidiStream } from "@nomadkit/client/runtime";
import { ExecTaskStreamingResponseSchema } from "@nomadkit/protocol/driver";
import { Executor } from "@nomadkit/protocol/executor";
import type { ExecTaskStream } from "../exec/session.js";
import { messageFromFrame } from "../runtime/wire-frame.js";
import { scavengeEvery } from "../runtime/young-generation.js";
import type { ExecutorHandle } from "./launch.js";

/**
 * Output relayed between scavenges: a little more than what the relay holds at once (the receive
 * window, the raw stream's queue and the message being sent: 1 MiB each), so that most buffers are
 * dead by the next scavenge instead of being found alive twice and promoted (then only a full
 * collection frees them). Slow-reader bench, driver process: no scavenges 44 MiB peak growth;
 * every 2 MiB 31 (promoted); every 4 MiB 17–19; every 8 MiB 19–23.
 */
const SCAVENGE_INTERVAL = PLUGIN_STREAM_WINDOW + 3 * 1024 * 1024;

/**
 * Forwards a driver's ExecTaskStreaming call to the task's executor (Executor.ExecStreaming),
 * message for message: requests (setup, stdin, resizes, heartbeats) go through untranslated, and
 * every response (output chunks, close markers, the final `exited`) is sent back as received.
 * Each response is handed on before the next is pulled, so Nomad's flow control reaches the
 * executor's process. Use it as a driver's raw exec handler.
 *
 * With an {@link ExecutorHandle}, responses are relayed as the bytes the executor sent (never
 * decoded, re-encoded or copied); with a bare `ExecutorClient` they are decoded and re-encoded.
 * Either way a scavenge runs after every few MiB of output, so the buffers Node's HTTP/2 read
 * them into are freed while the relay goes on (see young-generation.ts).
 *
 * @example
 * ```ts
 * import { forwardExecStream } from "@nomadkit/server/executor";
 * // in the driver definition (raw exec form):
 * execTaskStreamingRaw: (stream) => forwardExecStream(stream, executors.get(stream.taskId)!),
 * ```
 */
export async function forwardExecStream(stream: ExecTaskStream, executor: ExecutorClient | ExecutorHandle): Promise<void> {
  const received = scavengeEvery(SCAVENGE_INTERVAL);
  if ("plugin" in executor) {
    const frames = rawBidiStream(executor.plugin.runtime, Executor.method.execStreaming, stream.withSetup(), { signal: stream.signal });
    if (frames !== undefined) {
      for await (const frame of frames) {
        await stream.send(messageFromFrame(ExecTaskStreamingResponseSchema, frame));
        received(frame.byteLength);
      }
      return;
    }
  }
  const client = "client" in executor ? executor.client : executor;
  for await (const response of client.execStreaming(stream.withSetup(), { signal: stream.signal })) {
    await stream.send(response);
    received((response.stdout?.data.byteLength ?? 0) + (response.stderr?.data.byteLength ?? 0));
  }
}
