import type { HandlerContext } from "@connectrpc/connect";
import type { ExecTaskStreamingRequest, ExecTaskStreamingResponse } from "@nomadkit/protocol/driver";
import { runExecCommand, type ExecCommandOptions } from "../exec/local.js";
import { execStreaming } from "../exec/session.js";
import { commandInContext, lookPath } from "./context.js";
import type { TaskProcess } from "./process.js";

/**
 * Executor.ExecStreaming for a task: the SDK's exec protocol engine (high-level form) with the
 * local command runner (pipes, or node-pty for a tty), the command running in the task's context:
 * its environment, working directory, user and network namespace.
 *
 * @example
 * ```ts
 * import { ExecutorService, execStreamingInTask } from "@nomadkit/server/executor";
 * const service = new ExecutorService({ execStreaming: execStreamingInTask });
 * ```
 */
export function execStreamingInTask(
  task: TaskProcess,
  requests: AsyncIterable<ExecTaskStreamingRequest>,
  context: HandlerContext,
): AsyncIterable<ExecTaskStreamingResponse> {
  return execStreaming(
    requests,
    {
      exec: (session) => {
        const ctx = task.context;
        // Resolve here with the task's PATH: inside nsenter a missing command would only be exit 127.
        const file = lookPath(session.command[0]!, ctx, "setup.command[0]");
        const c = commandInContext(ctx, file, session.command.slice(1));
        const options: ExecCommandOptions = { command: [c.file, ...c.args], tty: session.tty, env: ctx.env, cwd: ctx.cwd };
        if (c.uid !== undefined) options.uid = c.uid;
        if (c.gid !== undefined) options.gid = c.gid;
        return runExecCommand(options, session);
      },
    },
    { signal: context.signal },
  );
}
