/**
 * Why a plugin command could not be started, told the way it is fixed: `spawn` only says
 * `spawn <cmd> EACCES` (not executable, or a directory) or `ENOENT` (missing, a missing `#!`
 * interpreter, or a missing working directory), never which.
 */
import { closeSync, openSync, readSync, statSync, type Stats } from "node:fs";
import { delimiter, isAbsolute, join, resolve } from "node:path";

/** libuv's search path when the child's environment has no PATH (_PATH_DEFPATH). */
const DEFAULT_PATH = "/usr/bin:/bin";

/**
 * What stopped `spawn(cmd)` with `err`, looked for the way execvp looks (`cmd` with a slash from
 * `cwd`, else each `PATH` entry): a missing working directory or file, a directory, a file without
 * execute permission, or a `#!` interpreter that does not exist. Falls back to `err.message`.
 */
export function describeSpawnFailure(
  cmd: string,
  err: NodeJS.ErrnoException,
  cwd: string | undefined,
  path: string | undefined,
): string {
  if (err.code !== "ENOENT" && err.code !== "EACCES") return err.message;
  const base = resolve(cwd ?? ".");
  if (cwd !== undefined && !statOf(base)?.isDirectory())
    return `its working directory ${base} does not exist`;
  const dirs = (path ?? DEFAULT_PATH).split(delimiter);
  const candidates = cmd.includes("/")
    ? [isAbsolute(cmd) ? cmd : resolve(base, cmd)]
    : dirs.map((d) => join(resolve(base, d || "."), cmd));
  // Whatever of them exists says why (execvp tries them in order, and reports the last failure).
  for (const file of candidates) {
    const st = statOf(file);
    if (st === undefined) continue;
    if (st.isDirectory()) return `${file} is a directory, not a program`;
    if ((st.mode & 0o111) === 0)
      return `${file} is not executable (mode ${(st.mode & 0o7777).toString(8).padStart(4, "0")}; chmod +x it)`;
    const interpreter =
      err.code === "ENOENT" && st.isFile() ? shebang(file) : undefined;
    if (interpreter !== undefined && statOf(interpreter) === undefined)
      return `its interpreter ${JSON.stringify(interpreter)} does not exist`;
  }
  if (err.code === "ENOENT") {
    if (cmd.includes("/")) return `${candidates[0]} does not exist`;
    return `no executable ${JSON.stringify(cmd)} in PATH (${dirs.join(delimiter)})`;
  }
  return err.message;
}

function statOf(file: string): Stats | undefined {
  try {
    return statSync(file);
  } catch {
    return undefined;
  }
}

/** The absolute interpreter of a `#!` script; undefined otherwise. */
function shebang(file: string): string | undefined {
  let head: string;
  try {
    // The first bytes only: a plugin is often a binary of tens of megabytes.
    const fd = openSync(file, "r");
    try {
      const buf = Buffer.alloc(256);
      head = buf
        .subarray(0, readSync(fd, buf, 0, buf.length, 0))
        .toString("latin1");
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
  if (!head.startsWith("#!")) return undefined;
  const interpreter = head.slice(2).split("\n")[0]!.trim().split(/\s+/)[0];
  return interpreter && isAbsolute(interpreter) ? interpreter : undefined;
}
