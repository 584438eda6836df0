import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { ExecTaskStreamingRequest, ExecTaskStreamingResponseSchema } from "@nomadkit/protocol/driver";
import type { TaskProcess } from "./process.js";

/**
 * Executor.ExecStreaming for a task: runs the exec protocol (setup, stdin, resize, output, exit)
 * with the command spawned in the task's context.
 */
export async function* execStreamingInTask(
  _task: TaskProcess,
  _requests: AsyncIterable<ExecTaskStreamingRequest>,
  _context: HandlerContext,
): AsyncIterable<MessageInitShape<typeof ExecTaskStreamingResponseSchema>> {
  throw new ConnectError("exec_streaming: not implemented yet", Code.Unimplemented);
}
