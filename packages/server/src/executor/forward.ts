import type { Writable } from "node:stream";
import type { ExecutorClient } from "@nomadkit/client";
import { PLUGIN_STREAM_WINDOW, rawBidiStream } from "@nomadkit/client/runtime";
import { ExecTaskStreamingResponseSchema } from "@nomadkit/protocol/driver";
import { Executor } from "@nomadkit/protocol/executor";
import { OUTPUT_HANDOFF_HEADER, outputHandoffHeader } from "../exec/handoff.js";
import { openOutputPipes, type OutputPipes } from "../exec/output-pipes.js";
import { serveExecSession, type ExecResult, type ExecSession, type ExecTaskStream } from "../exec/session.js";
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
 * Serves a driver's ExecTaskStreaming call with the task's executor (Executor.ExecStreaming).
 *
 * Without a terminal, and with an {@link ExecutorHandle} (a nomadkit executor on this machine), the
 * command's output takes the output handoff (exec/handoff.ts): the executor starts the command
 * with its stdout and stderr connected to FIFOs this process reads, so the output crosses one
 * process instead of two; stdin, the exit and errors still travel as ExecStreaming messages. This
 * process then speaks the exec protocol itself (chunking, close markers, the exit after all output).
 *
 * Otherwise (a tty, an executor that does not take handoffs) requests and responses are forwarded
 * message for message: with an {@link ExecutorHandle} as the bytes the executor sent (never
 * decoded, re-encoded or copied), with a bare `ExecutorClient` decoded and re-encoded; a scavenge
 * runs after every few MiB, so the buffers Node's HTTP/2 read them into are freed while the relay
 * goes on (see young-generation.ts). Each response is handed on before the next is pulled, so
 * Nomad's flow control reaches the executor's process. Use it as a driver's raw exec handler.
 *
 * @example
 * ```ts
 * import { forwardExecStream } from "@nomadkit/server/executor";
 * // in the driver definition (raw exec form):
 * execTaskStreamingRaw: (stream) => forwardExecStream(stream, executors.get(stream.taskId)!),
 * ```
 */
export async function forwardExecStream(stream: ExecTaskStream, executor: ExecutorClient | ExecutorHandle): Promise<void> {
  if ("plugin" in executor && !stream.tty && process.platform !== "win32") {
    return serveExecSession(stream, (session) => execWithHandoff(executor, session));
  }
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

/**
 * One non-tty session run by the executor, its output read here from the handoff FIFOs (or, if
 * the executor declines or none could be made, from its messages).
 */
async function execWithHandoff(executor: ExecutorHandle, session: ExecSession): Promise<ExecResult> {
  let pipes: OutputPipes | undefined;
  try {
    // Not ended at EOF: the session ends them after the exit, whichever way the output came.
    pipes = await openOutputPipes(session.stdout, session.stderr, { end: false });
  } catch {
    // No mkfifo here: the output comes as messages.
  }
  const requests = async function* () {
    yield { setup: { taskId: session.taskId, command: [...session.command], tty: false } };
    for await (const data of session.stdin) yield { stdin: { data: data as Uint8Array } };
    yield { stdin: { close: true } };
  };
  const headers = pipes === undefined ? undefined : { [OUTPUT_HANDOFF_HEADER]: outputHandoffHeader(pipes.dir) };
  // Cancelled while a leftover process still holds the output: stop reading (it gets EPIPE).
  const onAbort = () => pipes?.close();
  session.signal.addEventListener("abort", onAbort, { once: true });
  let done = false;
  try {
    let result: ExecResult | undefined;
    for await (const res of executor.client.execStreaming(requests(), { signal: session.signal, headers })) {
      // Output as messages: the executor did not take the FIFOs.
      if (res.stdout !== undefined && res.stdout.data.byteLength > 0) await write(session.stdout, res.stdout.data);
      if (res.stderr !== undefined && res.stderr.data.byteLength > 0) await write(session.stderr, res.stderr.data);
      if (res.exited) result = { exitCode: res.result?.exitCode ?? 0, signal: res.result?.signal ?? 0, oomKilled: res.result?.oomKilled ?? false };
    }
    if (result === undefined) throw new Error("the executor ended ExecStreaming without an exit result");
    // The executor opened the FIFOs (or declined) before the process started, and the process has
    // exited: the output ends when the last process holding it lets go.
    pipes?.closeWriters();
    await pipes?.eof;
    done = true;
    return result;
  } finally {
    session.signal.removeEventListener("abort", onAbort);
    // After an exit the executor will not open them again; after anything else it might still.
    pipes?.close(done);
  }
}

/** Write with backpressure: resolves once `w` takes more. */
function write(w: Writable, data: Uint8Array): Promise<void> {
  return w.write(data) ? Promise.resolve() : new Promise((resolve) => w.once("drain", resolve));
}
