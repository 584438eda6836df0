import type { HandlerContext } from "@connectrpc/connect";
import type { ExecTaskStreamingRequest, ExecTaskStreamingResponse } from "@nomadkit/protocol/driver";
import { OUTPUT_HANDOFF_HEADER, type OutputHandoff } from "../exec/handoff.js";
import { runExecCommand, type ExecCommandOptions } from "../exec/local.js";
import { execStreaming } from "../exec/session.js";
import { commandInContext, lookPath } from "./context.js";
import type { TaskProcess } from "./process.js";

/**
 * Executor.ExecStreaming for a task: the SDK's exec protocol engine (high-level form) with the
 * local command runner (pipes, or node-pty for a tty), the command running in the task's context:
 * its environment, working directory, user and network namespace. With `handoff` (the executor's
 * listener) a call naming a handoff token gets its output sockets from there: the process writes
 * into them and the driver plugin reads them (see exec/handoff.ts).
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
  handoff?: OutputHandoff,
): AsyncIterable<ExecTaskStreamingResponse> {
  const token = context.requestHeader.get(OUTPUT_HANDOFF_HEADER);
  return execStreaming(
    requests,
    {
      exec: async (session) => {
        const options: ExecCommandOptions = { command: [], tty: session.tty };
        // Claimed (or declined: then closed) before anything can fail, so the plugin never waits on them.
        if (token !== null && handoff !== undefined) {
          const outputs = await handoff.claim(token, session.signal);
          if (outputs !== undefined && session.tty) {
            outputs.stdout.destroy();
            outputs.stderr.destroy();
          } else if (outputs !== undefined) options.outputs = outputs;
        }
        try {
          const ctx = task.context;
          // Resolve here with the task's PATH: inside nsenter a missing command would only be exit 127.
          const file = lookPath(session.command[0]!, ctx, "setup.command[0]");
          const c = commandInContext(ctx, file, session.command.slice(1));
          options.command = [c.file, ...c.args];
          options.env = ctx.env;
          options.cwd = ctx.cwd;
          if (c.uid !== undefined) options.uid = c.uid;
          if (c.gid !== undefined) options.gid = c.gid;
        } catch (err) {
          options.outputs?.stdout.destroy();
          options.outputs?.stderr.destroy();
          throw err;
        }
        return runExecCommand(options, session);
      },
    },
    { signal: context.signal },
  );
}
