import { Code, ConnectError } from "@connectrpc/connect";
import { CHECK_OUTPUT_LIMIT, OutputTail } from "../exec/output-tail.js";
import { checkProcessStrings } from "../runtime/process-strings.js";
import { timerDelayMs } from "../runtime/timer-delay.js";
import { lookPath, spawnInContext, type TaskContext } from "./context.js";
import { assertExecutableBy } from "./user.js";

/** Result of {@link execInContext}. */
export interface BufferedExecResult {
  /** stdout and stderr interleaved in arrival order (truncated to the limit). */
  output: Buffer;
  /**
   * Exit status; -1 when killed by a signal (also at the deadline), as Nomad's ExecScript reports
   * it (Go's WaitStatus.ExitStatus()). Task exits and exec sessions use 128+N instead.
   */
  exitCode: number;
  /** True when the deadline passed and the command was killed. */
  timedOut: boolean;
}

/** Options for {@link execInContext}. */
export interface ExecOptions {
  /** Kill the command (its whole process group) at this time. */
  deadline?: Date;
  /**
   * Keep the last this many bytes of output (default {@link DEFAULT_EXEC_OUTPUT_LIMIT}, 4 KiB, as
   * Nomad's executor keeps for script checks); what comes before is drained and dropped.
   */
  outputLimit?: number;
  /** Aborts (kills) the command. */
  signal?: AbortSignal;
}

/** Default output kept by {@link execInContext}: the last 4 KiB, Nomad's `CheckBufSize`. */
export const DEFAULT_EXEC_OUTPUT_LIMIT = CHECK_OUTPUT_LIMIT;

/**
 * Runs a command to completion in a task's context (env, cwd, user, netns) and returns its
 * combined output: the Executor's buffered Exec, used e.g. by script checks.
 *
 * @example
 * ```ts
 * import { execInContext } from "@nomadkit/server/executor";
 * const r = await execInContext(task.context, "sh", ["-c", "echo ok"], { deadline: new Date(Date.now() + 5000) });
 * // r.output.toString() === "ok\n", r.exitCode === 0
 * ```
 */
export async function execInContext(ctx: TaskContext, cmd: string, args: readonly string[], options: ExecOptions = {}): Promise<BufferedExecResult> {
  checkProcessStrings([cmd], () => "cmd");
  checkProcessStrings(args, (i) => `args[${i}]`);
  const file = lookPath(cmd, ctx, "cmd");
  // As at launch and in ExecStreaming: setpriv execs with root's capabilities still held, so without
  // this the user would run a file it may not (Nomad's exec as the user fails with EACCES).
  if (ctx.user) await assertExecutableBy(ctx.user, file, "cmd");
  // As Go's exec.CommandContext: a deadline already past starts nothing (the command ran before).
  if (options.deadline !== undefined && options.deadline.getTime() <= Date.now()) {
    throw new ConnectError(`exec: the deadline (${options.deadline.toISOString()}) has passed; the command was not run`, Code.DeadlineExceeded);
  }
  const limit = options.outputLimit ?? DEFAULT_EXEC_OUTPUT_LIMIT;
  // argv[0] as typed, as Nomad's ExecScript (exec.CommandContext(ctx, name, args...)) gives it.
  const child = spawnInContext(ctx, file, args, { stdio: ["ignore", "pipe", "pipe"], detached: true, argv0: cmd });
  const tail = new OutputTail(limit);
  const collect = (b: Buffer) => tail.push(b);
  child.stdout!.on("data", collect);
  child.stderr!.on("data", collect);
  let timedOut = false;
  const kill = () => {
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      child.kill("SIGKILL");
    }
    // A process that left the group (setsid) may still hold the pipes: 'close' would wait for it.
    child.stdout!.destroy();
    child.stderr!.destroy();
  };
  let timer: NodeJS.Timeout | undefined;
  if (options.deadline) {
    timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, timerDelayMs(options.deadline.getTime() - Date.now()));
  }
  options.signal?.addEventListener("abort", kill, { once: true });
  try {
    const code = await new Promise<number | null>((resolve, reject) => {
      child.once("error", (e) => reject(new ConnectError(`cmd: cannot start ${JSON.stringify(cmd)}: ${e.message}`, Code.InvalidArgument)));
      // 'close' waits for both pipes to drain, so no output is lost.
      child.once("close", (c) => resolve(c));
    });
    // Signalled: -1, Nomad's ExecScript's value (script checks read it as critical).
    return { output: tail.bytes(), exitCode: code ?? -1, timedOut };
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener("abort", kill);
  }
}
