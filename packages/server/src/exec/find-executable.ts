/**
 * Finding a command's executable the way execvp does, before spawning it: a missing command is
 * then a clear InvalidArgument naming the request field, not a child that dies with ENOENT.
 * Shared by the in-plugin exec engine and the executor.
 */
import { accessSync, chmodSync, closeSync, constants, fstatSync, openSync, readSync, statSync } from "node:fs";
import { delimiter, isAbsolute, join, resolve } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";

/** execvp's search path when the environment has no PATH. */
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/**
 * The absolute path of `file`: as given (relative to `cwd`) when it contains a slash, else the
 * first executable regular file named `file` in `env.PATH` (relative entries from `cwd`).
 * Throws InvalidArgument naming `field` when it is empty, nothing fits, or only a file without
 * execute permission does.
 */
export function findExecutable(file: string, env: Readonly<Record<string, string>>, cwd: string | undefined, field: string): string {
  if (!file) throw new ConnectError(`${field}: must not be empty`, Code.InvalidArgument);
  const r = search(file, env, cwd);
  if (r.path !== undefined) return r.path;
  if (r.notExecutable !== undefined) throw notExecutable(r.notExecutable, field);
  throw new ConnectError(`${field}: executable ${JSON.stringify(file)} not found${file.includes("/") ? "" : " in PATH"}`, Code.InvalidArgument);
}

/**
 * What to hand a program that execs a command by name the way execvp does (node-pty, setpriv,
 * nsenter, coreutils' env, a shell gate), for the command to get `argv0` as its argv[0] and run
 * `file`: `argv0` itself when that lookup (in `env.PATH` and `cwd`, as {@link findExecutable}'s)
 * finds `file`, else `file`, which the command then sees as its argv[0]. Also `file` when `env` has
 * no PATH: execvp's default search path is not {@link findExecutable}'s.
 */
export function execvpName(argv0: string, file: string, env: Readonly<Record<string, string>>, cwd: string | undefined): string {
  if (argv0 === file || (!argv0.includes("/") && env.PATH === undefined)) return file;
  return search(argv0, env, cwd).path === file ? argv0 : file;
}

function search(file: string, env: Readonly<Record<string, string>>, cwd: string | undefined): { path?: string; notExecutable?: string } {
  const base = cwd ?? process.cwd();
  const candidates = file.includes("/")
    ? [isAbsolute(file) ? file : resolve(base, file)]
    : (env.PATH ?? DEFAULT_PATH).split(delimiter).map((d) => join(resolve(base, d || "."), file));
  let skipped: string | undefined;
  for (const c of candidates) {
    if (!isFile(c)) continue;
    try {
      accessSync(c, constants.X_OK);
      return { path: c };
    } catch {
      skipped ??= c; // execvp goes on too; kept to say why nothing was found
    }
  }
  return skipped === undefined ? {} : { notExecutable: skipped };
}

/**
 * A script whose interpreter is missing or not executable: spawn would fail with a misleading
 * ENOENT/EACCES of the script itself, while behind a wrapper (a cgroup gate, setpriv, nsenter) or
 * node-pty's fork it would only be an exit status (127, or node-pty's 1). Throws InvalidArgument
 * naming the interpreter (and `field`, when given) instead.
 */
export function checkInterpreter(file: string, field?: string): void {
  let head = "";
  try {
    // Non-blocking and files only: a task may swap its command for a FIFO after the lookup, and a
    // blocking open of that would stop the executor until someone writes to it.
    const fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK);
    try {
      if (!fstatSync(fd).isFile()) return;
      const buf = Buffer.alloc(256);
      head = buf.subarray(0, readSync(fd, buf, 0, buf.length, 0)).toString("latin1");
    } finally {
      closeSync(fd);
    }
  } catch {
    return; // spawn reports what it cannot read
  }
  if (!head.startsWith("#!")) return;
  const interpreter = head.slice(2).split("\n")[0]!.trim().split(/\s+/)[0];
  // A relative one is the kernel's to find, in the command's working directory (not this process's).
  if (!interpreter || !isAbsolute(interpreter)) return;
  try {
    accessSync(interpreter, constants.X_OK);
  } catch (err) {
    throw new ConnectError(
      `${field ? `${field}: ` : ""}cannot start ${JSON.stringify(file)}: its interpreter ${JSON.stringify(interpreter)}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      Code.InvalidArgument,
    );
  }
}

/**
 * Throws `code` naming `field` unless `dir` is a directory. Checked before a spawn: Node reports a
 * missing cwd as ENOENT of the command ("spawn /bin/sh ENOENT"), and node-pty as the command's own
 * output and exit status 1, so a task directory deleted under a task would read as a missing shell.
 */
export function assertDirectory(dir: string, field: string, code: Code): void {
  let why = "does not exist";
  try {
    if (statSync(dir).isDirectory()) return;
    why = "is not a directory";
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") why = `cannot be read (${(err as NodeJS.ErrnoException).code})`;
  }
  throw new ConnectError(`${field}: ${JSON.stringify(dir)} ${why}`, code);
}

function isFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

function notExecutable(path: string, field: string, why = ""): ConnectError {
  return new ConnectError(`${field}: ${JSON.stringify(path)} is not executable${why}`, Code.InvalidArgument);
}

/**
 * Finds a task's command the way Nomad's executor does (`lookupBin`), then makes it executable for
 * everyone (`makeExecutable`: adds 0555), so an artifact unpacked without its exec bits still runs.
 * Looks, in order, at `<taskDir>/local/<file>`, `<taskDir>/<file>` (also for names with a slash such
 * as `local/app`), `file` itself when absolute, and last the task's PATH (`env.PATH`; a relative
 * name with a slash is taken from `cwd` there). Throws InvalidArgument naming `field` when nothing
 * is found or the file found cannot be made executable.
 *
 * @example
 * ```ts
 * import { findTaskBinary } from "@nomadkit/server/executor";
 * // An artifact in <taskDir>/local wins over PATH, and gets a+rx when it lacks it.
 * const file = findTaskBinary("app", "/var/nomad/alloc/1/web", { PATH: "/usr/bin:/bin" }, undefined, "cmd");
 * ```
 */
export function findTaskBinary(
  file: string,
  taskDir: string | undefined,
  env: Readonly<Record<string, string>>,
  cwd: string | undefined,
  field: string,
): string {
  if (!file) throw new ConnectError(`${field}: must not be empty`, Code.InvalidArgument);
  // join() cleans like Go's filepath.Join: an absolute name is looked up under the task directory too.
  const inTask = taskDir ? [join(taskDir, "local", file), join(taskDir, file)] : [];
  // Nomad's host step takes a path only when absolute, never relative to the executor's directory.
  let path = [...inTask, ...(isAbsolute(file) ? [file] : [])].find(isFile);
  if (path === undefined) {
    const r = search(file, env, cwd);
    if (r.notExecutable !== undefined && r.path === undefined) {
      // Nomad's LookPath passes over it as well (and would say "not found"); it is not chmodded.
      throw notExecutable(r.notExecutable, field);
    }
    if (r.path === undefined) {
      const last = file.includes("/") ? JSON.stringify(resolve(cwd ?? process.cwd(), file)) : "the task's PATH";
      const places = new Set([...inTask.map((p) => JSON.stringify(p)), last]);
      throw new ConnectError(`${field}: executable ${JSON.stringify(file)} not found (looked for ${[...places].join(", ")})`, Code.InvalidArgument);
    }
    path = r.path;
  }
  makeExecutable(path, field);
  return path;
}

/** Nomad's makeExecutable: adds r-x for owner, group and others when any of it is missing. */
function makeExecutable(path: string, field: string): void {
  const perm = statSync(path).mode & 0o7777;
  if ((perm & 0o555) === 0o555) return;
  try {
    chmodSync(path, perm | 0o555);
  } catch (err) {
    // Nomad fails here; a file this process may run anyway (one it cannot chmod) is let through.
    try {
      accessSync(path, constants.X_OK);
      return;
    } catch {
      // report why it could not be made executable
    }
    throw notExecutable(path, field, ` and cannot be made so: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}
