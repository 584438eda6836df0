/**
 * Running a local command for the high-level exec form: pipes through `child_process.spawn`, or a
 * pseudo-terminal through node-pty when a tty is requested. Backpressure flows both ways: a slow
 * client pauses the process's output, a process that does not read pauses stdin.
 */
import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, constants, existsSync, openSync, write } from "node:fs";
import type { Readable, Writable } from "node:stream";
import { finished } from "node:stream/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { withoutGoPluginVariables } from "../goplugin/env.js";
import { ownFile } from "../runtime/own-file.js";
import { assertDirectory, checkInterpreter, execvpName, findExecutable } from "./find-executable.js";
import { closeHandedOutputs, type HandedOutputs } from "./handoff.js";
import { openOutputPipes, type OutputPipes } from "./output-pipes.js";
import { retainsChunks } from "./read-buffers.js";
import { PtyInput } from "./pty-input.js";
import type { TerminalResizes } from "./resize.js";
import type { ExecResult } from "./session.js";
import { assertSpawned } from "./spawned.js";

/** What to run, and where. */
export interface ExecCommandOptions {
  /**
   * Executable and arguments; the executable is looked up in `env.PATH` unless it has a slash. The
   * process gets `command[0]` as typed as its argv[0] (as Go's exec.Command keeps it), not the path found.
   */
  command: readonly string[];
  /**
   * argv[0] for the process instead of `command[0]`, e.g. the name a user typed when `command[0]`
   * is a path already looked up. With a tty and no `ptyGate`, only a name that finds the same file
   * in `env.PATH` is kept (node-pty execs by name); another gives way to the path.
   */
  argv0?: string | undefined;
  /** Run under a pseudo-terminal (node-pty); output then all goes to `stdout`. */
  tty?: boolean | undefined;
  /** Working directory. Default: the plugin's. */
  cwd?: string | undefined;
  /** Environment. Default: the plugin's, without go-plugin's variables. */
  env?: Record<string, string> | undefined;
  /** Run as this uid (needs root). */
  uid?: number | undefined;
  /** Run as this gid (needs root). */
  gid?: number | undefined;
  /** TERM for the terminal. Default `env.TERM`, else "xterm". */
  term?: string | undefined;
  /**
   * File descriptors the process's stdout and stderr go to, read elsewhere (the driver plugin's
   * FIFOs, by the output handoff: see handoff.ts): nothing comes through `io.stdout`/`io.stderr`,
   * which end when the process exits. Taken over: closed here once the process has them (or if it
   * cannot start). Not with `tty`.
   */
  outputs?: HandedOutputs | undefined;
  /**
   * Starts the process instead of `child_process.spawn` (same arguments, `argv0` among the options), e.g. inside a task's
   * cgroups (`TaskCgroups.spawn` of `@nomadkit/server/executor`). Not with `tty`: node-pty starts
   * the terminal's process.
   */
  spawn?: ((file: string, args: readonly string[], options: SpawnOptions) => ChildProcess) | undefined;
  /**
   * With `tty`: holds the terminal's process until it may run the command (node-pty starts it, so
   * `spawn` cannot), e.g. until it is in a task's cgroups (`TaskCgroups.ptyGate` of
   * `@nomadkit/server/executor`). A rejected `admit` kills the process and fails the session.
   */
  ptyGate?: PtyGate | undefined;
}

/** The command line a {@link PtyGate} has node-pty start. */
export interface GatedCommand {
  /** The executable (the gate). */
  file: string;
  /** Its arguments, the command's own among them. */
  args: string[];
  /** The environment to start it with (node-pty adds PWD and TERM, as `wrap` was told). */
  env: Record<string, string>;
}

/**
 * What node-pty starts instead of the command, and how it is let through: see
 * {@link ExecCommandOptions.ptyGate}.
 *
 * @example
 * ```ts
 * const gate = cgroups.ptyGate(); // TaskCgroups of @nomadkit/server/executor
 * await runExecCommand({ command: ["/bin/bash"], tty: true, ptyGate: gate }, session);
 * ```
 */
export interface PtyGate {
  /**
   * The command line to start in the terminal: a gate that waits for {@link PtyGate.admit}, then
   * execs `file args` (same pid) with exactly `env` (which includes the PWD and TERM node-pty would
   * have given the command), and `argv0` as the command's argv[0] (default `file`).
   */
  wrap(file: string, args: readonly string[], env: Readonly<Record<string, string>>, argv0?: string): GatedCommand;
  /** Called with the gate's pid once node-pty has started it; lets it exec the command when done. */
  admit(pid: number): Promise<void>;
}

/** The streams {@link runExecCommand} connects the process to (an {@link ExecSession} fits). */
export interface ExecIO {
  /** Piped to the process (written to the terminal with `tty`). */
  stdin: Readable;
  /** Receives the process's stdout (all terminal output with `tty`); ended when it exits. */
  stdout: Writable;
  /** Receives the process's stderr (unused with `tty`); ended when it exits. */
  stderr: Writable;
  /** Terminal size changes, applied to the pty (with `tty`). */
  resize?: TerminalResizes | undefined;
  /** Aborting it kills the process group. */
  signal?: AbortSignal | undefined;
}

function killGroup(pid: number | undefined, fallback: () => void): void {
  try {
    if (pid !== undefined) process.kill(-pid, "SIGKILL");
    else fallback();
  } catch {
    try {
      fallback();
    } catch {
      // already gone
    }
  }
}

/**
 * Run `options.command` connected to `io` and resolve with its exit once all its output has been
 * written to `io.stdout`/`io.stderr` (both are ended). Aborting `io.signal` kills the process group.
 * The building block for a driver's (or executor's) high-level exec.
 *
 * @example
 * ```ts
 * const driver = defineDriver({
 *   // ...
 *   execTaskStreaming: (session) =>
 *     runExecCommand({ command: session.command, tty: session.tty, cwd: taskDir(session.taskId) }, session),
 * });
 * ```
 */
export async function runExecCommand(options: ExecCommandOptions, io: ExecIO): Promise<ExecResult> {
  const handed = options.outputs;
  let handedOpen = handed !== undefined;
  // Closed as soon as the process has its copies, or at the end for the paths that never spawn it.
  const releaseHanded = () => {
    if (handedOpen) closeHandedOutputs(handed!);
    handedOpen = false;
  };
  try {
    if (options.command.length === 0 || options.command[0] === "") {
      throw new ConnectError("command must not be empty", Code.InvalidArgument);
    }
    if (options.tty === true && options.outputs !== undefined) {
      throw new ConnectError("outputs cannot be used with a tty", Code.InvalidArgument);
    }
    const env = options.env ?? withoutGoPluginVariables(process.env);
    // The task's directory may have been deleted under it: say so, not that the command is missing.
    if (options.cwd !== undefined) assertDirectory(options.cwd, "cwd", Code.FailedPrecondition);
    const file = findExecutable(options.command[0]!, env, options.cwd, "command[0]");
    const argv0 = options.argv0 ?? options.command[0]!;
    // node-pty would report a missing interpreter as the command's exit 1, spawn as the script's ENOENT.
    checkInterpreter(file, "command[0]");
    const args = options.command.slice(1);
    if (io.signal?.aborted) throw io.signal.reason ?? new Error("aborted");
    return await (options.tty === true ? runPty(file, argv0, args, env, options, io) : runPipes(file, argv0, args, env, options, io, releaseHanded));
  } finally {
    releaseHanded();
  }
}

async function runPipes(
  file: string,
  argv0: string,
  args: string[],
  env: Record<string, string>,
  options: ExecCommandOptions,
  io: ExecIO,
  releaseHanded: () => void,
): Promise<ExecResult> {
  // The session's own writables keep what they need of a chunk (retainChunk), so the output can be
  // read into reused buffers, from FIFOs (output-pipes.ts); any other writable, or no mkfifo, gets
  // Node's pipes and a fresh buffer per read.
  const handed = options.outputs;
  const pooled = handed === undefined && process.platform !== "win32" && retainsChunks(io.stdout) && retainsChunks(io.stderr);
  const pipes: OutputPipes | undefined = pooled ? await openOutputPipes(io.stdout, io.stderr).catch(() => undefined) : undefined;
  // Aborted while the FIFOs were being opened: the kill below is not listening yet.
  const signal = io.signal;
  if (signal?.aborted) {
    pipes?.close();
    throw signal.reason ?? new Error("aborted");
  }
  let child: ChildProcess;
  try {
    child = assertSpawned((options.spawn ?? spawn)(file, args, {
      argv0,
      cwd: options.cwd,
      env,
      ...(options.uid !== undefined ? { uid: options.uid } : {}),
      ...(options.gid !== undefined ? { gid: options.gid } : {}),
      stdio:
        handed !== undefined
          ? ["pipe", handed.stdout, handed.stderr]
          : pipes === undefined
            ? ["pipe", "pipe", "pipe"]
            : ["pipe", ...pipes.writers],
      // Own process group, so abort can kill everything the command started.
      detached: true,
    }), file);
  } catch (err) {
    // Node reports only ENOENT, EACCES, EAGAIN, EMFILE and ENFILE as "error" events; others (E2BIG,
    // ENOTDIR for a cwd that is a file) are thrown here, and the FIFOs would never be closed.
    pipes?.close();
    if (err instanceof ConnectError) throw err; // TaskCgroups.spawn's, naming the field
    throw new ConnectError(`exec ${JSON.stringify(file)}: ${(err as Error).message}`, Code.FailedPrecondition);
  } finally {
    // The child has its own copies (or never will): ours would keep the output from reaching EOF.
    pipes?.closeWriters();
    releaseHanded();
  }
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolvePromise, reject) => {
    child.once("error", reject);
    if (handed !== undefined) {
      // The output is read elsewhere: the exit is all there is to wait for here.
      child.once("exit", (code, sig) => {
        io.stdout.end();
        io.stderr.end();
        resolvePromise([code, sig]);
      });
    } else if (pipes === undefined) {
      // 'close' comes after exit AND after both pipes hit EOF: no output is lost.
      child.once("close", (code, sig) => resolvePromise([code, sig]));
    } else {
      // The same for our FIFOs: the exit, then EOF on both.
      child.once("exit", (code, sig) => void pipes.eof.then(() => resolvePromise([code, sig])));
    }
  });
  const kill = () => {
    killGroup(child.pid, () => child.kill("SIGKILL"));
    // Nobody reads the output any more. Output held back by backpressure would keep the pipes from
    // reaching EOF, so the exit would never be reported: the exec would never return and leak its pipes.
    if (handed !== undefined) return;
    if (pipes === undefined) {
      child.stdout!.unpipe(io.stdout);
      child.stderr!.unpipe(io.stderr);
      child.stdout!.destroy();
      child.stderr!.destroy();
    } else pipes.close();
    // Destroyed sources never end their targets, and the return below waits for them to finish.
    io.stdout.end();
    io.stderr.end();
  };
  io.signal?.addEventListener("abort", kill, { once: true });

  const stdin = child.stdin!;
  stdin.on("error", () => {}); // EPIPE when the process exits without reading all input
  io.stdin.pipe(stdin);
  if (handed === undefined && pipes === undefined) {
    child.stdout!.pipe(io.stdout);
    child.stderr!.pipe(io.stderr);
  }
  try {
    const [code, sig] = await exited;
    await Promise.all([finished(io.stdout).catch(() => {}), finished(io.stderr).catch(() => {})]);
    return { exitCode: code ?? 0, signal: sig };
  } catch (err) {
    throw new ConnectError(`exec ${JSON.stringify(file)}: ${(err as Error).message}`, Code.FailedPrecondition);
  } finally {
    io.signal?.removeEventListener("abort", kill);
    io.stdin.unpipe(stdin);
    // Only this process and the command knew the FIFOs: after EOF on both they can serve again.
    pipes?.close(true);
  }
}

/** The subset of node-pty's IPty used here. */
interface Pty {
  readonly pid: number;
  /** The master's file descriptor (node-pty on Unix). */
  readonly fd?: number;
  onData(cb: (data: Buffer) => void): unknown;
  onExit(cb: (e: { exitCode: number; signal?: number }) => void): unknown;
  write(data: string | Buffer): void;
  resize(cols: number, rows: number): void;
  pause(): void;
  resume(): void;
  kill(signal?: string): void;
}

/**
 * node-pty, loaded on a terminal's first use. It is a native addon built at install time, and an
 * optional dependency: npm leaves it out where it cannot be built (no C++ compiler or Python), so
 * that everything but terminals still installs. Bundles leave it outside (`nomadkit bundle` lists
 * it in its directory's package.json). Say how to get it, not just that a module is missing.
 */
async function loadNodePty(): Promise<typeof import("node-pty")> {
  try {
    return await import("node-pty");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // Installed without running its install script (not allowed, --ignore-scripts): no pty.node.
    if (/^Failed to load native module/.test((err as Error).message ?? "")) {
      throw new ConnectError(
        `tty: a terminal needs node-pty's native addon, which was never built where the plugin runs (npm installed node-pty without running its install script): run \`npm rebuild node-pty\` there, with python3, make and a C++ compiler installed (${(err as Error).message})`,
        Code.FailedPrecondition,
      );
    }
    if (code !== "MODULE_NOT_FOUND" && code !== "ERR_MODULE_NOT_FOUND") throw err;
    // node-pty is looked for next to the files this process started from. Gone: the plugin was
    // upgraded into a new directory (or removed) after this process (a task's executor, say)
    // started, and installing anything would not help it.
    const own = ownFile();
    if (own !== undefined && !existsSync(own)) {
      throw new ConnectError(
        `tty: a terminal needs node-pty, which this process loads on first use from the directory it was started from, and that directory no longer holds its files (${own} is gone): the plugin was upgraded or moved after this process started. A task's executor keeps running the plugin build that started the task: restart the task to get terminals from the installed build (commands without a terminal still run)`,
        Code.FailedPrecondition,
      );
    }
    throw new ConnectError(
      "tty: a terminal needs the node-pty package, which is not installed where the plugin runs. It is an optional dependency that npm skips when its native addon cannot be built: install python3, make and a C++ compiler, then run `npm install --omit=dev` again (in a `nomadkit bundle` directory: in that directory)",
      Code.FailedPrecondition,
    );
  }
}

/** Linux's limit on one argument or environment string, its terminating NUL included. */
const MAX_ARG_STRLEN = 32 * 4096;

async function runPty(file: string, argv0: string, args: string[], env: Record<string, string>, options: ExecCommandOptions, io: ExecIO): Promise<ExecResult> {
  // node-pty forks before it execs: a command the kernel refuses would only show as the child's
  // "execvp(3) failed." and exit status 1. findExecutable foresees the rest; E2BIG for a string
  // over MAX_ARG_STRLEN (32 pages, its NUL included) is said here as the pipes path says it.
  if ([...args, ...Object.entries(env).map(([k, v]) => `${k}=${v}`)].some((x) => Buffer.byteLength(x) >= MAX_ARG_STRLEN)) {
    throw new ConnectError(`exec ${JSON.stringify(file)}: spawn E2BIG (an argument or environment variable of 128 KiB or more)`, Code.FailedPrecondition);
  }
  const pty = await loadNodePty();
  const size = io.resize?.latest;
  const name = options.term ?? env.TERM ?? "xterm";
  const cwd = options.cwd ?? process.cwd();
  const gate = options.ptyGate;
  // node-pty adds PWD and TERM to the environment it starts a process with: the gated command gets them too.
  // node-pty execs its file by name (execvp, in `cwd`, with `env`): no argv[0] of its own to give.
  const command = gate ? gate.wrap(file, args, { ...env, PWD: cwd, TERM: name }, argv0) : { file: execvpName(argv0, file, env, cwd), args, env };
  let term: Pty;
  try {
    term = pty.spawn(command.file, command.args, {
      name,
      cols: size !== undefined && size.width > 0 ? size.width : 80,
      rows: size !== undefined && size.height > 0 ? size.height : 24,
      cwd,
      env: command.env,
      ...(options.uid !== undefined ? { uid: options.uid } : {}),
      ...(options.gid !== undefined ? { gid: options.gid } : {}),
      // Raw bytes, not decoded strings.
      encoding: null,
    } as Parameters<typeof pty.spawn>[2]) as unknown as Pty;
  } catch (err) {
    // node-pty's only failure before the fork is forkpty(3)'s: no terminal or descriptor left.
    throw new ConnectError(`exec ${JSON.stringify(file)}: cannot open a terminal: ${(err as Error).message} (out of file descriptors or terminals)`, Code.ResourceExhausted);
  }

  // node-pty's own write() has no backpressure (pty-input.ts); its master fd is public on Unix.
  const input = typeof term.fd === "number" ? new PtyInput(term.fd, io.stdin) : undefined;
  // Once node-pty closes the master, its number is free for the next file this process opens
  // (another session's terminal or FIFO, a socket), while the client may still type and resize
  // until it has read the last output: nothing more may reach that number.
  let closed = false;
  const onClosing = () => {
    closed = true;
    input?.dispose();
  };
  const exited = new Promise<{ exitCode: number; signal?: number }>((r) =>
    term.onExit((e) => {
      onClosing(); // already closed, when PtyDrain could not see it coming
      r(e);
    }),
  );
  const drain = new PtyDrain(term, io.stdout, onClosing);
  const kill = () => {
    killGroup(term.pid, () => term.kill("SIGKILL"));
    // Nobody reads the output any more. A drain paused for backpressure would hold the terminal
    // open, and node-pty reports the exit only once it is closed: the exec would never return.
    drain.abandon();
  };
  io.signal?.addEventListener("abort", kill, { once: true });
  // Aborted while node-pty was loading: the listener would never fire.
  if (io.signal?.aborted) kill();
  const onStdin = input ? (d: Buffer) => input.push(d) : (d: Buffer) => void (closed || term.write(d));
  const onStdinEnd = input ? () => input.end() : () => void (closed || term.write("\x04"));
  io.stdin.on("data", onStdin);
  io.stdin.on("end", onStdinEnd);
  const offResize = io.resize?.on(({ height, width }) => {
    if (height > 0 && width > 0 && !closed) term.resize(width, height);
  });
  try {
    // After the wiring: input and resizes that arrive while the gate holds the process reach it.
    await gate?.admit(term.pid).catch((err: unknown) => {
      kill();
      throw err;
    });
    const r = await exited;
    io.stdout.end();
    io.stderr.end();
    await Promise.all([finished(io.stdout).catch(() => {}), finished(io.stderr).catch(() => {})]);
    return { exitCode: r.exitCode, signal: r.signal ?? 0 };
  } finally {
    drain.dispose();
    input?.dispose();
    io.signal?.removeEventListener("abort", kill);
    io.stdin.off("data", onStdin);
    io.stdin.off("end", onStdinEnd);
    offResize?.();
  }
}

/**
 * Moves a pty's output to `out` with backpressure, without losing the tail.
 *
 * Two things drop output written just before the process exits when the reader is slow: Linux
 * reports EOF on the master as soon as the last slave descriptor closes, discarding what is still
 * buffered; and node-pty destroys its socket 200 ms after the exit. So we hold a slave descriptor
 * of our own (the terminal stays open after the exit), intercept node-pty's destroy (which is
 * also how we learn of the exit), write a unique marker through the slave and keep reading until
 * the marker comes back: everything before it is the process's output. Then close the slave and
 * let node-pty finish.
 */
class PtyDrain {
  #paused = false;
  #slave: number | undefined;
  /** The marker's write is queued or blocked on the threadpool: the slave's number stays ours till it ends. */
  #writing = false;
  #closeWhenWritten = false;
  #destroy: (() => void) | undefined;
  #marker: Buffer | undefined;
  #carry: Buffer = Buffer.alloc(0);
  #fallback: NodeJS.Timeout | undefined;
  #done = false;

  /** `onClosing` runs right before node-pty closes the master (destroying its socket closes it). */
  constructor(
    private readonly term: Pty,
    private readonly out: Writable,
    onClosing: () => void,
  ) {
    const internals = term as unknown as { _pty?: string; _socket?: { destroy: (...a: unknown[]) => unknown } };
    const sock = internals._socket;
    if (sock !== undefined && typeof sock.destroy === "function") {
      const original = sock.destroy.bind(sock);
      if (typeof internals._pty === "string") {
        try {
          this.#slave = openSync(internals._pty, constants.O_RDWR | constants.O_NOCTTY);
          this.#destroy = () => void sock.destroy();
        } catch {
          this.#slave = undefined;
        }
      }
      sock.destroy = (...a: unknown[]) => {
        // With an error, once drained, or without our slave: really destroy.
        if (a.length > 0 || this.#done || this.#slave === undefined) {
          onClosing();
          return original(...a);
        }
        this.#exitSeen();
        return sock;
      };
    }
    term.onData((data) => this.#onData(data));
  }

  #exitSeen(): void {
    if (this.#marker !== undefined || this.#slave === undefined) return;
    this.#marker = Buffer.from(`NOMADKIT-PTY-EOF-${randomBytes(12).toString("hex").toUpperCase()}`);
    // Blocking write on the threadpool: it completes as soon as we have read enough to make room.
    this.#writing = true;
    write(this.#slave, this.#marker, (err) => {
      this.#writing = false;
      if (this.#closeWhenWritten) this.#closeSlave();
      if (err) this.#finish();
      else this.#armFallback();
    });
    // The write waits as long as the terminal's output is stopped (^S with IXON, tcflow): the
    // marker may never pass, and nothing else will come. The fallback's close of the master hangs
    // the terminal up, which ends the write (EIO) and frees its threadpool thread.
    this.#armFallback();
  }

  #onData(chunk: Buffer): void {
    let data = chunk;
    if (this.#done) return;
    if (this.#marker !== undefined) {
      const joined = this.#carry.length > 0 ? Buffer.concat([this.#carry, chunk]) : chunk;
      const at = joined.indexOf(this.#marker);
      if (at >= 0) {
        if (at > 0) this.out.write(joined.subarray(0, at));
        this.#finish();
        return;
      }
      // Keep back a tail that could be the start of the marker.
      const keep = Math.min(this.#marker.length - 1, joined.length);
      this.#carry = Buffer.from(joined.subarray(joined.length - keep));
      data = joined.subarray(0, joined.length - keep);
      this.#armFallback();
    }
    if (data.length > 0 && !this.out.write(data) && !this.#paused) {
      this.#paused = true;
      clearTimeout(this.#fallback);
      this.term.pause();
      this.out.once("drain", () => {
        this.#paused = false;
        this.term.resume();
        this.#armFallback();
      });
    }
  }

  /** If the marker never shows up (the process left the terminal stopped), give up after a quiet spell. */
  #armFallback(): void {
    if (this.#marker === undefined || this.#paused || this.#done) return;
    clearTimeout(this.#fallback);
    this.#fallback = setTimeout(() => {
      if (this.#carry.length > 0) this.out.write(this.#carry);
      this.#finish();
    }, 2000);
  }

  #finish(): void {
    if (this.#done) return;
    this.#done = true;
    clearTimeout(this.#fallback);
    if (this.#paused) this.term.resume();
    this.#closeSlave();
    this.#destroy?.();
  }

  #closeSlave(): void {
    if (this.#slave === undefined) return;
    // Closed now, the pending write would reach whatever file gets the number next.
    if (this.#writing) {
      this.#closeWhenWritten = true;
      return;
    }
    const fd = this.#slave;
    this.#slave = undefined;
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
  }

  /** Stop reading for `out` now and let node-pty close the terminal (the reader is gone). */
  abandon(): void {
    this.#finish();
  }

  dispose(): void {
    clearTimeout(this.#fallback);
    this.#closeSlave();
  }
}
