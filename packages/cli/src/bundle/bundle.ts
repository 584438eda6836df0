// `nomadkit bundle`: a plugin as one directory Nomad can start quickly — one CommonJS bundle of the
// entry file and everything it imports, a launcher executable, a V8 code cache made from a real
// start-up, the task executor bundled too, and a package.json naming what stayed outside.
import { createHash } from "node:crypto";
import {
  chmodSync,
  existsSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { basename, dirname, extname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { makeDirectory } from "@nomadkit/client";
import { CliError } from "../errors.js";
import { atExit, onInterrupt } from "../interrupt.js";
import {
  trainCodeCache,
  trainExecutorCodeCache,
  type RecordedCall,
} from "./code-cache.js";
import {
  executorEntry,
  externalImports,
  mergeExternals,
  preludeEntry,
} from "./dependencies.js";
import { buildBundle, loadEsbuild } from "./esbuild.js";
import { stageOutput, type StagedOutput } from "./staged-output.js";
import {
  BUILD_STAMP_PREFIX,
  LAUNCHER_MARK,
  bundleFiles,
  executorLauncherSource,
  launcherSource,
} from "./launcher.js";

/**
 * What esbuild writes for @nomadkit/server's NOMADKIT_TRANSPORT_BUILD in the plugin's bundle and
 * its load fast path (64 characters, as the stamp that replaces it: see {@link stampBuild}).
 */
const BUILD_PLACEHOLDER = "nomadkit-bundle: transport build not stamped yet".padEnd(64, "-");
const BUILD_DEFINE = { NOMADKIT_TRANSPORT_BUILD: JSON.stringify(BUILD_PLACEHOLDER) };
/** What the fast path logs when it loads the plugin for a call (@nomadkit/server's goplugin/prelude.ts). */
const LOADING_PLUGIN = "loading the plugin for a call the load recording does not answer";

/** Packages never bundled: a native addon (tty exec) and AutoMTLS's certificates, loaded on first use. */
export const ALWAYS_EXTERNAL: readonly string[] = [
  "node-pty",
  "@peculiar/x509",
];

/** What {@link bundlePlugin} makes. */
export interface BundleOptions {
  /** The plugin's entry file (`.ts`, `.mts`, `.js`, `.mjs`, `.cjs`): the file that calls `serveDriver` or `servePlugin`. */
  entry: string;
  /**
   * Directory to write the plugin into; created when missing. Other files in it are left alone. The
   * bundle is made in a staging directory inside it and moved into place once complete: an earlier
   * bundle there is left as it was by a bundle that fails or is interrupted, which removes what it
   * made (the staging directory; the directory itself, and parents, when it made it).
   */
  outDir: string;
  /**
   * File name of the launcher (the executable Nomad runs); default: the entry's file name without its
   * extension. The launcher is a CommonJS script: a name Node.js would load otherwise (`.mjs`, `.mts`,
   * `.ts`, `.cts`, `.json`, `.node`, `.wasm`) is refused before anything is written.
   */
  name?: string;
  /** More packages to leave out of the bundle (native addons, say); they load from `node_modules` next to the bundle. */
  external?: readonly string[];
  /**
   * Bundle `@nomadkit/server`'s task executor as `<name>-executor.cjs` with its own launcher,
   * `<name>-executor` (the plugin's launcher points `launchExecutor` at it). Default: when the
   * plugin imports `launchExecutor`'s module.
   */
  executor?: boolean;
  /**
   * Launch the bundled plugin as Nomad does, ask PluginInfo, shut it down and save the V8 code
   * cache of that start-up; likewise the bundled executor (one short process). It is also the
   * bundle's smoke test: a plugin or executor that cannot get that far fails the bundle step.
   * Default `true`.
   */
  codeCache?: boolean;
  /**
   * Record the answers of Nomad's load launch (health check, PluginInfo, ConfigSchema) in the
   * code-cache run, and write the fast path that serves them (`<name>-load.cjs`, `<name>.load.json`):
   * the first launch of the plugin while a Nomad agent starts then never loads the plugin's own
   * code. Only for plugins whose answers to those calls are fixed for a build (PluginInfo from
   * constants, as Nomad expects). Needs the code-cache run; default `true`.
   */
  loadRecording?: boolean;
  /** How long the code-cache run waits for the plugin's handshake; default 60 000 ms. */
  startTimeoutMs?: number;
}

/** What {@link bundlePlugin} wrote. */
export interface BundleResult {
  /** Absolute path of the launcher: the plugin executable. */
  launcher: string;
  /** Absolute paths of every file written, launcher first. */
  files: string[];
  /** Packages left outside the bundle that it imports, with the versions found at bundle time (also in the directory's package.json). */
  externals: Record<string, string>;
  /** Those of {@link BundleResult.externals} listed under `optionalDependencies` (every package importing them declares them optional). */
  optionalExternals: Record<string, string>;
  /** Whether `<name>-executor.cjs` was written. */
  executor: boolean;
  /** PluginInfo of the code-cache run (`undefined` when it was skipped). */
  pluginInfo?: {
    /** `PluginInfoResponse.name`: the name jobs use (`driver = "..."`). */
    name: string;
    /** `PluginInfoResponse.plugin_version`. */
    version: string;
  };
  /** esbuild's warnings (formatted with file and line) and the bundle step's own. */
  warnings: string[];
}

const ENTRY_EXTENSIONS = [".ts", ".mts", ".cts", ".js", ".mjs", ".cjs"];

function checkName(name: string): void {
  if (
    !name ||
    name === "." ||
    name === ".." ||
    /[/\\\x00-\x1f\x7f]/.test(name) ||
    name.startsWith("-")
  ) {
    throw new CliError(
      `--name ${JSON.stringify(name)}: expected a file name (no slashes or control characters, not . or .., not starting with -)`,
    );
  }
  // The directory's package.json, and where `npm install` in it puts packages.
  if (name === "package.json" || name === "node_modules")
    throw new CliError(`--name ${JSON.stringify(name)}: taken by the bundle directory's own ${name}`);
  // The launcher is CommonJS (the directory's package.json says "type": "commonjs"), which Node.js
  // runs under no extension, .js, .cjs or one it does not know (driver-1.2); these it loads otherwise.
  // Node goes by the name's ending: ".mjs" alone is an ES module too, though extname() says "".
  const ext = Object.keys(NOT_COMMONJS).sort((a, b) => b.length - a.length).find((e) => name.endsWith(e)) ?? "";
  const loadedAs = NOT_COMMONJS[ext];
  if (loadedAs !== undefined) {
    throw new CliError(
      `--name ${JSON.stringify(name)}: Node.js would load the launcher, a CommonJS script, as ${loadedAs} (${ext}); use a name without that extension, e.g. ${JSON.stringify(basename(name, ext) || "driver")}, or ending in .js or .cjs`,
    );
  }
}

/** Extensions under which Node.js does not run a file as a CommonJS script (TypeScript ones: from 22, type stripping). */
const NOT_COMMONJS: Readonly<Record<string, string>> = {
  ".mjs": "an ES module",
  ".mts": "an ES module (TypeScript)",
  ".ts": "TypeScript",
  ".cts": "TypeScript",
  ".json": "JSON",
  ".node": "a native addon",
  ".wasm": "WebAssembly",
};

/** What the package.json we write says about itself (how a rerun knows it may replace it). */
const PACKAGE_MARK = "bundled by nomadkit bundle";

/**
 * Refuses, before writing anything, a bundle whose files would land on the entry (esbuild refuses
 * that too, but only after it wrote the file) or replace a launcher or package.json that an earlier
 * bundle did not write (bundling into a project's own directory), or put its package.json over the
 * entry's sources (an out directory that holds the entry). The other files are named after
 * the plugin (`<name>.cjs`, `<name>-executor.cjs`, ...) and are always ours to replace.
 */
function checkOutputs(
  options: BundleOptions,
  entry: string,
  outputs: readonly string[],
  marked: readonly (readonly [file: string, mark: string])[],
): void {
  const where = `--out ${options.outDir}${options.name === undefined ? "" : ` --name ${options.name}`}`;
  if (outputs.includes(entry))
    throw new CliError(`${where}: the bundle would overwrite its entry ${options.entry}; choose another --out or --name`);
  for (const [file, mark] of marked) {
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT") continue;
      throw new CliError(`${where}: ${file} exists and cannot be replaced (${code ?? (err as Error).message})`);
    }
    if (!text.includes(mark))
      throw new CliError(`${where}: ${file} exists and was not written by nomadkit bundle; bundle into another directory`);
  }
  // Its package.json says "type": "commonjs": in the entry's directory (or above it) it would make
  // Node.js and tsc take the project's own .js/.ts sources there for CommonJS (top-level await and
  // ESM imports then fail), well after this command said it succeeded.
  const outDir = resolve(options.outDir);
  const fromOut = relative(outDir, dirname(entry));
  if (fromOut !== ".." && !fromOut.startsWith(`..${sep}`) && !isAbsolute(fromOut))
    throw new CliError(
      `${where}: the directory holds the entry ${options.entry}, and the bundle's package.json ("type": "commonjs") would make the sources there CommonJS; bundle into a directory of its own, e.g. --out dist/plugin`,
    );
}

/** The first of two recordings' calls that differ, named by its method. */
function differingCall(a: readonly RecordedCall[], b: readonly RecordedCall[]): string {
  const i = a.findIndex((c, k) => JSON.stringify(c) !== JSON.stringify(b[k]));
  const call = a[i] ?? b[i];
  return call === undefined ? "a different number of calls" : `${call.path.slice(call.path.lastIndexOf("/") + 1)} differs`;
}

/**
 * Refuses a name whose files are those of another plugin bundled into the same directory: plugin
 * `x`'s load fast path is `x-load.cjs`, which is plugin `x-load`'s bundle, and its executor's
 * launcher `x-executor` is plugin `x-executor`'s launcher. Either bundle would break the other.
 */
function checkNeighbours(options: BundleOptions, outDir: string, name: string, ours: readonly string[]): void {
  let entries: string[];
  try {
    entries = readdirSync(outDir);
  } catch {
    return; // not made yet: no neighbours
  }
  const mine = new Set(ours);
  for (const other of entries) {
    if (other === name) continue;
    const shared = Object.values(bundleFiles(other)).find((f) => mine.has(f));
    if (shared === undefined || !isPluginLauncher(join(outDir, other))) continue;
    throw new CliError(
      `--out ${options.outDir} --name ${name}: the directory holds the Nomad plugin ${other}, whose ${shared} would be ${name}'s too; bundle into another directory or choose another --name`,
    );
  }
}

/** Whether `file` is a plugin's launcher written by nomadkit bundle (not an executor's). */
function isPluginLauncher(file: string): boolean {
  try {
    if (statSync(file).size > 1 << 20) return false;
    return readFileSync(file, "utf8").includes(`: a Nomad plugin ${LAUNCHER_MARK}`);
  } catch {
    return false;
  }
}

/**
 * Bundles a plugin into a directory Nomad can run from its `plugin_dir`: `<name>` (the launcher,
 * executable), `<name>.cjs` (the entry and everything it imports, in one CommonJS file),
 * `<name>.cjs.v8cache` (V8's code cache of a real start-up, used only with exactly that bundle and
 * Node.js; an entry with top-level await gets `<name>.mjs` instead, without a cache), `<name>-executor.cjs` (the task executor, when the plugin launches executors), its launcher
 * `<name>-executor` and code cache `<name>-executor.cjs.v8cache` (one short run of a process), and a
 * `package.json` whose dependencies are the packages left outside (`node-pty`, say; those with
 * install scripts also under `allowScripts`), so `npm install --omit=dev` in a copy of the
 * directory completes it. A plugin bundled this way
 * starts in about half the time of its installed modules.
 *
 * @example
 * ```ts
 * import { bundlePlugin } from "@nomadkit/cli";
 *
 * const { launcher } = await bundlePlugin({ entry: "src/main.ts", outDir: "dist/plugin", name: "my-driver" });
 * console.log(`put ${launcher} in Nomad's plugin_dir`);
 * ```
 */
export async function bundlePlugin(
  options: BundleOptions,
): Promise<BundleResult> {
  const entry = resolve(options.entry);
  let st;
  try {
    st = statSync(entry);
  } catch {
    throw new CliError(`bundle ${options.entry}: no such file`);
  }
  if (!st.isFile()) throw new CliError(`bundle ${options.entry}: not a file`);
  if (!ENTRY_EXTENSIONS.includes(extname(entry))) {
    throw new CliError(
      `bundle ${options.entry}: expected a ${ENTRY_EXTENSIONS.join(", ")} file`,
    );
  }
  const name = options.name ?? basename(entry, extname(entry));
  checkName(name);
  for (const pkg of options.external ?? []) {
    if (!pkg || /\s/.test(pkg))
      throw new CliError(
        `--external ${JSON.stringify(pkg)}: expected a package name`,
      );
  }
  const outDir = resolve(options.outDir);
  let made: string | undefined;
  try {
    // Not mkdirSync's recursive mode: it never returns under /proc.
    made = makeDirectory(outDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") throw new CliError(`--out ${options.outDir}: not a directory`);
    throw new CliError(
      `--out ${options.outDir}: cannot create the directory (${(err as Error).message})`,
    );
  }
  // A failed bundle leaves nothing behind, and an earlier one as it was: a half-written or mixed
  // directory would pass for a plugin.
  let staged: StagedOutput | undefined;
  const discard = () => {
    if (staged !== undefined) staged.discard();
    else if (made !== undefined) rmSync(made, { recursive: true, force: true });
  };
  const forget = onInterrupt(discard);
  // Also when exiting at once (a second signal): the next bundle would remove it, if there is one.
  const forgetAtExit = atExit(discard);
  try {
    const files = bundleFiles(name);
    const out = (f: string) => join(outDir, f);
    // Every name an earlier bundle of this plugin may have left here (`<name>-load.cjs.v8cache`:
    // the fast path's code cache, which nomadkit bundle wrote until the launcher compiled the fast
    // path without one): the new bundle replaces or removes them.
    const owned = [...Object.values(files), `${files.prelude}.v8cache`, "package.json"];
    checkNeighbours(options, outDir, name, owned.filter((f) => f !== "package.json"));
    checkOutputs(options, entry, owned.map(out), [
      [out(files.launcher), LAUNCHER_MARK],
      [out("package.json"), PACKAGE_MARK],
    ]);
    try {
      staged = stageOutput(outDir, made, name);
    } catch (err) {
      throw new CliError(`--out ${options.outDir}: cannot write in the directory (${(err as Error).message})`);
    }
    const result = await bundleInto(options, entry, name, staged.dir, outDir);
    // Synchronous from here to the return: an interrupt is handled before or after the swap.
    const moved = (f: string) => out(relative(staged!.dir, f));
    try {
      staged.commit(result.files.map((f) => relative(staged!.dir, f)), owned, files.launcher);
    } catch (err) {
      throw new CliError(
        `--out ${options.outDir}: cannot move the new bundle into place (${(err as Error).message}); the files there are as they were`,
      );
    }
    return { ...result, launcher: moved(result.launcher), files: result.files.map(moved) };
  } catch (err) {
    discard();
    throw err;
  } finally {
    forget();
    forgetAtExit();
  }
}

/**
 * {@link bundlePlugin} into the staging directory `outDir`, which exists and is empty, for
 * `installDir` (`--out`), where its files are moved once complete.
 */
async function bundleInto(
  options: BundleOptions,
  entry: string,
  name: string,
  outDir: string,
  installDir: string,
): Promise<BundleResult> {
  const files = bundleFiles(name);
  const out = (f: string) => join(outDir, f);
  const esbuild = await loadEsbuild();
  const external = [
    ...new Set([...ALWAYS_EXTERNAL, ...(options.external ?? [])]),
  ];
  const written: string[] = [];

  const main = await buildBundle(
    esbuild,
    entry,
    out(files.bundle),
    external,
    options.entry,
    BUILD_DEFINE,
  );
  notExecutable(main.file);
  written.push(main.file);
  const warnings = [...main.warnings];
  // Shown with a failed code-cache run too: it may be what they warned of.
  const esbuildWarnings = [...main.warnings];
  if (main.format === "esm") {
    warnings.push(
      `${options.entry} uses top-level await, so the bundle is an ES module (${files.esmBundle}), which Node.js 20 cannot start from a code cache; without top-level await (\`void serveDriver(driver)\`) it would be CommonJS with one`,
    );
  }
  const externals = externalImports(main.metafile, main.cwd);

  const executorSource =
    options.executor === false
      ? undefined
      : executorEntry(main.metafile, main.cwd);
  if (options.executor === true && !executorSource) {
    throw new CliError(
      `--executor: ${options.entry} does not use @nomadkit/server's launchExecutor; nothing to bundle`,
    );
  }
  // Its launcher runs it from a code cache like the plugin's (CommonJS bundles only).
  let executorLauncher: string | undefined;
  if (executorSource) {
    const ex = await buildBundle(
      esbuild,
      executorSource.entry,
      out(files.executor),
      external,
      "executor",
    );
    // Not for Nomad's plugin loader, which launches every executable file in plugin_dir (the
    // executor answers Nomad's handshake, then fails PluginInfo); launchExecutor runs `node <file>`.
    notExecutable(ex.file);
    written.push(ex.file);
    warnings.push(...ex.warnings);
    esbuildWarnings.push(...ex.warnings);
    mergeExternals(externals, externalImports(ex.metafile, ex.cwd));
    if (ex.format === "cjs") {
      executorLauncher = out(files.executorLauncher);
      writeFileSync(executorLauncher, executorLauncherSource(name));
      notExecutable(executorLauncher);
      written.push(executorLauncher);
    }
  }

  // The load launch's fast path: the go-plugin transport of the same @nomadkit/server build.
  const preludeSource =
    options.codeCache === false || options.loadRecording === false
      ? undefined
      : preludeEntry(main.metafile, main.cwd);
  let prelude: string | undefined;
  if (preludeSource) {
    const pre = await buildBundle(
      esbuild,
      preludeSource,
      out(files.prelude),
      external,
      "load fast path",
      BUILD_DEFINE,
    );
    notExecutable(pre.file);
    warnings.push(...pre.warnings);
    esbuildWarnings.push(...pre.warnings);
    prelude = pre.file;
  }
  const build = stampBuild(prelude === undefined ? [main.file] : [main.file, prelude]);

  // The executor files as bundled with this plugin, in its launcher: the plugin warns when those it
  // finds differ (an upgrade that copied only some of the directory's files).
  const executorSha256: Record<string, string> = {};
  for (const f of [files.executorLauncher, files.executor]) {
    if (written.includes(out(f))) executorSha256[f] = sha256(readFileSync(out(f)));
  }
  writeFileSync(out(files.launcher), launcherSource(name, main.format, executorSha256));
  // Also when an earlier run's launcher is being replaced (a mode applies only to new files).
  chmodSync(out(files.launcher), 0o755);
  written.unshift(out(files.launcher));
  const outside = Object.entries(externals).sort(([a], [b]) =>
    a.localeCompare(b),
  );
  const dependencies = Object.fromEntries(
    outside.filter(([, e]) => !e.optional).map(([pkg, { version }]) => [pkg, version]),
  );
  const optionalDependencies = Object.fromEntries(
    outside.filter(([, e]) => e.optional).map(([pkg, { version }]) => [pkg, version]),
  );
  // `type`: the launcher has no extension, so this keeps it CommonJS whatever package the
  // directory sits in.
  writeFileSync(
    out("package.json"),
    JSON.stringify(
      {
        name,
        private: true,
        description: `Nomad plugin ${name}, ${PACKAGE_MARK}`,
        type: "commonjs",
        bin: { [name]: `./${name}` },
        engines: { node: ">=20" },
        dependencies,
        // npm installs the rest when one of these fails to build (a host without a compiler).
        ...(Object.keys(optionalDependencies).length ? { optionalDependencies } : {}),
        // npm 12 runs a dependency's install script (node-pty builds its addon) only when allowed.
        allowScripts: Object.fromEntries(
          outside
            .filter(([, e]) => e.installScripts)
            .map(([pkg]) => [pkg, true]),
        ),
      },
      null,
      2,
    ) + "\n",
  );
  written.push(out("package.json"));

  let pluginInfo: BundleResult["pluginInfo"];
  const withWarnings = (err: unknown): unknown =>
    err instanceof CliError && esbuildWarnings.length > 0
      ? new CliError(`${err.message}\nesbuild warned while bundling:\n${esbuildWarnings.join("\n")}`, err.exitCode)
      : err;
  if (options.codeCache !== false) {
    let run;
    // What the plugin's servePlugin reported in that run (the launcher writes it): read, never kept.
    let transport: unknown;
    try {
      run = await trainCodeCache(out(files.launcher), options.startTimeoutMs, "write", installDir);
    } catch (err) {
      throw withWarnings(err);
    } finally {
      transport = takeTransportRecord(out(files.loadTransport));
    }
    pluginInfo = { name: run.name, version: run.version };
    if (main.format === "cjs") {
      if (!existsSync(out(files.codeCache))) {
        throw new CliError(
          `bundle: the plugin exited without writing ${files.codeCache}`,
        );
      }
      written.splice(2, 0, out(files.codeCache));
    }
    if (executorLauncher !== undefined) {
      try {
        await trainExecutorCodeCache(
          executorLauncher,
          executorSource!.serverDir,
          options.startTimeoutMs,
          installDir,
        );
      } catch (err) {
        throw withWarnings(err);
      }
      if (!existsSync(out(files.executorCodeCache))) {
        throw new CliError(
          `bundle: the executor exited without writing ${files.executorCodeCache}`,
        );
      }
      written.push(out(files.executorCodeCache));
    }
    if (prelude !== undefined) {
      const recorded = recordLoadLaunch(
        transport,
        { build: build.stamp, bundleSize: statSync(main.file).size, preludeSha256: build.sha256[1]! },
        run.calls,
      );
      if (recorded.warning !== undefined) warnings.push(recorded.warning);
      if (recorded.ok) {
        try {
          // Answers that differ from one run of the plugin to the next (a pid, the time) cannot be
          // recorded: the fast path would give every load launch the first run's. A second run of
          // the plugin itself (no recording yet) says whether they do.
          const second = await trainCodeCache(
            out(files.launcher),
            options.startTimeoutMs,
            "check-answers",
          );
          if (JSON.stringify(second.calls) !== JSON.stringify(run.calls)) {
            throw new CliError(
              `bundle: the plugin answered Nomad's load launch differently in two runs (${differingCall(run.calls, second.calls)}: does it depend on the process, the time or chance?); the launcher's fast path replays one recorded answer to every load launch: make the answers fixed for a build, or --no-load-recording leaves the fast path out`,
            );
          }
          writeFileSync(out(files.loadRecording), recorded.json);
          // The fast path's test: a load launch as Nomad makes it, served by the fast path with the
          // same answers, to the byte.
          const again = await trainCodeCache(
            out(files.launcher),
            options.startTimeoutMs,
            "check-load",
          );
          if (
            !again.log.includes(`${name}: load recording used`) ||
            again.log.includes(LOADING_PLUGIN)
          ) {
            throw new CliError(
              `bundle: the load launch's fast path did not serve the load launch by itself (the launcher's report and log: ${JSON.stringify(again.log.filter((l) => l.startsWith(`${name}: `) || l === LOADING_PLUGIN))})`,
            );
          }
          if (JSON.stringify(again.calls) !== JSON.stringify(run.calls)) {
            throw new CliError(
              `bundle: the load launch's fast path answered differently from the plugin (${differingCall(run.calls, again.calls)}); --no-load-recording leaves it out`,
            );
          }
        } catch (err) {
          throw withWarnings(err);
        }
        written.push(prelude, out(files.loadRecording));
      }
      // Otherwise the fast path stays in the staging directory, which goes.
    }
    if (pluginInfo.name !== name) {
      warnings.push(
        `the plugin calls itself ${JSON.stringify(pluginInfo.name)} (PluginInfo), the name jobs use, but its executable is ${JSON.stringify(name)}, the name Nomad finds the agent's plugin block by; name it the same (--name ${pluginInfo.name}) so one name serves both`,
      );
    }
  }
  // Only the launcher is for plugin_dir (the files the runs wrote, and a package.json kept from
  // an earlier run, included).
  for (const f of written) if (f !== out(files.launcher)) notExecutable(f);
  return {
    launcher: out(files.launcher),
    files: written,
    externals: Object.fromEntries(outside.map(([pkg, { version }]) => [pkg, version])),
    optionalExternals: optionalDependencies,
    executor: executorSource !== undefined,
    pluginInfo,
    warnings,
  };
}

/** SHA-256 of `bytes`, hex. */
function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Mode 0644: anything but the launcher, which Nomad's plugin loader would otherwise launch. */
function notExecutable(file: string): void {
  chmodSync(file, 0o644);
}

/**
 * Replaces the placeholder esbuild wrote for NOMADKIT_TRANSPORT_BUILD in `files` (the plugin's
 * bundle and its load fast path) with one stamp, the SHA-256 of the files as esbuild wrote them:
 * the same inputs give the same files, and a fast path of another build has another stamp, whose
 * transport the plugin's servePlugin refuses to take over. The first file, the plugin's bundle, also
 * ends with it (after {@link BUILD_STAMP_PREFIX}), where its launcher reads it. Returns the stamp and
 * the SHA-256 of each file as stamped.
 */
function stampBuild(files: readonly string[]): { stamp: string; sha256: string[] } {
  const contents = files.map((f) => readFileSync(f));
  const hash = createHash("sha256");
  for (const c of contents) hash.update(sha256(c));
  const stamp = hash.digest("hex");
  const placeholder = Buffer.from(BUILD_PLACEHOLDER);
  files.forEach((file, i) => {
    let bytes = contents[i]!;
    let changed = false;
    for (let at = bytes.indexOf(placeholder); at >= 0; at = bytes.indexOf(placeholder, at + placeholder.length)) {
      bytes.write(stamp, at, "latin1");
      changed = true;
    }
    if (i === 0) {
      const lastLine = `${bytes.at(-1) === 0x0a ? "" : "\n"}${BUILD_STAMP_PREFIX}${stamp}\n`;
      contents[0] = bytes = Buffer.concat([bytes, Buffer.from(lastLine, "latin1")]);
      changed = true;
    }
    if (changed) writeFileSync(file, bytes);
  });
  return { stamp, sha256: contents.map((c) => sha256(c)) };
}

/** The transport options a recording run's launcher wrote to `file` (removed); `undefined` when none. */
function takeTransportRecord(file: string): unknown {
  try {
    return JSON.parse(readFileSync(file, "utf8"));
  } catch {
    return undefined;
  } finally {
    rmSync(file, { force: true });
  }
}

/**
 * The load recording for the launcher's fast path, from the code-cache run: the transport options
 * the plugin's servePlugin reported (`undefined`: none; `null`: not replayable) and the recorded
 * calls, tied to the bundle by its `build` stamp (which the bundle ends with) and size, and to the
 * fast path by its SHA-256.
 */
function recordLoadLaunch(
  transport: unknown,
  tie: { build: string; bundleSize: number; preludeSha256: string },
  calls: RecordedCall[],
):
  | { ok: true; json: string; warning?: undefined }
  | { ok: false; warning?: string } {
  if (transport === undefined) {
    return {
      ok: false,
      warning:
        "the plugin did not report its servePlugin options in the code-cache run, so its load launches start the whole plugin",
    };
  }
  if (transport === null) {
    return {
      ok: false,
      warning:
        "servePlugin gets an env of its own or exitProcess: false, which a launcher cannot replay, so its load launches start the whole plugin",
    };
  }
  const recording = {
    version: 3,
    ...tie,
    transport,
    calls,
  };
  return { ok: true, json: JSON.stringify(recording, null, 2) + "\n" };
}
