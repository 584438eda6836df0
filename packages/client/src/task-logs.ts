/**
 * The task's stdout and stderr as Nomad's log collector (logmon) provides them, for tools and
 * tests that start tasks themselves: FIFOs in `alloc/logs` that are read before StartTask and
 * copied until EOF into `<task>.stdout.0` / `<task>.stderr.0`; what is written after that EOF is
 * lost under Nomad, and reported here, unless the agent restarts (logmon's Start then reads again).
 */
import { execFileSync } from "node:child_process";
import { closeSync, constants, lstatSync, openSync, readFileSync, readSync, writeSync } from "node:fs";
import { Socket, type SocketConstructorOpts } from "node:net";
import { join } from "node:path";
import type { TaskDirs } from "./task-dirs.js";

/** Options of {@link openTaskLogs}. */
export interface TaskLogsOptions {
  /** Called with each chunk of the task's stdout as it arrives (to forward it, say). */
  onStdout?: (chunk: Buffer) => void;
  /** Called with each chunk of the task's stderr as it arrives. */
  onStderr?: (chunk: Buffer) => void;
  /**
   * Called once per FIFO, as soon as output written to it after its first EOF is noticed (see
   * {@link TaskLogs.lateOutput}): to warn the driver's author while the task runs.
   */
  onLateOutput?: (late: LateOutput) => void;
}

/**
 * Output written to one of the task's FIFOs after its first EOF, which Nomad's logmon never
 * collects: it stops copying at that EOF (but keeps its read end, so the writer's open succeeds).
 */
export interface LateOutput {
  /** The FIFO written to: {@link TaskLogs.stdoutPath} or {@link TaskLogs.stderrPath}. */
  readonly fifo: string;
  /** How many bytes were written after its first EOF, up to when this record was made. */
  readonly bytes: number;
  /** What happened and what to do, in a sentence for the driver's author (it names the FIFO). */
  readonly message: string;
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
  /**
   * Resolves once both FIFOs reached EOF: every writer that opened them (driver, executor, task)
   * closed them. After {@link TaskLogs.agentRestart}, the EOF of the fresh readers.
   */
  readonly ended: Promise<void>;
  /**
   * The output written to each FIFO after its first EOF, so far (none: `[]`): read now, so what was
   * written before this call is counted (once the EOF itself has been read). It is neither kept in the log files nor passed to
   * `onStdout`/`onStderr`, as Nomad's logmon never collects it; it is read all the same, so that
   * its writer never blocks on a full pipe (under Nomad it would, once 64 KiB pile up).
   *
   * @example
   * ```ts
   * await logs.close();
   * for (const late of logs.lateOutput()) console.warn(`warning: ${late.message}`);
   * ```
   */
  lateOutput(): LateOutput[];
  /**
   * Runs `restarting` (the plugin's relaunch and RecoverTask) as a restart of the Nomad agent, then
   * reads both FIFOs again, as Nomad does: it calls the driver's RecoverTask as it restores the
   * task (TaskRunner.Restore), then runs the task's logmon hook again, whose logmon Start reopens
   * each FIFO whose copy had ended (the plugin that held its write end died, say). So a driver
   * whose plugin reopens a FIFO in RecoverTask has what it writes from then on collected, not
   * reported as late. Meanwhile nothing written after an EOF is read: it waits in the pipe for the
   * fresh reader, as under Nomad (the writer blocks once 64 KiB pile up). What a writer left there
   * and closed before the fresh reader came is lost, as under Nomad (logmon closes its old read
   * end first), and reported as late. Output written after an EOF before this call stays late.
   * The fresh readers come even when `restarting` throws (Nomad starts logmon before StartTask too).
   *
   * @example
   * ```ts
   * await logs.agentRestart(async () => {
   *   plugin = await launchPlugin(path);
   *   await plugin.driver.recoverTask({ taskId, handle: restoredTaskHandle(handle) });
   * });
   * ```
   */
  agentRestart<T>(restarting: () => Promise<T>): Promise<T>;
  /**
   * Stops collecting, like logmon's Stop: waits up to `graceMs` (default 2000, Nomad's tolerance)
   * for the writers left to close the FIFOs, then stops reading and closes every descriptor it
   * holds (a writer that comes after this finds no reader). Idempotent.
   */
  close(graceMs?: number): Promise<void>;
}

/**
 * One FIFO and its reader: opened at once, copied until EOF, like logmon's logRotatorWrapper, whose
 * read end then stays open until Stop. Output written after that EOF is counted, not collected,
 * unless an agent restart's fresh reader (reopen) takes it from the pipe.
 */
class FifoCopy {
  /** Resolves at the EOF of the current reader (or when close() stops it). */
  ended!: Promise<void>;
  private reader!: Socket;
  private out: number | undefined;
  /**
   * A second read end, held from the start until close(): the copy's own goes at EOF, and logmon's
   * stays, so a writer that comes back must find a reader (a blocking open would wait forever).
   * Read only after EOF: before, it would take the task's output from the copy.
   */
  private held: number | undefined;
  /** Reads what is written after EOF as it comes (the held end cannot be watched: see watch()). */
  private watcher: Socket | undefined;
  private eof = false;
  /** The agent is down (agentRestart): what comes after EOF stays in the pipe for reopen(). */
  private paused = false;
  private closing = false;
  private lateBytes = 0;

  constructor(
    readonly fifo: string,
    readonly file: string,
    private readonly onData: ((chunk: Buffer) => void) | undefined,
    private readonly onLate: ((late: LateOutput) => void) | undefined,
  ) {
    makeFifo(fifo);
    this.out = openSync(file, "a", 0o644);
    // Opened now, before StartTask, so the driver's open for writing does not wait. Non-blocking: a
    // blocking open would hold one of libuv's pool threads until a writer comes, forever if none
    // does. The kernel reports EOF only after a writer has come and gone, as with logmon's reader.
    let fd: number;
    try {
      fd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
      try {
        this.held = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
      } catch (err) {
        closeSync(fd);
        throw err;
      }
    } catch (err) {
      this.closeFile(); // nobody else would: the caller never gets this object
      throw err;
    }
    this.read(fd);
  }

  /** Copies from `fd` until EOF into the log file and onData, as logmon's copy goroutine. */
  private read(fd: number): void {
    // `fd` is honoured by the constructor (Node's types list it for pipes and sockets alike).
    const reader = new Socket({ fd, readable: true, writable: false } as SocketConstructorOpts);
    this.reader = reader;
    let resolve!: (to?: Promise<void>) => void;
    this.ended = new Promise<void>((r) => (resolve = r));
    reader.on("data", (chunk: Buffer) => this.collect(chunk));
    // EOF proper, not a close() that stopped the copy first.
    reader.once("end", () => {
      if (this.reader !== reader) return;
      this.eof = true;
      this.watch();
    });
    const done = () => {
      // Replaced by reopen(): whoever waits for this reader's EOF waits for the fresh one's.
      if (this.reader !== reader) return resolve(this.ended);
      this.closeFile();
      resolve();
    };
    reader.once("close", done);
    reader.once("error", done);
  }

  private collect(chunk: Buffer): void {
    if (this.out !== undefined) writeSync(this.out, chunk);
    this.onData?.(chunk);
  }

  /**
   * Watches for output after EOF through a read end opened now: the kernel signals a FIFO's hang-up
   * to a reader only once a writer came and went after the reader opened it (the held end, older,
   * would signal it at once and for ever). Opened again after each writer that comes and goes.
   * Unref'd: watching keeps no process alive.
   */
  private watch(): void {
    if (this.closing || this.paused) return;
    let fd: number;
    try {
      fd = openSync(this.fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    } catch {
      return; // lateOutput() still reads what comes through the held end
    }
    const w = new Socket({ fd, readable: true, writable: false } as SocketConstructorOpts);
    w.unref();
    this.watcher = w;
    w.on("data", (chunk: Buffer) => this.late(chunk.length));
    w.on("error", () => undefined); // lateOutput() reads on through the held end
    w.once("end", () => {
      if (this.watcher !== w) return;
      this.watcher = undefined;
      this.watch();
    });
  }

  private late(bytes: number): void {
    const first = this.lateBytes === 0;
    this.lateBytes += bytes;
    if (first) this.onLate?.(this.record()!);
  }

  /** The agent goes down: from now on nothing written after EOF is read, until reopen(). */
  pause(): void {
    this.paused = true;
    this.watcher?.destroy();
    this.watcher = undefined;
  }

  /**
   * As logmon's Start after an agent restart: the old copy stops and a fresh reader copies what
   * the pipe holds and what comes next, until its own EOF. (logmon reopens only when a copy ended;
   * replacing one still copying changes nothing, and spares waiting for an EOF not yet read.)
   */
  reopen(): void {
    this.paused = false;
    if (this.closing) return;
    const old = this.reader;
    let fd: number;
    try {
      this.out ??= openSync(this.file, "a", 0o644);
      fd = openSync(this.fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    } catch {
      // not expected (the FIFO and the log file were opened before): the old copy stays, as it was
      if (this.eof) this.watch();
      return;
    }
    // What the old reader took and has not passed on yet, then what the pipe holds: collected, as
    // logmon's old copy or its fresh one would. Except, once the copy had ended, what no writer is
    // left to keep: logmon closes its old read end, the last, before it opens the fresh one, and
    // the kernel drops what a pipe holds once nobody has it open.
    // read() hands each chunk to the old reader's "data" listener, which collects it.
    while (old.read() !== null);
    const { chunks, writers } = this.drain();
    for (const c of chunks) {
      if (this.eof && !writers) this.late(c.length);
      else this.collect(c);
    }
    this.eof = false;
    this.read(fd);
    old.destroy();
  }

  /** Reads what the pipe holds now through the held end, and whether a writer is still there. */
  private drain(): { chunks: Buffer[]; writers: boolean } {
    const chunks: Buffer[] = [];
    if (this.held === undefined) return { chunks, writers: false };
    for (;;) {
      const buf = Buffer.allocUnsafe(64 * 1024);
      let n: number;
      try {
        n = readSync(this.held, buf);
      } catch {
        return { chunks, writers: true }; // EAGAIN: a writer is there, nothing pending
      }
      if (n === 0) return { chunks, writers: false }; // no writer, nothing pending
      chunks.push(buf.subarray(0, n));
    }
  }

  /** Output after EOF so far, with what the pipe holds now read first (undefined: none). */
  lateOutput(): LateOutput | undefined {
    if (this.eof && !this.paused) for (const c of this.drain().chunks) this.late(c.length);
    return this.record();
  }

  private record(): LateOutput | undefined {
    const n = this.lateBytes;
    if (n === 0) return undefined;
    const what = n === 1 ? "1 byte was" : `${n} bytes were`;
    return {
      fifo: this.fifo,
      bytes: n,
      message:
        `${what} written to ${this.fifo} after every writer had closed it: Nomad's logmon would never collect it ` +
        "(it stops copying a FIFO at its first end of file, and a writer blocks once 64 KiB pile up); " +
        "open the FIFO once and keep it open for as long as the task writes (driver guide §3)",
    };
  }

  async close(graceMs: number): Promise<void> {
    this.closing = true;
    this.paused = false;
    // A writer that opens and closes at once: EOF now when no other writer is left (the driver never
    // opened the FIFO, or all of them closed it), after what is buffered has been read.
    try {
      closeSync(openSync(this.fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      // not expected: the held read end stays open until below (ENXIO would mean no reader)
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.ended, new Promise((r) => (timer = setTimeout(r, graceMs)))]);
    clearTimeout(timer);
    this.reader.destroy();
    this.closeFile();
    // A last look, at what came after EOF and the watcher has not read.
    this.lateOutput();
    this.watcher?.destroy();
    this.watcher = undefined;
    if (this.held !== undefined) closeSync(this.held);
    this.held = undefined;
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
 * once every writer closed the FIFO. Nothing else holds a write end. As logmon, it keeps a read end
 * after that EOF, so a driver that closes the FIFO and opens it again later does not block, but
 * what it writes then is not collected: it is reported instead, by `onLateOutput` as soon as it is
 * noticed and by `lateOutput()` (a driver must open each FIFO once and keep it open). Call
 * `close()` when the task is gone: it releases every descriptor. Throws when a FIFO cannot be made.
 *
 * @example
 * ```ts
 * const dirs = createTaskDirs(allocDir, "web");
 * const logs = openTaskLogs(dirs, "web", {
 *   onStdout: (d) => process.stdout.write(d),
 *   onLateOutput: (late) => console.warn(`warning: ${late.message}`),
 * });
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
  const { onLateOutput } = options;
  const out = new FifoCopy(join(dirs.logsDir, `.${taskName}.stdout.fifo`), join(dirs.logsDir, `${taskName}.stdout.0`), options.onStdout, onLateOutput);
  let err: FifoCopy;
  try {
    err = new FifoCopy(join(dirs.logsDir, `.${taskName}.stderr.fifo`), join(dirs.logsDir, `${taskName}.stderr.0`), options.onStderr, onLateOutput);
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
    get ended() {
      return Promise.all([out.ended, err.ended]).then(() => undefined);
    },
    lateOutput: () => [out.lateOutput(), err.lateOutput()].filter((l) => l !== undefined),
    agentRestart: async (restarting) => {
      out.pause();
      err.pause();
      try {
        return await restarting();
      } finally {
        out.reopen();
        err.reopen();
      }
    },
    close: (graceMs = 2000) => (closing ??= Promise.all([out.close(graceMs), err.close(graceMs)]).then(() => undefined)),
  };
}
