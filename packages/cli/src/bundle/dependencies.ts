// What a bundle depends on outside itself: the packages it leaves to node_modules (with the
// versions it was made against) and @nomadkit/server's task executor when it launches executors.
import { existsSync, readFileSync } from "node:fs";
import { isBuiltin } from "node:module";
import { dirname, join, resolve } from "node:path";
import type { Metafile } from "esbuild";
import { CliError } from "../errors.js";

/** A package left outside the bundle, as installed where the bundle was made. */
export interface ExternalPackage {
  /** Its version (`*` when it could not be read). */
  version: string;
  /**
   * Whether it runs an install script (a native addon's build): the bundle's package.json allows
   * it, since npm 12 runs only the dependency install scripts a project allows.
   */
  installScripts: boolean;
  /**
   * Whether every package that imports it lists it under `optionalDependencies` (`@nomadkit/server`
   * does node-pty: a native addon only terminals need). The bundle's package.json does the same,
   * so installing the bundle where the addon cannot be built still succeeds.
   */
  optional: boolean;
}

/** Package `name` as Node would find it from `fromDir`. */
function installedPackage(name: string, fromDir: string): ExternalPackage {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    const file = join(dir, "node_modules", name, "package.json");
    if (existsSync(file)) {
      try {
        const pkg = JSON.parse(readFileSync(file, "utf8")) as {
          version?: unknown;
          scripts?: Record<string, unknown>;
        };
        const scripts = pkg.scripts ?? {};
        return {
          version: typeof pkg.version === "string" ? pkg.version : "*",
          installScripts: ["preinstall", "install", "postinstall"].some(
            (k) => typeof scripts[k] === "string",
          ),
          optional: false,
        };
      } catch {
        break;
      }
    }
    if (dirname(dir) === dir) break;
  }
  return { version: "*", installScripts: false, optional: false };
}

/** Whether the package that contains `file` (the nearest package.json with a name) lists `dep` as optional. */
function optionalIn(file: string, dep: string): boolean {
  for (let dir = dirname(file); dirname(dir) !== dir; dir = dirname(dir)) {
    let pkg: { name?: unknown; optionalDependencies?: Record<string, unknown> };
    try {
      pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
    } catch {
      continue;
    }
    // dist/cjs/package.json ({"type": "commonjs"}) is not the package.
    if (typeof pkg.name === "string") return pkg.optionalDependencies?.[dep] !== undefined;
  }
  return false;
}

/** What npm accepts as a package name (lower case, URL-safe, optionally scoped). */
const NPM_NAME = /^(?:@[a-z0-9-~][a-z0-9-._~]*\/)?[a-z0-9-~][a-z0-9-._~]*$/;

/** `pkg/sub/path` → `pkg`, `@scope/pkg/sub` → `@scope/pkg`. */
function packageName(specifier: string): string {
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]!;
}

/** Packages (not Node built-ins) the bundle imports but does not contain, by name, sorted. */
export function externalImports(
  metafile: Metafile,
  cwd: string,
): Record<string, ExternalPackage> {
  const found: Record<string, ExternalPackage> = {};
  for (const [input, { imports }] of Object.entries(metafile.inputs)) {
    for (const imp of imports) {
      if (
        !imp.external ||
        isBuiltin(imp.path) ||
        imp.path.startsWith(".") ||
        imp.path.startsWith("/")
      )
        continue;
      const name = packageName(imp.path);
      // esbuild's own placeholders (an ES module bundle imports "<runtime>") are not packages.
      if (!NPM_NAME.test(name)) continue;
      const from = resolve(cwd, input);
      found[name] ??= { ...installedPackage(name, dirname(from)), optional: true };
      // Optional only if no importer needs it (a plugin that imports node-pty itself does).
      found[name].optional &&= optionalIn(from, name);
    }
  }
  return Object.fromEntries(
    Object.entries(found).sort(([a], [b]) => a.localeCompare(b)),
  );
}

/**
 * Adds the packages a second bundle (the executor's) leaves outside to `into`: a package is
 * optional only when it is optional for both (the plugin may import node-pty itself).
 */
export function mergeExternals(
  into: Record<string, ExternalPackage>,
  from: Record<string, ExternalPackage>,
): void {
  for (const [name, e] of Object.entries(from)) {
    const had = into[name];
    into[name] = had ? { ...had, optional: had.optional && e.optional } : e;
  }
}

/**
 * `@nomadkit/server`'s executor entry, when the bundle contains its `launchExecutor` module: the
 * `bin.js` next to that module, so the executor is bundled from the same build (the ES module one
 * for an ES module plugin: esbuild then drops what it does not use, where the CommonJS build's
 * modules are kept whole; the reference driver's executor bundle went from 761 to 504 KB and
 * starts ~20–30 ms sooner), else the package's `nomadkit-executor` bin. `serverDir` is that
 * package's directory: the code-cache run loads `launchExecutor` from it.
 */
export function executorEntry(
  metafile: Metafile,
  cwd: string,
): { entry: string; serverDir: string } | undefined {
  for (const input of Object.keys(metafile.inputs)) {
    const file = resolve(cwd, input);
    const launch = /[/\\]executor[/\\]launch(\.[cm]?js)$/.exec(file);
    if (!launch) continue;
    const serverDir = packageRoot(file, "@nomadkit/server");
    if (!serverDir) continue;
    const sibling = join(dirname(file), `bin${launch[1]}`);
    return { entry: existsSync(sibling) ? sibling : serverExecutorBin(serverDir), serverDir };
  }
  return undefined;
}

/** The directory of the package called `name` that contains `file`. */
function packageRoot(file: string, name: string): string | undefined {
  for (let dir = dirname(file); dirname(dir) !== dir; dir = dirname(dir)) {
    const pkg = join(dir, "package.json");
    if (!existsSync(pkg)) continue;
    try {
      if (
        (JSON.parse(readFileSync(pkg, "utf8")) as { name?: string }).name ===
        name
      )
        return dir;
    } catch {
      // keep walking
    }
  }
  return undefined;
}

/**
 * `@nomadkit/server`'s fast path for load launches (`goplugin/prelude.js`), from the same build as
 * the `servePlugin` module the bundle contains; `undefined` when it contains none.
 */
export function preludeEntry(
  metafile: Metafile,
  cwd: string,
): string | undefined {
  for (const input of Object.keys(metafile.inputs)) {
    const file = resolve(cwd, input);
    const serve = /[/\\]goplugin[/\\]serve(\.[cm]?js)$/.exec(file);
    if (!serve || !packageRoot(file, "@nomadkit/server")) continue;
    const prelude = join(dirname(file), `prelude${serve[1]}`);
    if (existsSync(prelude)) return prelude;
  }
  return undefined;
}

function serverExecutorBin(pkgDir: string): string {
  const bin = (
    JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")) as {
      bin?: Record<string, string>;
    }
  ).bin?.["nomadkit-executor"];
  if (!bin)
    throw new CliError(
      `bundle: ${pkgDir}/package.json has no "nomadkit-executor" bin`,
    );
  return join(pkgDir, bin);
}
