/**
 * `mkdir -p` that fails where it cannot make a directory, for every place that makes a directory
 * named by a user (the CLI's `bundle --out`, {@link createTaskDirs}' allocation directory).
 */
import { mkdirSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";

/**
 * Makes `dir` and whatever parents of it are missing, as `mkdirSync(dir, { recursive: true })`
 * does: an existing directory is fine, an existing file is not (EEXIST). Returns the first
 * directory it made, `undefined` when `dir` was there. Throws Node's error of the `mkdir` that
 * failed, which names the path (`ENOENT: no such file or directory, mkdir '/proc/x'`).
 *
 * Node's recursive `mkdirSync` (20.x) never returns where a directory cannot be made under an
 * existing parent and the system says ENOENT, as anywhere under /proc: it loops on the event loop's
 * thread, so not even Ctrl-C ends it. This makes one level at a time instead.
 *
 * @example
 * ```ts
 * import { makeDirectory } from "@nomadkit/client";
 * makeDirectory("/tmp/out/plugins"); // "/tmp/out" when neither existed
 * makeDirectory("/proc/nope/out"); // throws ENOENT naming /proc/nope, at once
 * ```
 */
export function makeDirectory(dir: string): string | undefined {
  const missing: string[] = [];
  for (let d = resolve(dir); ; d = dirname(d)) {
    const found = lookUp(d);
    if (found === "there") break;
    missing.push(d);
    // Unreachable (EACCES, say): its mkdir says why.
    if (found === "unknown" || dirname(d) === d) break;
  }
  missing.reverse();
  for (const d of missing) {
    try {
      mkdirSync(d);
    } catch (err) {
      // Made meanwhile by someone else: as good as made here.
      if ((err as NodeJS.ErrnoException).code !== "EEXIST" || !isDirectory(d)) throw err;
    }
  }
  if (!isDirectory(dir)) {
    throw Object.assign(new Error(`EEXIST: file already exists, mkdir '${dir}'`), { code: "EEXIST", errno: -17, syscall: "mkdir", path: dir });
  }
  return missing[0];
}

/** Whether `path` exists: "missing" too below a file (ENOTDIR), "unknown" when it cannot be told. */
function lookUp(path: string): "there" | "missing" | "unknown" {
  try {
    return statSync(path, { throwIfNoEntry: false }) === undefined ? "missing" : "there";
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ENOTDIR" ? "missing" : "unknown";
  }
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
