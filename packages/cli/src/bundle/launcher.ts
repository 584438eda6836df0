// The executable `nomadkit bundle` writes next to a plugin's bundle: what Nomad runs from its
// plugin_dir. Nomad starts and kills a driver several times while an agent boots, so this file is
// CommonJS (no ES module loader), runs the one-file bundle, and compiles it with the V8 code cache
// the bundle step made from a real start-up when that cache was made from exactly this bundle by
// this Node.js (no parsing or compiling of the functions start-up runs). An entry with top-level
// await can only be bundled as an ES module, which it imports instead (no code cache in Node.js 20).
//
// `launch` is never called in the CLI: its compiled text is the launcher's body
// (`launcherSource`), so it is type-checked with the rest of the package. It may use only its
// parameters and Node's globals (`require`, `__dirname`, `process`).

/** Environment variable that makes a launcher save (`write`) or report (`report`) its code cache. */
export const CODE_CACHE_ENV = "NOMADKIT_CODE_CACHE";

/** File names of a bundled plugin called `name`, relative to the bundle's directory. */
export function bundleFiles(name: string): {
  launcher: string;
  bundle: string;
  esmBundle: string;
  codeCache: string;
  executor: string;
  executorLauncher: string;
  executorCodeCache: string;
} {
  return {
    launcher: name,
    bundle: `${name}.cjs`,
    esmBundle: `${name}.mjs`,
    codeCache: `${name}.cjs.v8cache`,
    executor: `${name}-executor.cjs`,
    executorLauncher: `${name}-executor`,
    executorCodeCache: `${name}-executor.cjs.v8cache`,
  };
}

/** What one launcher runs, relative to its directory. */
interface LaunchFiles {
  bundle: string;
  esmBundle: string;
  codeCache: string;
  /** The task executor's entries for launchExecutor, the first that exists wins (a plugin's launcher). */
  executors: string[];
}

function launch(
  name: string,
  files: LaunchFiles,
  cacheEnv: string,
  importModule?: (url: string) => Promise<unknown>,
): void {
  const { readFileSync, writeFileSync, existsSync } =
    require("node:fs") as typeof import("node:fs");
  const { join } = require("node:path") as typeof import("node:path");
  const fail = (err: unknown): never => {
    process.stderr.write(
      `${name}: ${err instanceof Error && err.stack ? err.stack : String(err)}\n`,
    );
    process.exit(1);
  };
  const bundleFile = join(__dirname, files.bundle);
  const cacheFile = join(__dirname, files.codeCache);
  // The task executor bundled with the plugin, for launchExecutor, unless the operator chose one.
  if (!process.env.NOMADKIT_EXECUTOR_PATH) {
    const executor = files.executors
      .map((f) => join(__dirname, f))
      .find((f) => existsSync(f));
    if (executor !== undefined) process.env.NOMADKIT_EXECUTOR_PATH = executor;
  }
  if (importModule) {
    // Top-level await made the bundle an ES module (<name>.mjs): Node.js 20 has no code cache for those.
    if (process.env[cacheEnv] === "report")
      process.stderr.write(`${name}: code cache none (ES module bundle)\n`);
    const { pathToFileURL } = require("node:url") as typeof import("node:url");
    importModule(pathToFileURL(join(__dirname, files.esmBundle)).href).catch(
      fail,
    );
    return;
  }
  try {
    const { isAscii } = require("node:buffer") as typeof import("node:buffer");
    const { createHash } =
      require("node:crypto") as typeof import("node:crypto");
    const Module = require("node:module") as typeof import("node:module") & {
      wrap(source: string): string;
    };
    const { Script } = require("node:vm") as typeof import("node:vm");
    const bytes = readFileSync(bundleFile);
    // esbuild writes ASCII, which decodes fastest as latin1.
    let source = bytes.toString(isAscii(bytes) ? "latin1" : "utf8");
    // esbuild keeps the entry's `#!` line, which is valid only as a script's first characters.
    if (source.startsWith("#!")) source = `//${source.slice(2)}`;
    // V8 checks a cache against the source's length only; the cache starts with the SHA-256 of the
    // bundle it was made from, so a rebuilt bundle never runs with another build's code.
    const hash = createHash("sha256").update(bytes).digest();
    let cachedData: Buffer | undefined;
    let cacheState = "none";
    try {
      const cache = readFileSync(cacheFile);
      if (
        cache.length > hash.length &&
        cache.subarray(0, hash.length).equals(hash)
      )
        cachedData = cache.subarray(hash.length);
      else cacheState = "stale";
    } catch {
      // no cache: compile
    }
    const script = new Script(Module.wrap(source), {
      filename: bundleFile,
      cachedData,
    });
    if (cachedData !== undefined)
      cacheState = script.cachedDataRejected ? "rejected" : "used";
    const mode = process.env[cacheEnv];
    // "write": the bundle step's training run saves what start-up and shutdown compiled.
    if (mode === "write") {
      process.once("exit", (code) => {
        if (code === 0)
          writeFileSync(
            cacheFile,
            Buffer.concat([hash, script.createCachedData()]),
          );
      });
    }
    if (mode === "report")
      process.stderr.write(`${name}: code cache ${cacheState}\n`);
    const module = { exports: {}, filename: bundleFile };
    const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
    wrapper.call(
      module.exports,
      module.exports,
      Module.createRequire(bundleFile),
      module,
      bundleFile,
      __dirname,
    );
  } catch (err) {
    fail(err);
  }
}

/** A launcher script: a `node` shebang, `comment`, then `launch` called with these arguments. */
function launcherText(
  name: string,
  files: LaunchFiles,
  comment: readonly string[],
  esm = false,
): string {
  const args = [name, files, CODE_CACHE_ENV].map((a) => JSON.stringify(a));
  // Written out, not compiled: the CommonJS build of this package would turn import() into require().
  if (esm) args.push("(url) => import(url)");
  return [
    "#!/usr/bin/env node",
    ...comment.map((line) => `// ${line}`),
    '"use strict";',
    `(${launch.toString()})(${args.join(", ")});`,
    "",
  ].join("\n");
}

/**
 * The launcher's text for a plugin called `name`: a CommonJS script with a `node` shebang that runs
 * `<name>.cjs` (or, for `format` `esm`, `<name>.mjs`) from its own directory.
 */
export function launcherSource(
  name: string,
  format: "cjs" | "esm" = "cjs",
): string {
  const files = bundleFiles(name);
  return launcherText(
    name,
    {
      bundle: files.bundle,
      esmBundle: files.esmBundle,
      codeCache: files.codeCache,
      executors: [files.executorLauncher, files.executor],
    },
    [
      `${name}: a Nomad plugin made by \`nomadkit bundle\`. Keep this file next to ${format === "cjs" ? files.bundle : files.esmBundle}; put it`,
      "(or a symlink, or a wrapper naming node) in Nomad's plugin_dir. Started by hand it says so and exits 1.",
    ],
    format === "esm",
  );
}

/**
 * The task executor's launcher for a plugin called `name`: `<name>-executor`, which runs
 * `<name>-executor.cjs` with its own code cache (`launchExecutor` starts it with node).
 */
export function executorLauncherSource(name: string): string {
  const files = bundleFiles(name);
  return launcherText(
    files.executorLauncher,
    {
      bundle: files.executor,
      esmBundle: files.executor, // never imported: the executor bundle is CommonJS
      codeCache: files.executorCodeCache,
      executors: [],
    },
    [
      `${files.executorLauncher}: the task executor of the Nomad plugin ${name}, made by \`nomadkit bundle\`. Keep this`,
      `file next to ${files.executor}; the plugin's launcher points launchExecutor at it.`,
    ],
  );
}
