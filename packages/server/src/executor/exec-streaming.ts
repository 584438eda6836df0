import type { HandlerContext } from "@connectrpc/connect";
import type { ExecTaskStreamingRequest, ExecTaskStreamingResponse } from "@nomadkit/protocol/driver";
import { OUTPUT_HANDOFF_HEADER, closeHandedOutputs, openHandedOutputs } from "../exec/handoff.js";
import { runExecCommand, type ExecCommandOptions } from "../exec/local.js";
import { execStreaming } from "../exec/session.js";
import { checkInterpreter } from "../exec/find-executable.js";
import { commandInContext, lookPath } from "./context.js";
import type { TaskProcess } from "./process.js";
import { assertExecutableBy } from "./user.js";

/**
 * Executor.ExecStreaming for a task: the SDK's exec protocol engine (high-level form) with the
 * local command runner (pipes, or node-pty for a tty), the command running in the task's context:
 * its environment, working directory, user, network namespace and cgroups. A call whose
 * `nomadkit-exec-output` header names the driver plugin's FIFOs (the output handoff, see
 * exec/handoff.ts) has the process write its output into those, for the plugin to read.
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
  const handoff = context.requestHeader.get(OUTPUT_HANDOFF_HEADER);
  return execStreaming(
    requests,
    {
      exec: async (session) => {
        const options: ExecCommandOptions = { command: [], tty: session.tty };
        // Opened (or declined) before anything can fail: once the exit is reported, the plugin
        // knows this process is done with the paths.
        if (handoff !== null && !session.tty) {
          const outputs = openHandedOutputs(handoff);
          if (outputs !== undefined) options.outputs = outputs;
        }
        try {
          const ctx = task.context;
          // Resolve here with the task's PATH: inside nsenter a missing command would only be exit 127.
          const file = lookPath(session.command[0]!, ctx, "setup.command[0]");
          // Behind setpriv or nsenter these would only be an exit status (126, 127), as at launch.
          checkInterpreter(file, "setup.command[0]");
          if (ctx.user) await assertExecutableBy(ctx.user, file, "setup.command[0]");
          // argv[0] as typed, as Nomad's ExecStreaming (exec.CommandContext(ctx, command[0], ...)) gives it.
          const c = commandInContext(ctx, file, session.command.slice(1), "setup.command[0]", session.command[0]);
          options.command = [c.file, ...c.args];
          if (c.argv0 !== undefined) options.argv0 = c.argv0;
          options.env = c.env;
          options.cwd = ctx.cwd;
          if (c.uid !== undefined) options.uid = c.uid;
          if (c.gid !== undefined) options.gid = c.gid;
          // Inside the task's cgroups before the command runs: a plain process behind the spawn gate,
          // a terminal's process (node-pty starts it) behind a gate that stops itself until moved in.
          const cgroups = ctx.cgroups;
          if (cgroups && !session.tty) options.spawn = (f, a, o) => cgroups.spawn(f, a, o);
          if (cgroups && session.tty) options.ptyGate = cgroups.ptyGate();
        } catch (err) {
          if (options.outputs !== undefined) closeHandedOutputs(options.outputs);
          throw err;
        }
        return runExecCommand(options, session);
      },
    },
    { signal: context.signal },
  );
}
