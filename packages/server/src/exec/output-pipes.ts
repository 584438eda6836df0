/**
 * Named pipes (FIFOs) carrying a process's stdout and stderr to this process, which reads them with
 * `onread` into reused buffers (read-buffers.ts).
 *
 * Why not what libuv gives a child's stdio "pipe": that is a unix socket pair, and at exec rates the
 * kernel's per-write socket buffers cost the reader 0.58–0.60 CPU s/GiB where a pipe costs 0.36–0.38
 * (BENCHMARKS.md, twelfth round). Node has no pipe(2), mkfifo(3) or fcntl(2), so a pair of FIFOs is
 * made by the `mkfifo` utility (one spawn, a few ms) in a private 0700 directory, its capacity
 * raised to 1 MiB by a one-line perl where there is one (as root), and the pair serves the next session once
 * the last one is done with it (both reached EOF, and nobody will open them by path any more);
 * otherwise it is removed.
 *
 * A FIFO's reader sees EOF whenever no writer has it open, also before the first one came: so the
 * pair holds write ends of its own (`writers`) until the process (or, with the output handoff, the
 * process's executor) surely has its copies, and {@link OutputPipes.closeWriters} then lets EOF mean
 * "every process holding the output let go".
 */
import { spawn } from "node:child_process";
import { closeSync, constants, lstatSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, statSync } from "node:fs";
import { Socket, type SocketConstructorOpts } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Writable } from "node:stream";
import { isProcessAlive } from "../executor/pids.js";
import { readSocketInto } from "./read-buffers.js";

/** The two FIFOs in a pair's directory. */
export const OUTPUT_PIPE_NAMES = ["stdout", "stderr"] as const;
/** Idle pairs kept for reuse, per process. */
const KEEP_IDLE = 8;
/**
 * Pipe capacity asked for (Linux F_SETPIPE_SZ; 1 MiB is `pipe-max-size`'s default).
 * With the default 64 KiB every read is at most that, and so is, mostly, every output message: a
 * GiB of output was ~12,000 messages instead of ~2,000, and per-message costs dominated.
 */
const PIPE_SIZE = 1024 * 1024;
const F_SETPIPE_SZ = 1031;

interface Pair {
  readonly dir: string;
  /**
   * Read ends held (never read) while the pair exists: a pipe's buffer, and the capacity it was
   * given, last only while someone has it open.
   */
  readonly keepers: readonly number[];
}

let root: string | undefined;
let made = 0;
const idle: Pair[] = [];

/** Prefix of a process's FIFO directory: `nomadkit-pipes-<pid>-XXXXXX` in the temporary directory. */
const ROOT_PREFIX = "nomadkit-pipes-";
/** S_ISVTX (Node's fs.constants lacks it). */
const STICKY = 0o1000;

/**
 * Removes the FIFO directories of processes that are gone. Each process removes its own as it
 * exits, but not when it is killed (Nomad SIGKILLs a plugin that does not exit within 2 s of its
 * Shutdown), and those would pile up in the temporary directory.
 */
function removeOrphanedRoots(): void {
  const tmp = tmpdir();
  const uid = process.getuid?.();
  let names: string[];
  try {
    // Anyone may create entries in a shared temporary directory, and a recursive removal follows
    // whatever it finds: a plugin runs as root, so a directory planted by another user (with a
    // subdirectory swapped for a symlink at the right moment) would have root delete files
    // anywhere. Only our own user's private directories are removed, and only where other users
    // cannot rename entries (the sticky bit, as /tmp has, or no write access for them at all).
    const st = statSync(tmp);
    if ((st.mode & 0o022) !== 0 && (st.mode & STICKY) === 0) return;
    names = readdirSync(tmp);
  } catch {
    return;
  }
  for (const name of names) {
    const m = /^nomadkit-pipes-(\d+)-/.exec(name);
    if (m === null || Number(m[1]) === process.pid || isProcessAlive(Number(m[1]))) continue;
    const path = join(tmp, name);
    try {
      const st = lstatSync(path);
      // mkdtemp made ours 0700: nobody else can change what is inside.
      if (!st.isDirectory() || (uid !== undefined && st.uid !== uid) || (st.mode & 0o077) !== 0) continue;
      rmSync(path, { recursive: true, force: true });
    } catch {
      // gone meanwhile, or not ours to remove
    }
  }
}

/** A new directory for a pair, in this process's private one (made again if a cleaner removed it). */
function pairDir(): string {
  for (let attempt = 0; ; attempt++) {
    if (root === undefined) {
      removeOrphanedRoots();
      const dir = (root = mkdtempSync(join(tmpdir(), `${ROOT_PREFIX}${process.pid}-`)));
      process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
    }
    const dir = join(root, String(made++));
    try {
      mkdirSync(dir, { mode: 0o700 });
      return dir;
    } catch (err) {
      // A long-lived plugin's temporary directory may be cleaned up under it (systemd-tmpfiles).
      if ((err as NodeJS.ErrnoException).code !== "ENOENT" || attempt > 0) throw err;
      root = undefined;
    }
  }
}

/** Run `file args` with `stdio`; resolves with whether it exited 0 (false if it could not start). */
function run(file: string, args: string[], stdio: ("ignore" | number)[]): Promise<boolean> {
  return new Promise((resolve) => {
    const child = spawn(file, args, { stdio });
    child.once("error", () => resolve(false));
    child.once("exit", (code) => resolve(code === 0));
  });
}

async function makePair(): Promise<Pair> {
  const dir = pairDir();
  const keepers: number[] = [];
  try {
    if (!(await run("mkfifo", ["-m", "600", ...OUTPUT_PIPE_NAMES.map((n) => join(dir, n))], ["ignore", "ignore", "ignore"]))) {
      throw new Error("mkfifo failed or is not on PATH");
    }
    for (const n of OUTPUT_PIPE_NAMES) keepers.push(openSync(join(dir, n), constants.O_RDONLY | constants.O_NONBLOCK));
  } catch (err) {
    for (const fd of keepers) closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  // Node has no fcntl(2); perl (essential on Debian, near universal elsewhere) makes the call on
  // the keepers it inherits as stdout and stderr. Without it the pipes keep the default capacity.
  // Only as root (as Nomad runs plugins): Linux charges a pipe's capacity to its user, and an
  // unprivileged user over pipe-user-pages-soft (64 MiB) gets tiny pipes everywhere, not only here.
  if (process.platform === "linux" && process.getuid?.() === 0) {
    await run("perl", ["-e", `fcntl(STDOUT, ${F_SETPIPE_SZ}, ${PIPE_SIZE}); fcntl(STDERR, ${F_SETPIPE_SZ}, ${PIPE_SIZE})`], ["ignore", keepers[0]!, keepers[1]!]);
  }
  return { dir, keepers };
}

function removePair(pair: Pair): void {
  for (const fd of pair.keepers) closeSync(fd);
  rmSync(pair.dir, { recursive: true, force: true });
}

/** A pair of FIFOs being read into a process's stdout and stderr writables ({@link openOutputPipes}). */
export interface OutputPipes {
  /** The directory holding the FIFOs ({@link OUTPUT_PIPE_NAMES}): what the output handoff names. */
  readonly dir: string;
  /** Our write ends, stdout's and stderr's: a local process's stdio. Closed by {@link closeWriters}. */
  readonly writers: readonly [number, number];
  /** Resolves once both FIFOs reached EOF or were closed by {@link close}. */
  readonly eof: Promise<void>;
  /** Close our write ends (once every writer that should have one has opened or inherited its own). */
  closeWriters(): void;
  /**
   * Stop reading and close what is still open. With `reusable`, the caller vouches that nobody will
   * open these FIFOs by path any more: if both also reached EOF the pair serves a later session.
   */
  close(reusable?: boolean): void;
}

/**
 * FIFOs for a process's stdout and stderr, read into `stdout` and `stderr` (writables keeping the
 * read-buffers promise: an exec session's), which are ended at EOF unless `end` is false. Rejects
 * if they cannot be made (no `mkfifo`); plain pipes will do then.
 *
 * @example
 * ```ts
 * const pipes = await openOutputPipes(session.stdout, session.stderr);
 * const child = spawn(file, args, { stdio: ["pipe", ...pipes.writers] });
 * pipes.closeWriters();
 * child.once("exit", () => void pipes.eof.then(() => pipes.close(true)));
 * ```
 */
export async function openOutputPipes(stdout: Writable, stderr: Writable, { end = true }: { end?: boolean } = {}): Promise<OutputPipes> {
  let pair: Pair;
  let readers: number[];
  let writers: number[];
  for (;;) {
    const reused = idle.pop();
    pair = reused ?? (await makePair());
    const paths = OUTPUT_PIPE_NAMES.map((n) => join(pair.dir, n));
    const fds: number[] = [];
    const open = (path: string, flags: number) => {
      fds.push(openSync(path, flags | constants.O_NONBLOCK));
      return fds.at(-1)!;
    };
    try {
      // Readers first: opening a FIFO to write without a reader fails (ENXIO, non-blocking).
      readers = paths.map((p) => open(p, constants.O_RDONLY));
      // Non-blocking here too; libuv makes a child's stdio blocking again.
      writers = paths.map((p) => open(p, constants.O_WRONLY));
      break;
    } catch (err) {
      for (const fd of fds) closeSync(fd);
      removePair(pair);
      // An idle pair's files removed under it (a temporary-file cleaner): try another.
      if (reused === undefined) throw err;
    }
  }
  const { dir } = pair;
  let ended = 0;
  const sockets = [stdout, stderr].map((target, i) => {
    const reader = readSocketInto(target, { end });
    // `onread` is honoured by the constructor too (Node's types list it for connect() only).
    const socket = new Socket({ fd: readers[i]!, readable: true, writable: false, onread: reader.onread } as SocketConstructorOpts);
    socket.once("end", () => ended++);
    return { socket, closed: reader.attach(socket) };
  });
  let writersOpen = true;
  const closeWriters = () => {
    if (!writersOpen) return;
    writersOpen = false;
    for (const fd of writers) closeSync(fd);
  };
  let closed = false;
  return {
    dir,
    writers: [writers[0]!, writers[1]!],
    eof: Promise.all(sockets.map((s) => s.closed)).then(() => undefined),
    closeWriters,
    close(reusable = false) {
      if (closed) return;
      closed = true;
      closeWriters();
      const drained = ended === sockets.length;
      for (const s of sockets) s.socket.destroy();
      if (reusable && drained && idle.length < KEEP_IDLE) idle.push(pair);
      else removePair(pair);
    },
  };
}

/** For tests and diagnostics: pairs made so far, and pairs idle now. */
export function outputPipeStats(): { made: number; idle: number } {
  return { made, idle: idle.length };
}
