// Which packages a workspace package's built code imports without declaring them: check:packages
// fails on any (it works only while npm hoists them; pnpm, Yarn PnP and linked installs break).
import { readFileSync, readdirSync } from "node:fs";
import { builtinModules } from "node:module";
import path from "node:path";
import ts from "typescript";

const builtins = new Set(builtinModules);

/** Bare package names imported by the files of `dir` (recursively) that match `ext`. */
function importedPackages(dir, ext, out = new Map()) {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) importedPackages(p, ext, out);
    else if (ext.test(e.name)) {
      // TypeScript's scanner: imports, exports, import() and require() of the code, not of comments
      // or strings (a code generator's `f.import("X", "pkg")` is neither).
      for (const { fileName: spec } of ts.preProcessFile(readFileSync(p, "utf8"), true, true).importedFiles) {
        if (spec.startsWith(".") || spec.startsWith("/") || spec.startsWith("node:") || builtins.has(spec.split("/")[0])) continue;
        const name = spec.startsWith("@") ? spec.split("/").slice(0, 2).join("/") : spec.split("/")[0];
        if (!out.has(name)) out.set(name, p);
      }
    }
  }
  return out;
}

/**
 * Imports of a package's shipped code (dist/, bin/) that its package.json does not declare, as
 * "name (imported by file)", files relative to `dir`.
 */
export function undeclaredImports(dir, pkg) {
  const declared = new Set([pkg.name, ...Object.keys({ ...pkg.dependencies, ...pkg.peerDependencies, ...pkg.optionalDependencies })]);
  const found = importedPackages(path.join(dir, "dist"), /\.(c|m)?js$|\.d\.(c|m)?ts$/);
  importedPackages(path.join(dir, "bin"), /^[^.]*$|\.(c|m)?js$/, found);
  return [...found].filter(([name]) => !declared.has(name)).map(([name, file]) => `${name} (imported by ${path.relative(dir, file)})`);
}

