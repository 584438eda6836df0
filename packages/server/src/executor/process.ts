import type { ChildProcess } from "node:child_process";
import { constants as fsConstants } from "node:fs";
import { open, stat, type FileHandle } from "node:fs/promises";
import { setTimeout as delay } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { checkProcessStrings } from "../runtime/process-strings.js";
import { timerDelayMs } from "../runtime/timer-delay.js";
import { processTree } from "../stats/proc.js";
import { findTaskBinary } from "../exec/find-executable.js";
import { prepareTaskContext, spawnInContext, type TaskContext, type TaskContextOptions } from "./context.js";
import { pidExists } from "./pids.js";
import { assertExecutableBy } from "./user.js";
import { signalName, signalNumber } from "./signals.js";

/** How a task process ended (or, before that, how it was started). */
export interface TaskExit {
  /** Process id of the task. */
  pid: number;
  /** Exit status; 128+N when killed by signal N (Nomad's convention). */
  exitCode: number;
  /** The signal that killed the process, or 0. */
  signal: number;
  /** When the process exited. */
  time: Date;
  /** Whether the kernel OOM killer ended it (only known with a memory cgroup; false otherwise). */
  oomKilled: boolean;
}

/** What to launch: LaunchRequest's fields in TypeScript form. */
export interface TaskLaunchOptions extends TaskContextOptions {
  /**
   * Executable, found as Nomad's executor does: `<taskDir>/local/<cmd>`, `<taskDir>/<cmd>`, `cmd`
   * when absolute, then the task's PATH; made executable (a+rx) when it is not.
   */
  cmd: string;
  /** Arguments, without the executable. */
  args?: readonly string[];
  /** File or FIFO the process's stdout is appended to; empty: /dev/null. */
  stdoutPath?: string;
  /** File or FIFO the process's stderr is appended to; empty: /dev/null. */
  stderrPath?: string;
  /** Gives up the launch (Canceled) while it waits for a reader of an output FIFO. */
  signal?: AbortSignal | undefined;
}

/** Default signal of {@link TaskProcess.shutdown}, as in Nomad's executor. */
export const DEFAULT_SHUTDOWN_SIGNAL = "SIGINT";

/** How long Shutdown waits for the task after SIGKILL before it fails (Nomad's executor: 15 s). */
export const KILL_WAIT_MS = 15_000;

/** How often the launch looks for a reader of an output FIFO. */
const READER_POLL_MS = 20;

/** Errors of opening a path that say the host is out of something, not that the path is wrong. */
const RESOURCE_ERRORS = new Set(["ENOSPC", "EDQUOT", "EMFILE", "ENFILE"]);

/**
 * Opens a task's output path for writing. A FIFO (Nomad's logmon makes them, and opens their read
 * ends before the task starts) is opened once it has a reader, as a blocking open would, but by
 * polling: a blocking open ties up a libuv thread that the executor's exit then joins, and could
 * not be cancelled. A read end of our own is pushed to `keepers`, to be held while the task runs:
 * the pipe then never has no reader, so a collector that goes away (logmon restarting) does not
 * kill the task with SIGPIPE; its output waits in the pipe (64 KiB, then the task blocks) for the
 * next reader.
 */
async function openOutput(path: string | undefined, field: string, keepers: FileHandle[], signal: AbortSignal | undefined): Promise<FileHandle | undefined> {
  if (!path) return undefined;
  try {
    if (!(await stat(path).catch(() => undefined))?.isFIFO()) return await open(path, fsConstants.O_WRONLY | fsConstants.O_APPEND | fsConstants.O_CREAT, 0o644);
    // Held until our own ends are open: a reader never sees its writers all gone (EOF) meanwhile.
    const probe = await openWhenRead(path, field, signal);
    try {
      keepers.push(await open(path, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK));
      return await open(path, fsConstants.O_WRONLY | fsConstants.O_APPEND);
    } finally {
      await probe.close();
    }
  } catch (err) {
    if (err instanceof ConnectError) throw err;
    // A full disk or no descriptor left is the host's state, not a bad path.
    const code = RESOURCE_ERRORS.has((err as NodeJS.ErrnoException).code ?? "") ? Code.ResourceExhausted : Code.InvalidArgument;
    throw new ConnectError(`${field}: cannot open ${JSON.stringify(path)}: ${(err as Error).message}`, code);
  }
}

/** A non-blocking write end of the FIFO `path`, once it has a reader (ENXIO until then). */
async function openWhenRead(path: string, field: string, signal: AbortSignal | undefined): Promise<FileHandle> {
  for (;;) {
    if (signal?.aborted) throw new ConnectError(`${field}: launch cancelled while waiting for a reader of ${JSON.stringify(path)}`, Code.Canceled);
    try {
      return await open(path, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENXIO") throw err;
    }
    await delay(READER_POLL_MS);
  }
}

/**
 * One supervised task process: launched in its own session and process group (so it survives the
 * executor and can be killed as a group), with stdout/stderr appended to files or FIFOs, in its
 * task context (env, cwd, user, network namespace).
 *
 * @example
 * ```ts
 * import { TaskProcess } from "@nomadkit/server/executor";
 * const task = await TaskProcess.launch({ cmd: "sleep", args: ["60"], env: ["PATH=/bin:/usr/bin"] });
 * await task.shutdown("SIGTERM", 5_000); // TERM, up to 5 s, then KILL
 * const { exitCode, signal } = await task.wait(); // 143, 15
 * ```
 */
export class TaskProcess {
  /** The task process id. */
  readonly pid: number;
  /** When the process was started. */
  readonly startedAt: Date;
  /** The context its processes run in (reused by exec). */
  readonly context: TaskContext;
  private exitState: TaskExit | undefined;
  private readonly exited: Promise<TaskExit>;

  private constructor(child: ChildProcess, context: TaskContext, oomKillsBefore: number | undefined) {
    this.pid = child.pid!;
    this.context = context;
    this.startedAt = new Date();
    this.exited = new Promise((resolve) => {
      child.once("exit", (code, sig) => {
        const signal = sig ? signalNumber(sig) : 0;
        this.exitState = {
          pid: this.pid,
          exitCode: code ?? 128 + signal,
          signal,
          time: new Date(),
          // Killed, and the task's memory cgroup counted an OOM kill since launch.
          oomKilled: signal === 9 && oomKillsBefore !== undefined && (context.cgroups?.oomKills() ?? 0) > oomKillsBefore,
        };
        resolve(this.exitState);
      });
    });
  }

  /**
   * Starts the task, inside `options.cgroups` when given. Resolves once the process runs; rejects
   * (InvalidArgument naming the field) for a missing command, bad env entry, unknown user, missing
   * working directory or namespace, or unopenable output paths, and (FailedPrecondition) when a
   * cgroup refuses the process.
   */
  static async launch(options: TaskLaunchOptions): Promise<TaskProcess> {
    checkProcessStrings([options.cmd], () => "cmd");
    checkProcessStrings(options.args ?? [], (i) => `args[${i}]`);
    const context = await prepareTaskContext(options);
    // Nomad's lookup: the task's local/ and task directories before the host, chmodding what it finds.
    const file = findTaskBinary(options.cmd, options.taskDir, context.env, context.cwd, "cmd");
    if (context.user) await assertExecutableBy(context.user, file, "cmd");
    const keepers: FileHandle[] = [];
    let out: FileHandle | undefined;
    let err: FileHandle | undefined;
    let launched: TaskProcess | undefined;
    try {
      out = await openOutput(options.stdoutPath, "stdout_path", keepers, options.signal);
      err = await openOutput(options.stderrPath, "stderr_path", keepers, options.signal);
      const oomKillsBefore = context.cgroups?.oomKills();
      const child = spawnInContext(context, file, options.args ?? [], {
        stdio: ["ignore", out?.fd ?? "ignore", err?.fd ?? "ignore"],
        // Own session and process group: not killed with the executor, killable as a group.
        detached: true,
      });
      await new Promise<void>((resolve, reject) => {
        child.once("spawn", resolve);
        child.once("error", (e) => reject(new ConnectError(`cmd: cannot start ${JSON.stringify(options.cmd)}: ${e.message}`, Code.InvalidArgument)));
      });
      launched = new TaskProcess(child, context, oomKillsBefore);
      return launched;
    } finally {
      // The child holds its own copies; closing ours lets a FIFO reader see EOF when the task ends.
      await out?.close();
      await err?.close();
      if (launched) void launched.wait().then(() => Promise.all(keepers.map((k) => k.close())));
      else await Promise.all(keepers.map((k) => k.close()));
    }
  }

  /** The exit state, or undefined while the process runs. */
  get exit(): TaskExit | undefined {
    return this.exitState;
  }

  /** Resolves with the exit state once the process has exited (at once if it already has). */
  wait(): Promise<TaskExit> {
    return this.exited;
  }

  /**
   * Sends a signal (number or name) to the task process. Throws FailedPrecondition when it has
   * already exited and InvalidArgument for an unknown signal.
   */
  signal(sig: number | string): void {
    const num = signalNumber(sig, "signal", { anyNumber: typeof sig === "number" });
    if (this.exitState) throw new ConnectError(`signal: process ${this.pid} has already exited`, Code.FailedPrecondition);
    try {
      process.kill(this.pid, num);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ESRCH") throw e;
    }
  }

  /**
   * Stops the task: sends `sig` (default SIGINT, like Nomad), waits up to `graceMs`, then SIGKILLs
   * the process group and every descendant. With `graceMs` 0 it kills at once. Also kills what the
   * task left behind in its group after a clean exit and, when it has cgroups, every process in
   * them (those that left its group and tree too). Resolves with the exit state; rejects
   * (DeadlineExceeded) when the process has not exited `killWaitMs` after SIGKILL.
   */
  async shutdown(sig: string | number = DEFAULT_SHUTDOWN_SIGNAL, graceMs = 0, killWaitMs = KILL_WAIT_MS): Promise<TaskExit> {
    // Without a grace period the signal is never sent, so not checked (Nomad's Shutdown kills then).
    const num = graceMs > 0 ? signalNumber(sig === "" ? DEFAULT_SHUTDOWN_SIGNAL : sig) : 0;
    if (!this.exitState && graceMs > 0) {
      try {
        process.kill(this.pid, num);
      } catch {
        // exited meanwhile
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.exited, new Promise((r) => (timer = setTimeout(r, timerDelayMs(graceMs))))]);
      clearTimeout(timer);
    }
    if (!this.exitState) {
      await this.killTree();
      // A process SIGKILL cannot end (uninterruptible sleep on a hung mount, a frozen cgroup) would
      // hold Shutdown, and Nomad's StopTask, forever; Nomad's executor gives up after 15 s too.
      let timer: NodeJS.Timeout | undefined;
      const exited = await Promise.race([
        this.exited.then(() => true),
        new Promise<false>((r) => (timer = setTimeout(() => r(false), timerDelayMs(killWaitMs)))),
      ]);
      clearTimeout(timer);
      if (!exited) {
        // What else can be killed still is: the task's cgroups, with what left its group and tree.
        await this.context.cgroups?.killAll().catch(() => undefined);
        throw new ConnectError(`shutdown: process ${this.pid} did not exit within ${killWaitMs} ms of SIGKILL`, Code.DeadlineExceeded);
      }
    }
    const state = await this.exited;
    // What the task left in its group. While any member lives its pid stays reserved, so a process
    // that has the pid now (ours was reaped) means the group is gone and the pid reused.
    if (!pidExists(this.pid)) killGroup(this.pid);
    await this.context.cgroups?.killAll();
    return state;
  }

  /** SIGKILLs the task, its process group and all its descendants (which may have left the group). */
  async killTree(): Promise<void> {
    const tree = await processTree(this.pid).catch(() => []);
    killGroup(this.pid);
    for (const p of tree) {
      try {
        process.kill(p.pid, "SIGKILL");
      } catch {
        // gone
      }
    }
  }

  /** The name of the signal that ended the process, if any (for logs). */
  get signalName(): string | undefined {
    return this.exitState?.signal ? signalName(this.exitState.signal) : undefined;
  }
}

function killGroup(pgid: number): void {
  try {
    process.kill(-pgid, "SIGKILL");
  } catch {
    // no such group (left or gone)
  }
}
