// What a published nomadkit tarball may contain, as rules rather than a frozen list (new modules
// must not need an edit here): compiled output for both module systems, the bins, the docs and
// license, and for @nomadkit/protocol the .proto contracts with their buf.yaml. Anything else
// (sources, tests, configs, maps, build info) is a leak.
import { existsSync, readdirSync } from "node:fs";
import path from "node:path";
import { repoRoot } from "./lib.mjs";

/** Files every tarball must carry. */
export const REQUIRED = ["package.json", "README.md", "LICENSE"];

/** Extra paths allowed per package (beyond dist, bins and REQUIRED). */
const EXTRA = {
  "@nomadkit/protocol": [/^proto\/.+\.proto$/, /^buf\.yaml$/],
};

const COMMON = [
  /^(package\.json|README\.md|LICENSE|CHANGELOG\.md)$/,
  /^dist\/(esm|cjs)\/.+\.(js|d\.ts)$/,
  /^dist\/cjs\/package\.json$/,
];

/** Paths that must never ship, whatever the rules above would allow. */
const NEVER = [/(^|\/)test(s)?\//, /\.test\.|\.spec\./, /(^|\/)src\//, /\.tsbuildinfo$/, /\.map$/, /(^|\/)(tsconfig|vitest\.config|turbo)\b/];

const files = (dir, base = dir) =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(path.join(dir, e.name), base) : [path.relative(base, path.join(dir, e.name)).split(path.sep).join("/")],
  );

/** Module paths (without extension) of a dist tree listing. */
const modules = (list, tree) =>
  new Set(
    list
      .filter((f) => f.startsWith(`dist/${tree}/`) && f.endsWith(".js"))
      .map((f) => f.slice(`dist/${tree}/`.length, -".js".length)),
  );

/** Every string leaf of an exports map (conditions flattened). */
function exportTargets(exp) {
  if (typeof exp === "string") return [exp];
  if (exp === null || typeof exp !== "object") return [];
  return Object.values(exp).flatMap(exportTargets);
}

/**
 * Checks one packed package ({ name, pkg, dir, files } from packAll) and returns human-readable
 * problems (empty when the tarball is as intended).
 */
export function tarballProblems(p) {
  const problems = [];
  const list = p.files;
  const has = new Set(list);
  const bins = Object.values(typeof p.pkg.bin === "string" ? { [p.name]: p.pkg.bin } : (p.pkg.bin ?? {})).map((b) =>
    b.replace(/^\.\//, ""),
  );
  const allowed = [...COMMON, ...(EXTRA[p.name] ?? [])];

  for (const f of REQUIRED) if (!has.has(f)) problems.push(`missing ${f}`);
  for (const f of list) {
    if (NEVER.some((re) => re.test(f))) problems.push(`leaks ${f}`);
    else if (!bins.includes(f) && !allowed.some((re) => re.test(f))) problems.push(`unexpected file ${f}`);
  }
  for (const b of bins) if (!has.has(b)) problems.push(`bin ${b} not in tarball`);

  // Dual build: the same modules, each with its declarations, in both trees.
  const esm = modules(list, "esm");
  const cjs = modules(list, "cjs");
  for (const m of esm) if (!cjs.has(m)) problems.push(`dist/esm/${m}.js has no CommonJS twin`);
  for (const m of cjs) if (!esm.has(m)) problems.push(`dist/cjs/${m}.js has no ESM twin`);
  for (const tree of ["esm", "cjs"]) {
    for (const m of tree === "esm" ? esm : cjs) {
      if (!has.has(`dist/${tree}/${m}.d.ts`)) problems.push(`dist/${tree}/${m}.js has no .d.ts`);
    }
  }
  if (!has.has("dist/cjs/package.json")) problems.push("dist/cjs/package.json (type: commonjs) missing");

  // Exactly the compiled sources: every src module ships, nothing stale from a deleted source does.
  const srcDir = path.join(p.dir, "src");
  if (existsSync(srcDir)) {
    const src = new Set(
      files(srcDir)
        .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))
        .map((f) => f.slice(0, -".ts".length)),
    );
    for (const m of src) if (!esm.has(m)) problems.push(`src/${m}.ts is not in the tarball (dist/esm/${m}.js)`);
    for (const m of esm) if (!src.has(m)) problems.push(`dist/esm/${m}.js has no source (stale build output?)`);
  }

  // Entry points resolve inside the tarball.
  const targets = [p.pkg.main, p.pkg.types, p.pkg.module, ...exportTargets(p.pkg.exports)].filter(Boolean);
  for (const t of targets) {
    const rel = t.replace(/^\.\//, "");
    if (rel.includes("*")) {
      const re = new RegExp(`^${rel.split("*").map((s) => s.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".+")}$`);
      if (!list.some((f) => re.test(f))) problems.push(`export pattern ${t} matches nothing`);
    } else if (!has.has(rel)) problems.push(`entry ${t} not in tarball`);
  }

  // Metadata a registry page and tooling rely on.
  for (const field of ["description", "license", "repository", "engines", "files", "exports", "types", "main", "sideEffects", "keywords", "homepage", "bugs"]) {
    if (p.pkg[field] === undefined) problems.push(`package.json lacks "${field}"`);
  }
  if (p.pkg.license !== "Apache-2.0") problems.push(`license is ${p.pkg.license}, not Apache-2.0`);
  if (!p.pkg.engines?.node) problems.push("engines.node not set");
  if (p.pkg.repository?.directory !== p.rel) problems.push(`repository.directory is ${p.pkg.repository?.directory}, not ${p.rel}`);
  for (const [dep, range] of Object.entries(p.pkg.dependencies ?? {})) {
    if (/^(file|link|workspace|portal):|^\*$/.test(range)) problems.push(`dependency ${dep}@${range} cannot be installed from the registry`);
  }

  // @nomadkit/protocol ships the contracts exactly as they are in the repo's proto/.
  if (p.name === "@nomadkit/protocol") {
    const repoProtos = files(path.join(repoRoot, "proto")).filter((f) => f.endsWith(".proto")).map((f) => `proto/${f}`).sort();
    const shipped = list.filter((f) => f.startsWith("proto/")).sort();
    for (const f of repoProtos) if (!has.has(f)) problems.push(`contract ${f} not shipped`);
    for (const f of shipped) if (!repoProtos.includes(f)) problems.push(`shipped ${f} is not a contract in proto/`);
  }
  return problems;
}
