// The executable `nomadkit bundle` writes next to a plugin's bundle: what Nomad runs from its
// plugin_dir. Nomad starts and kills a driver several times while an agent boots, so this file is
// CommonJS (no ES module loader), runs the one-file bundle, and compiles it with the V8 code cache
// the bundle step made from a real start-up when that cache was made from exactly this bundle by
// this Node.js (no parsing or compiling of the functions start-up runs). An entry with top-level
// await can only be bundled as an ES module, which it imports instead (no code cache in Node.js 20).
//
// Nomad's first launch of a plugin while an agent starts asks only the health check, PluginInfo and
// ConfigSchema. When the bundle step recorded those answers from exactly this bundle and fast path
// (`<name>.load.json` holds the bundle's build stamp and the fast path's SHA-256), the launcher
// starts `<name>-load.cjs` instead
// (the go-plugin transport of the plugin's own @nomadkit/server, see its goplugin/prelude.ts),
// which answers them from the recording and runs the bundle only for the first other call, handing
// the transport over. Files of another build (an upgrade that copied only some of the directory's
// files) are not used; the launcher tells the plugin, which logs why (goplugin/launcher-report.ts).
//
// `launch` is never called in the CLI: its compiled text is the launcher's body
// (`launcherSource`), so it is type-checked with the rest of the package. It may use only its
// parameters and Node's globals (`require`, `__dirname`, `process`).

/** Environment variable that makes a launcher save (`write`) or report (`report`) its code cache. */
export const CODE_CACHE_ENV = "NOMADKIT_CODE_CACHE";

/**
 * With {@link CODE_CACHE_ENV} `write`: the directory the bundle will be installed in, when the
 * run happens elsewhere (nomadkit bundle's staging directory). V8 keeps the file name a code cache
 * was made with, and stack traces of a script compiled from the cache name that file.
 */
export const CODE_CACHE_DIR_ENV = `${CODE_CACHE_ENV}_DIR`;

/** What a launcher's comment says it is: how a later `nomadkit bundle` knows it may replace it. */
export const LAUNCHER_MARK = "made by `nomadkit bundle`";

/** File names of a bundled plugin called `name`, relative to the bundle's directory. */
export function bundleFiles(name: string): {
  launcher: string;
  bundle: string;
  esmBundle: string;
  codeCache: string;
  executor: string;
  executorLauncher: string;
  executorCodeCache: string;
  prelude: string;
  loadRecording: string;
  loadTransport: string;
} {
  return {
    launcher: name,
    bundle: `${name}.cjs`,
    esmBundle: `${name}.mjs`,
    codeCache: `${name}.cjs.v8cache`,
    executor: `${name}-executor.cjs`,
    executorLauncher: `${name}-executor`,
    executorCodeCache: `${name}-executor.cjs.v8cache`,
    prelude: `${name}-load.cjs`,
    loadRecording: `${name}.load.json`,
    // Written by the recording run's launcher, merged into loadRecording by the bundle step.
    loadTransport: `${name}.load.json.transport`,
  };
}

/** Global through which a recording run's plugin reports its transport options (see the server's prelude.ts). */
export const TRANSPORT_RECORDER_KEY = "@nomadkit/server.transportRecorder";

/** Global through which the launcher tells the plugin what to log about its files (the server's goplugin/launcher-report.ts). */
export const LAUNCHER_REPORT_KEY = "@nomadkit/server.launcherReport";

/**
 * How a plugin's bundle ends: this, its build stamp (64 hex digits) and a newline. The launcher reads
 * the stamp from the file's last bytes, to tie the bundle to the load recording without reading
 * and hashing 0.7 MB at every load launch.
 */
export const BUILD_STAMP_PREFIX = "// nomadkit-bundle build ";

/** What one launcher runs, relative to its directory. */
interface LaunchFiles {
  bundle: string;
  esmBundle: string;
  codeCache: string;
  /** The task executor's entries for launchExecutor, the first that exists wins (a plugin's launcher). */
  executors: string[];
  /** SHA-256 (hex) of each executor file as bundled with the plugin, checked by the plugin after start-up. */
  executorSha256?: Record<string, string>;
  /** The fast path for load launches and its recording (a plugin's launcher). */
  prelude?: string;
  loadRecording?: string;
  loadTransport?: string;
}

function launch(
  name: string,
  files: LaunchFiles,
  cacheEnv: string,
  recorderKey: string,
  reportKey: string,
  stampPrefix: string,
  importModule?: (url: string) => Promise<unknown>,
): void {
  const { readFileSync, writeFileSync, existsSync, openSync, fstatSync, readSync, closeSync } =
    require("node:fs") as typeof import("node:fs");
  const { join } = require("node:path") as typeof import("node:path");
  const { createHash } = require("node:crypto") as typeof import("node:crypto");
  const fail = (err: unknown): never => {
    process.stderr.write(
      `${name}: ${err instanceof Error && err.stack ? err.stack : String(err)}\n`,
    );
    process.exit(1);
  };
  // "write": the bundle step's recording run (the plugin's code cache, its transport options);
  // "report": say on stderr what was used.
  const mode = process.env[cacheEnv];
  // Where the scripts will live (see CODE_CACHE_DIR_ENV): the name V8 keeps in the cache made now.
  const scriptDir = mode === "write" ? process.env[`${cacheEnv}_DIR`] : undefined;
  const bundleFile = join(__dirname, files.bundle);
  // For the plugin's log (its servePlugin takes it): nothing is read or hashed here for it.
  const report: { warnings: string[]; executorFiles?: Record<string, string> } = { warnings: [] };
  (globalThis as Record<symbol, unknown>)[Symbol.for(reportKey)] = report;
  // The task executor bundled with the plugin, for launchExecutor, unless the operator chose one.
  if (!process.env.NOMADKIT_EXECUTOR_PATH) {
    const executor = files.executors
      .map((f) => join(__dirname, f))
      .find((f) => existsSync(f));
    if (executor !== undefined) process.env.NOMADKIT_EXECUTOR_PATH = executor;
    const expected = Object.entries(files.executorSha256 ?? {});
    if (expected.length > 0)
      report.executorFiles = Object.fromEntries(
        expected.map(([f, sha256]) => [join(__dirname, f), sha256]),
      );
  }

  /** SHA-256 of `b`. */
  const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest();

  /**
   * The build stamp `file` ends with (its last line, see BUILD_STAMP_PREFIX) and the file's size;
   * undefined if it has no stamp.
   */
  const buildStamp = (file: string): { stamp: string; size: number } | undefined => {
    let fd: number | undefined;
    try {
      fd = openSync(file, "r");
      const size = fstatSync(fd).size;
      const tail = Buffer.alloc(Math.min(size, stampPrefix.length + 65));
      readSync(fd, tail, 0, tail.length, size - tail.length);
      const text = tail.toString("latin1");
      const stamp = text.slice(-65, -1);
      return text.endsWith(`${stampPrefix}${stamp}\n`) && /^[0-9a-f]{64}$/.test(stamp) ? { stamp, size } : undefined;
    } catch {
      return undefined;
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
  };

  /**
   * Runs the CommonJS file `file` compiled with the V8 code cache `cacheFile` when that cache was
   * made from exactly this file by this Node.js; with `save`, writes the cache of what ran as the
   * process exits cleanly. With `main`, the file is the process's main module, as with `node file`.
   * Returns the module's exports.
   */
  const runCached = (
    file: string,
    cacheFile: string,
    label: string,
    save: boolean,
    main: boolean,
  ): unknown => {
    const { isAscii } = require("node:buffer") as typeof import("node:buffer");
    const { dirname, relative } = require("node:path") as typeof import("node:path");
    const Module = require("node:module") as typeof import("node:module") & {
      wrap(source: string): string;
      _nodeModulePaths(dir: string): string[];
    };
    const { Script } = require("node:vm") as typeof import("node:vm");
    const bytes = readFileSync(file);
    // esbuild writes ASCII, which decodes fastest as latin1.
    let source = bytes.toString(isAscii(bytes) ? "latin1" : "utf8");
    // esbuild keeps the entry's `#!` line, which is valid only as a script's first characters.
    if (source.startsWith("#!")) source = `//${source.slice(2)}`;
    // V8 checks a cache against the source's length only, and deserialises a damaged one (a crash,
    // not a rejection). The cache file starts with the SHA-256 of the file it was made from, so a
    // rebuilt bundle never runs with another build's code, then the SHA-256 of the cache itself.
    const hash = sha256(bytes);
    let cachedData: Buffer | undefined;
    let cacheState = "none";
    try {
      const cache = readFileSync(cacheFile);
      const data = cache.subarray(2 * hash.length);
      if (
        data.length > 0 &&
        cache.subarray(0, hash.length).equals(hash) &&
        cache.subarray(hash.length, 2 * hash.length).equals(sha256(data))
      )
        cachedData = data;
      else cacheState = "stale";
    } catch {
      // no cache: compile
    }
    const script = new Script(Module.wrap(source), {
      filename:
        scriptDir === undefined
          ? file
          : join(scriptDir, relative(__dirname, file)),
      cachedData,
    });
    if (cachedData !== undefined)
      cacheState = script.cachedDataRejected ? "rejected" : "used";
    if (save) {
      process.once("exit", (code) => {
        if (code !== 0) return;
        const data = script.createCachedData();
        writeFileSync(cacheFile, Buffer.concat([hash, sha256(data), data]));
      });
    }
    if (mode === "report")
      process.stderr.write(`${label}: code cache ${cacheState}\n`);
    // A module of its own, as Node's loader makes one: a bundled CommonJS entry's
    // `if (require.main === module)` holds, and so does a package's check of require.main.
    const module = new Module(file);
    module.filename = file;
    module.paths = Module._nodeModulePaths(dirname(file));
    if (main) {
      module.id = ".";
      // Node gives every require function made from now on (this one, those of the packages it
      // loads from node_modules) process.mainModule as `main`: the launcher's module until now.
      process.mainModule = module;
    }
    const moduleRequire = Module.createRequire(file);
    const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
    wrapper.call(
      module.exports,
      module.exports,
      moduleRequire,
      module,
      file,
      dirname(file),
    );
    module.loaded = true;
    return module.exports;
  };

  /**
   * Runs the plugin's bundle: throws what its CommonJS code threw, or returns the ES module's
   * import, which rejects with what it threw. The fast path answers the calls waiting for the
   * plugin with that error; without it, {@link startPlugin} ends the process with it.
   */
  const runPlugin = (): Promise<unknown> | undefined => {
    if (importModule) {
      // Top-level await made the bundle an ES module (<name>.mjs): Node.js 20 has no code cache for those.
      if (mode === "report")
        process.stderr.write(`${name}: code cache none (ES module bundle)\n`);
      const { pathToFileURL } =
        require("node:url") as typeof import("node:url");
      return importModule(pathToFileURL(join(__dirname, files.esmBundle)).href);
    }
    runCached(
      bundleFile,
      join(__dirname, files.codeCache),
      name,
      mode === "write",
      true,
    );
    return undefined;
  };

  /** Runs the plugin's bundle, its failure ending the process. */
  const startPlugin = (): void => {
    try {
      runPlugin()?.catch(fail);
    } catch (err) {
      fail(err);
    }
  };

  if (
    files.prelude !== undefined &&
    files.loadRecording !== undefined &&
    files.loadTransport !== undefined
  ) {
    const recordingFile = join(__dirname, files.loadRecording);
    const preludeFile = join(__dirname, files.prelude);
    if (mode === "write") {
      // servePlugin reports its transport options here.
      const transportFile = join(__dirname, files.loadTransport);
      (globalThis as Record<symbol, unknown>)[Symbol.for(recorderKey)] = (
        options: unknown,
      ) => writeFileSync(transportFile, JSON.stringify(options ?? null));
    } else if (existsSync(recordingFile)) {
      try {
        // Unreadable (a damaged file) counts as stale: the plugin serves every call itself.
        const readRecording = (): {
          version?: number;
          build?: string;
          bundleSize?: number;
          preludeSha256?: string;
        } | null => {
          try {
            return JSON.parse(readFileSync(recordingFile, "utf8")) as {
              version?: number;
            } | null;
          } catch {
            return null;
          }
        };
        const recording = readRecording();
        const bundleName = importModule ? files.esmBundle : files.bundle;
        // Why the fast path is not used: the recording, the bundle and the fast path must all come
        // from one bundle step (a fast path of another build would serve the plugin's transport).
        let stale: string;
        if (recording === null || typeof recording !== "object")
          stale = `${files.loadRecording} cannot be read`;
        else if (recording.version !== 3)
          stale = `${files.loadRecording} was written by another version of nomadkit bundle`;
        else {
          // The stamp is the build's (the SHA-256 of what esbuild wrote): a bundle of another build
          // ends with another one; the size catches most edits in place. Its code is hashed only if
          // the plugin loads (for its code cache).
          const bundle = buildStamp(join(__dirname, bundleName));
          if (
            typeof recording.build !== "string" ||
            recording.build !== bundle?.stamp ||
            recording.bundleSize !== bundle.size
          )
            stale = `${files.loadRecording} was not recorded from this ${bundleName}`;
          else {
            // Hashed as read and compiled from the same bytes: nothing can change in between.
            let preludeRead: { bytes: Buffer; hash: Buffer } | undefined;
            try {
              const bytes = readFileSync(preludeFile);
              preludeRead = { bytes, hash: sha256(bytes) };
            } catch {
              // said below
            }
            if (preludeRead === undefined)
              stale = `${files.prelude} is missing or cannot be read`;
            else if (recording.preludeSha256 !== preludeRead.hash.toString("hex"))
              stale = `${files.prelude} is not the one bundled with this ${bundleName}`;
            else {
              if (mode === "report")
                process.stderr.write(`${name}: load recording used\n`);
              // Compiled from the bytes just hashed, by the loader that loaded this file: no code
              // cache (deserialising one cost more than compiling these ~27 KB lazily) and none of
              // node:module and node:vm, which a load launch has no other use for.
              const Module = module.constructor as unknown as {
                new (id: string, parent: unknown): NodeJS.Module & { _compile(source: string, file: string): void };
                _nodeModulePaths(dir: string): string[];
              };
              const fastPath = new Module(preludeFile, module);
              fastPath.filename = preludeFile;
              fastPath.paths = Module._nodeModulePaths(__dirname);
              fastPath._compile(preludeRead.bytes.toString("utf8"), preludeFile);
              fastPath.loaded = true;
              const prelude = fastPath.exports as {
                startPrelude(r: unknown, load: () => unknown): Promise<unknown>;
              };
              prelude.startPrelude(recording, runPlugin).catch(fail);
              return;
            }
          }
        }
        if (mode === "report")
          process.stderr.write(`${name}: load recording stale (${stale})\n`);
        report.warnings.push(
          `the launcher did not use the load launch's fast path: ${stale} (an install or upgrade that copied only some of the bundle's files?); load launches start the whole plugin. Install the whole bundle directory, every file of it from the same \`nomadkit bundle\``,
        );
        return startPlugin();
      } catch (err) {
        fail(err);
      }
    }
  }
  startPlugin();
}

/** A launcher script: a `node` shebang, `comment`, then `launch` called with these arguments. */
function launcherText(
  name: string,
  files: LaunchFiles,
  comment: readonly string[],
  esm = false,
): string {
  const args = [
    name,
    files,
    CODE_CACHE_ENV,
    TRANSPORT_RECORDER_KEY,
    LAUNCHER_REPORT_KEY,
    BUILD_STAMP_PREFIX,
  ].map((a) => JSON.stringify(a));
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
 * `<name>.cjs` (or, for `format` `esm`, `<name>.mjs`) from its own directory. `executorSha256`: the
 * SHA-256 (hex) of each task executor file bundled with it, by file name.
 */
export function launcherSource(
  name: string,
  format: "cjs" | "esm" = "cjs",
  executorSha256: Record<string, string> = {},
): string {
  const files = bundleFiles(name);
  return launcherText(
    name,
    {
      bundle: files.bundle,
      esmBundle: files.esmBundle,
      codeCache: files.codeCache,
      executors: [files.executorLauncher, files.executor],
      executorSha256,
      prelude: files.prelude,
      loadRecording: files.loadRecording,
      loadTransport: files.loadTransport,
    },
    [
      `${name}: a Nomad plugin ${LAUNCHER_MARK}. Keep this file next to ${format === "cjs" ? files.bundle : files.esmBundle}; put it`,
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
      `${files.executorLauncher}: the task executor of the Nomad plugin ${name}, ${LAUNCHER_MARK}. Keep this`,
      `file next to ${files.executor}; the plugin's launcher points launchExecutor at it.`,
    ],
  );
}
