// The bundle itself: esbuild, with the settings plugin start-up wants, and its errors made readable.
import { dirname } from "node:path";
import type { Message, Metafile, PluginBuild } from "esbuild";
import { CliError } from "../errors.js";

export type Esbuild = typeof import("esbuild");

/** esbuild, loaded only by the bundle command (a native binary package; the other commands never need it). */
export async function loadEsbuild(): Promise<Esbuild> {
  try {
    return await import("esbuild");
  } catch (err) {
    throw new CliError(
      `bundle: cannot load esbuild (${(err as Error).message}); reinstall @nomadkit/cli`,
    );
  }
}

/** A bundle {@link buildBundle} wrote. */
export interface Built {
  /** `cjs` unless the entry needs top-level await (`esm`, no code cache). */
  format: "cjs" | "esm";
  file: string;
  metafile: Metafile;
  warnings: string[];
  cwd: string;
}

const TOP_LEVEL_AWAIT =
  /top-level await is (currently )?not supported with the "cjs" output format/i;

/** Module esbuild adds to a CommonJS bundle that uses `import.meta.url` (see {@link importMetaShim}). */
const IMPORT_META_URL_MODULE = "nomadkit:import-meta-url";

/**
 * In a CommonJS bundle esbuild makes `import.meta` an empty object, on which an ES module's
 * `createRequire(import.meta.url)` or `fileURLToPath(import.meta.url)` throws. These stand for the
 * bundle file itself, as `__filename` does (the launcher runs it under its own path); esbuild still
 * warns of the other members (`resolve`).
 */
const importMetaShim = {
  define: {
    "import.meta.url": "nomadkitImportMetaUrl",
    "import.meta.dirname": "__dirname",
    "import.meta.filename": "__filename",
  },
  inject: [IMPORT_META_URL_MODULE],
  plugins: [
    {
      name: "nomadkit-import-meta-url",
      setup(build: PluginBuild) {
        build.onResolve({ filter: new RegExp(`^${IMPORT_META_URL_MODULE}$`) }, (args) => ({
          path: args.path,
          namespace: "nomadkit",
          // Dropped from bundles that never read import.meta.url.
          sideEffects: false,
        }));
        build.onLoad({ filter: /.*/, namespace: "nomadkit" }, () => ({
          contents: 'export const nomadkitImportMetaUrl = require("node:url").pathToFileURL(__filename).href;\n',
          loader: "js",
        }));
      },
    },
  ],
};

/**
 * One file of `entry` and its imports, as start-up wants it: CommonJS (`outfile`), or, for an entry
 * that uses top-level await (which CommonJS cannot express), an ES module next to it (`.mjs`).
 * `define` is esbuild's (identifier → JavaScript expression). esbuild's errors become a CliError
 * naming `label`.
 */
export async function buildBundle(
  esbuild: Esbuild,
  entry: string,
  outfile: string,
  external: readonly string[],
  label: string,
  define: Record<string, string> = {},
): Promise<Built> {
  const cwd = dirname(entry);
  const build = async (format: "cjs" | "esm", file: string) => {
    const result = await esbuild.build({
      entryPoints: [entry],
      outfile: file,
      absWorkingDir: cwd,
      bundle: true,
      platform: "node",
      target: "node20",
      format,
      // import() becomes require(): no ES module loader at start-up, and lazily loaded modules stay lazy.
      supported: { "dynamic-import": false },
      // Bundled CommonJS packages (pino, say) call require() for Node's modules; an ES module has none.
      banner:
        format === "esm"
          ? {
              js: 'import { createRequire as nomadkitCreateRequire } from "node:module"; const require = nomadkitCreateRequire(import.meta.url);',
            }
          : undefined,
      ...(format === "cjs" ? importMetaShim : {}),
      define: { ...define, ...(format === "cjs" ? importMetaShim.define : {}) },
      external: [...external],
      // Smaller to parse; identifiers (and so stack traces) stay readable.
      minifyWhitespace: true,
      minifySyntax: true,
      legalComments: "none",
      metafile: true,
      logLevel: "silent",
    });
    const warnings = await esbuild.formatMessages(result.warnings, {
      kind: "warning",
      color: false,
    });
    return {
      format,
      file,
      metafile: result.metafile!,
      warnings: warnings.map((w) => w.trimEnd()),
      cwd,
    };
  };
  const errorsOf = (err: unknown) =>
    (err as { errors?: Message[] }).errors ?? [];
  try {
    try {
      return await build("cjs", outfile);
    } catch (err) {
      if (!errorsOf(err).some((e) => TOP_LEVEL_AWAIT.test(e.text))) throw err;
      return await build("esm", outfile.replace(/\.cjs$/, ".mjs"));
    }
  } catch (err) {
    const errors = errorsOf(err);
    if (!errors.length) throw err;
    const text = await esbuild.formatMessages(errors, {
      kind: "error",
      color: false,
    });
    throw new CliError(
      `bundle ${label}: esbuild failed:\n${text.join("").trimEnd()}${nativeAddonHint(errors)}`,
    );
  }
}

/** For esbuild's "no loader for .node files": which package to leave outside, and how. */
function nativeAddonHint(errors: Message[]): string {
  const packages = new Set<string>();
  for (const e of errors) {
    if (!/no loader is configured for "\.node" files/i.test(e.text)) continue;
    const file = e.location?.file ?? "";
    const m = /(?:^|[/\\])node_modules[/\\]((?:@[^/\\]+[/\\])?[^/\\]+)/.exec(
      file,
    );
    packages.add(m ? m[1]!.replace(/\\/g, "/") : "<package>");
  }
  if (packages.size === 0) return "";
  const flags = [...packages].map((p) => `--external ${p}`).join(" ");
  return `\na native addon cannot be bundled: leave its package outside with ${flags} (it then loads from node_modules next to the bundle)`;
}
