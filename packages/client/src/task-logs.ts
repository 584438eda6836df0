/**
 * The task's stdout and stderr as Nomad's log collector (logmon) provides them, for tools and
 * tests that start tasks themselves: FIFOs in `alloc/logs` that are read before StartTask and
 * copied until EOF into `<task>.stdout.0` / `<task>.stderr.0`.
 */
import { execFileSync } from "node:child_process";
import { closeSync, constants, lstatSync, openSync, readFileSync, writeSync } from "node:fs";
import { Socket, type SocketConstructorOpts } from "node:net";
import { join } from "node:path";
import type { TaskDirs } from "./task-dirs.js";

/** Options of {@link openTaskLogs}. */
export interface TaskLogsOptions {
  /** Called with each chunk of the task's stdout as it arrives (to forward it, say). */
  onStdout?: (chunk: Buffer) => void;
  /** Called with each chunk of the task's stderr as it arrives. */
  onStderr?: (chunk: Buffer) => void;
}

/** The output of one task, as {@link openTaskLogs} collects it. */
export interface TaskLogs {
  /** `<alloc>/alloc/logs/.<task>.stdout.fifo`: TaskConfig.stdout_path. */
  readonly stdoutPath: string;
  /** `<alloc>/alloc/logs/.<task>.stderr.fifo`: TaskConfig.stderr_path. */
  readonly stderrPath: string;
  /** `<alloc>/alloc/logs/<task>.stdout.0`, where the stdout read so far is kept (as logmon does). */
  readonly stdoutFile: string;
  /** `<alloc>/alloc/logs/<task>.stderr.0`. */
  readonly stderrFile: string;
  /** The task's stdout read so far. */
  stdout(): string;
  /** The task's stderr read so far. */
  stderr(): string;
  /** Resolves once both FIFOs reached EOF: every writer that opened them (driver, executor, task) closed them. */
  readonly ended: Promise<void>;
  /**
   * Stops collecting, like logmon's Stop: waits up to `graceMs` (default 2000, Nomad's tolerance)
   * for the writers left to close the FIFOs, then stops reading. Idempotent.
   */
  close(graceMs?: number): Promise<void>;
}

/** One FIFO and its reader: opened at once, copied until EOF, like logmon's logRotatorWrapper. */
class FifoCopy {
  readonly ended: Promise<void>;
  private readonly reader: Socket;
  private out: number | undefined;

  constructor(
    readonly fifo: string,
    readonly file: string,
    onData: ((chunk: Buffer) => void) | undefined,
  ) {
    makeFifo(fifo);
    this.out = openSync(file, "a", 0o644);
    // Opened now, before StartTask, so the driver's open for writing does not wait. Non-blocking: a
    // blocking open would hold one of libuv's pool threads until a writer comes, forever if none
    // does. The kernel reports EOF only after a writer has come and gone, as with logmon's reader.
    let fd: number;
    try {
      fd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    } catch (err) {
      this.closeFile(); // nobody else would: the caller never gets this object
      throw err;
    }
    // `fd` is honoured by the constructor (Node's types list it for pipes and sockets alike).
    this.reader = new Socket({ fd, readable: true, writable: false } as SocketConstructorOpts);
    this.reader.on("data", (chunk: Buffer) => {
      if (this.out !== undefined) writeSync(this.out, chunk);
      onData?.(chunk);
    });
    this.ended = new Promise((resolve) => {
      const done = () => {
        this.closeFile();
        resolve();
      };
      this.reader.once("close", done);
      this.reader.once("error", done);
    });
  }

  async close(graceMs: number): Promise<void> {
    // A writer that opens and closes at once: EOF now when no other writer is left (the driver never
    // opened the FIFO, or all of them closed it), after what is buffered has been read.
    try {
      closeSync(openSync(this.fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      // the reader is gone already (ENXIO)
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.ended, new Promise((r) => (timer = setTimeout(r, graceMs)))]);
    clearTimeout(timer);
    this.reader.destroy();
    this.closeFile();
  }

  private closeFile(): void {
    if (this.out !== undefined) closeSync(this.out);
    this.out = undefined;
  }
}

function makeFifo(path: string): void {
  try {
    // Kept, as logmon does, when a restarted task's FIFO is still there.
    if (lstatSync(path).isFIFO()) return;
  } catch {
    // missing: made below
  }
  try {
    // Node has no mkfifo(3); Nomad makes it 0600 (client/lib/fifo).
    execFileSync("mkfifo", ["-m", "600", path], { stdio: ["ignore", "ignore", "pipe"] });
  } catch (err) {
    const why = (err as { stderr?: Buffer }).stderr?.toString().trim() || (err as Error).message;
    throw new Error(`cannot make the task's output FIFO ${path}: ${why}`);
  }
}

function readText(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

/**
 * Makes the task's output FIFOs where Nomad makes them (`alloc/logs/.<task>.stdout.fifo` and
 * `.stderr.fifo`, mode 0600) and starts reading them, as Nomad's logmon does before StartTask:
 * everything written is copied to `<task>.stdout.0` / `<task>.stderr.0` until EOF, which comes
 * once every writer closed the FIFO. Nothing else holds a write end, so a driver that closes the
 * FIFO and opens it again later finds no reader here (logmon may keep its read end after EOF, but
 * a driver must not rely on either: open each FIFO once). Call `close()` when the task is gone. Throws when a FIFO cannot be made.
 *
 * @example
 * ```ts
 * const dirs = createTaskDirs(allocDir, "web");
 * const logs = openTaskLogs(dirs, "web", { onStdout: (d) => process.stdout.write(d) });
 * const task = nomadTaskConfig({ name: "web", dirs, msgpackDriverConfig, stdoutPath: logs.stdoutPath, stderrPath: logs.stderrPath });
 * await plugin.driver.startTask({ task });
 * await plugin.driver.waitTask({ taskId: task.id });
 * await logs.close();
 * console.log(logs.stderr());
 * ```
 */
export function openTaskLogs(dirs: TaskDirs, taskName: string, options: TaskLogsOptions = {}): TaskLogs {
  if (taskName === "" || taskName.includes("/") || taskName.includes("\0")) {
    throw new Error(`task name ${JSON.stringify(taskName)} cannot name a file in ${dirs.logsDir}`);
  }
  const out = new FifoCopy(join(dirs.logsDir, `.${taskName}.stdout.fifo`), join(dirs.logsDir, `${taskName}.stdout.0`), options.onStdout);
  let err: FifoCopy;
  try {
    err = new FifoCopy(join(dirs.logsDir, `.${taskName}.stderr.fifo`), join(dirs.logsDir, `${taskName}.stderr.0`), options.onStderr);
  } catch (e) {
    void out.close(0);
    throw e;
  }
  let closing: Promise<void> | undefined;
  return {
    stdoutPath: out.fifo,
    stderrPath: err.fifo,
    stdoutFile: out.file,
    stderrFile: err.file,
    stdout: () => readText(out.file),
    stderr: () => readText(err.file),
    ended: Promise.all([out.ended, err.ended]).then(() => undefined),
    close: (graceMs = 2000) => (closing ??= Promise.all([out.close(graceMs), err.close(graceMs)]).then(() => undefined)),
  };
}
