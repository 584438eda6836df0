import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const packageName = "@nomadkit/protoc-gen-nomadkit";

/**
 * The file this module was loaded from. Read from V8's call sites because the module is compiled twice,
 * to ESM (where only `import.meta.url` would say) and to CommonJS (where only `__filename` would, and
 * `import.meta` does not compile): a call site names its file in both, as a path or a `file:` URL.
 */
function ownFile(): string {
  const { prepareStackTrace, stackTraceLimit } = Error;
  try {
    Error.stackTraceLimit = 1;
    Error.prepareStackTrace = (_, sites) => sites;
    const holder: { stack?: unknown } = {};
    Error.captureStackTrace(holder, ownFile);
    const file = (holder.stack as NodeJS.CallSite[] | undefined)?.[0]?.getFileName();
    if (file === undefined || file === null) throw new Error(`${packageName}: cannot tell which file it was loaded from`);
    return file.startsWith("file:") ? fileURLToPath(file) : file;
  } finally {
    Error.prepareStackTrace = prepareStackTrace;
    Error.stackTraceLimit = stackTraceLimit;
  }
}

/**
 * The `version` of this package's own package.json: the nearest one above this file that names the
 * package. src/, dist/esm/ and dist/cjs/ all sit inside the package, in the repo and installed in
 * node_modules alike (dist/cjs/package.json only sets the module type and is skipped).
 */
function packageVersion(): string {
  const start = dirname(ownFile());
  for (let dir = start; ; dir = dirname(dir)) {
    let text: string | undefined;
    try {
      text = readFileSync(join(dir, "package.json"), "utf8");
    } catch {
      text = undefined; // no package.json here: keep going up
    }
    const pkg = text === undefined ? undefined : (JSON.parse(text) as { name?: unknown; version?: unknown });
    if (pkg?.name === packageName && typeof pkg.version === "string") return pkg.version;
    if (dirname(dir) === dir) throw new Error(`${packageName}: found no package.json of its own above ${start}`);
  }
}

/** The `version` of this package's package.json. */
export const version: string = packageVersion();
