/**
 * Finding a command's executable the way execvp does, before spawning it: a missing command is
 * then a clear InvalidArgument naming the request field, not a child that dies with ENOENT.
 * Shared by the in-plugin exec engine and the executor.
 */
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, isAbsolute, join, resolve } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";

/** execvp's search path when the environment has no PATH. */
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/**
 * The absolute path of `file`: as given (relative to `cwd`) when it contains a slash, else the
 * first executable regular file named `file` in `env.PATH` (relative entries from `cwd`).
 * Throws InvalidArgument naming `field` when it is empty or nothing fits.
 */
export function findExecutable(file: string, env: Readonly<Record<string, string>>, cwd: string | undefined, field: string): string {
  if (!file) throw new ConnectError(`${field}: must not be empty`, Code.InvalidArgument);
  const base = cwd ?? process.cwd();
  const candidates = file.includes("/")
    ? [isAbsolute(file) ? file : resolve(base, file)]
    : (env.PATH ?? DEFAULT_PATH).split(delimiter).map((d) => join(resolve(base, d || "."), file));
  for (const c of candidates) {
    try {
      if (!statSync(c).isFile()) continue;
      accessSync(c, constants.X_OK);
      return c;
    } catch {
      // next candidate
    }
  }
  throw new ConnectError(`${field}: executable ${JSON.stringify(file)} not found${file.includes("/") ? "" : " in PATH"}`, Code.InvalidArgument);
}
