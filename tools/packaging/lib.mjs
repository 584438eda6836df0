// Shared helpers for testing nomadkit the way a user meets it: as npm tarballs installed into a
// project that has never seen this repository. Used by tools/test/packaging*.test.ts,
// tools/test/downstream*.test.ts and the release script.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** Absolute path of the repository root. */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** The repository's TypeScript compiler, run by path (a consumer brings its own; the version is what matters). */
export const tsc = path.join(repoRoot, "node_modules/typescript/bin/tsc");

const readJson = (file) => JSON.parse(readFileSync(file, "utf8"));

/**
 * Public (non-private) workspace packages in dependency order (a package comes after everything it
 * depends on), as { name, version, dir (absolute), rel, pkg }.
 */
export function publicPackages() {
  const rootPkg = readJson(path.join(repoRoot, "package.json"));
  const all = rootPkg.workspaces
    .map((rel) => ({ rel, dir: path.join(repoRoot, rel), pkg: readJson(path.join(repoRoot, rel, "package.json")) }))
    .filter((w) => !w.pkg.private)
    .map((w) => ({ ...w, name: w.pkg.name, version: w.pkg.version }));
  const byName = new Map(all.map((w) => [w.name, w]));
  const ordered = [];
  const visit = (w, stack = []) => {
    if (ordered.includes(w)) return;
    if (stack.includes(w)) throw new Error(`dependency cycle: ${[...stack, w].map((x) => x.name).join(" -> ")}`);
    for (const dep of Object.keys({ ...w.pkg.dependencies, ...w.pkg.peerDependencies })) {
      const inner = byName.get(dep);
      if (inner) visit(inner, [...stack, w]);
    }
    ordered.push(w);
  };
  for (const w of all) visit(w);
  return ordered;
}

/**
 * An environment for commands run "outside" the repository: no npm_* variables inherited from an
 * enclosing `npm test` (they would point npm back at the monorepo), no NODE_PATH/NODE_OPTIONS, and no
 * PATH entries inside the repository (its node_modules/.bin would shadow the fixture's own tools).
 */
export function outsideEnv(extra = {}) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^npm_/i.test(k) || k === "INIT_CWD" || k === "NODE_PATH" || k === "NODE_OPTIONS") continue;
    if (/^(VITEST|TURBO)/.test(k) || k === "TEST" || k === "NODE_ENV") continue;
    env[k] = v;
  }
  const inRepo = (p) => p === repoRoot || p.startsWith(repoRoot + path.sep);
  env.PATH = (process.env.PATH ?? "")
    .split(path.delimiter)
    .filter((p) => p && !inRepo(path.resolve(p)))
    .join(path.delimiter);
  return { ...env, ...extra };
}

/** Runs a command to completion outside the repository; throws with its output when it fails. */
export function sh(cmd, args, { cwd, env, timeout = 300_000, input } = {}) {
  const r = spawnSync(cmd, args, { cwd, env: env ?? outsideEnv(), encoding: "utf8", timeout, input, maxBuffer: 64 << 20 });
  if (r.error) throw new Error(`${cmd} ${args.join(" ")} (in ${cwd}): ${r.error.message}\n${r.stdout ?? ""}\n${r.stderr ?? ""}`);
  if (r.status !== 0) {
    throw new Error(`${cmd} ${args.join(" ")} (in ${cwd}) exited ${r.status ?? r.signal}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
  }
  return r.stdout;
}

/** Runs `node <args>` outside the repository. */
export const node = (args, opts) => sh(process.execPath, args, opts);

/** Path of the npm CLI that came with this Node (not whatever npm a PATH entry in the repo might shadow). */
function npmCli() {
  const candidates = [
    path.join(path.dirname(process.execPath), "../lib/node_modules/npm/bin/npm-cli.js"),
    path.join(path.dirname(process.execPath), "node_modules/npm/bin/npm-cli.js"),
  ];
  const found = candidates.find((c) => existsSync(c));
  if (!found) throw new Error(`npm not found next to ${process.execPath}`);
  return found;
}

/** Runs npm outside the repository. */
export const npm = (args, opts) => sh(process.execPath, [npmCli(), ...args], opts);

/**
 * Packs every public package into `dest` with `npm pack` (exactly what `npm publish` uploads) and
 * returns { name, version, dir, rel, pkg, tarball (absolute), files (sorted paths) } per package.
 * The packages must be built (`npx turbo run build`).
 */
export function packAll(dest, packages = publicPackages()) {
  mkdirSync(dest, { recursive: true });
  for (const p of packages) {
    if (!existsSync(path.join(p.dir, "dist/esm")) || !existsSync(path.join(p.dir, "dist/cjs"))) {
      throw new Error(`${p.name} is not built (no dist/esm + dist/cjs): run \`npx turbo run build\` first`);
    }
  }
  const ws = packages.flatMap((p) => ["-w", p.rel]);
  // npm pack runs from the repo root so workspaces resolve; the repo's own .npmrc applies as it would on publish.
  const out = sh(process.execPath, [npmCli(), "pack", "--json", "--pack-destination", dest, ...ws], {
    cwd: repoRoot,
    env: outsideEnv(),
  });
  const packed = JSON.parse(out);
  return packages.map((p) => {
    const entry = packed.find((e) => e.name === p.name);
    if (!entry) throw new Error(`npm pack produced no tarball for ${p.name}`);
    return { ...p, tarball: path.join(dest, entry.filename), files: entry.files.map((f) => f.path).sort() };
  });
}

/**
 * A fresh directory under the OS temp dir, never inside the repository, and with no node_modules
 * in any directory above it (Node would resolve packages from there, hiding missing dependencies).
 */
export function tempDir(prefix) {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  const rel = path.relative(repoRoot, dir);
  if (!rel.startsWith("..") && !path.isAbsolute(rel)) throw new Error(`temp dir ${dir} is inside the repository`);
  for (let up = path.dirname(dir); ; up = path.dirname(up)) {
    if (existsSync(path.join(up, "node_modules"))) {
      throw new Error(`${path.join(up, "node_modules")} exists above the temp dir ${dir}: packages would resolve from it; set TMPDIR elsewhere`);
    }
    if (path.dirname(up) === up) break;
  }
  return dir;
}

/**
 * Writes a package.json that depends on the given tarballs (by file: URL) plus registry packages,
 * and pins every nomadkit package, however deep, to its tarball via `overrides`, then installs.
 * Nothing of the monorepo is linked: third-party packages come from the registry (or npm's cache).
 */
export function installProject(dir, { packed, devPacked = [], registry = {}, devRegistry = {}, type = "module", extra = {} }) {
  const tarballs = (list) => Object.fromEntries(list.map((p) => [p.name, `file:${p.tarball}`]));
  const deps = tarballs(packed);
  const pkg = {
    name: path.basename(dir).toLowerCase().replace(/[^a-z0-9-]/g, "-"),
    version: "0.0.0",
    private: true,
    type,
    dependencies: { ...deps, ...registry },
    devDependencies: { ...tarballs(devPacked), ...devRegistry },
    overrides: Object.fromEntries([...packed, ...devPacked].map((p) => [p.name, `$${p.name}`])),
    ...extra,
  };
  writeFileSync(path.join(dir, "package.json"), JSON.stringify(pkg, null, 2) + "\n");
  npm(["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: dir });
  return pkg;
}

/** Copies a fixture directory (tools/packaging/fixtures/<name>) into `dest`. */
export function copyFixture(name, dest) {
  const src = path.join(repoRoot, "tools/packaging/fixtures", name);
  const walk = (from, to) => {
    mkdirSync(to, { recursive: true });
    for (const e of readdirSync(from, { withFileTypes: true })) {
      if (e.isDirectory()) walk(path.join(from, e.name), path.join(to, e.name));
      else writeFileSync(path.join(to, e.name), readFileSync(path.join(from, e.name)));
    }
  };
  walk(src, dest);
}

/** Git revision of the repository (for messages). */
export function gitHead() {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: repoRoot, encoding: "utf8" }).trim();
  } catch {
    return "unknown";
  }
}

/**
 * Spawns a long-running process outside the repository and resolves to { child, output() } once
 * `ready(line)` matches a line of its stdout. Rejects if it exits first.
 */
export function spawnUntil(cmd, args, { cwd, env, ready }) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env: env ?? outsideEnv(), stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    let done = false;
    child.stdout.setEncoding("utf8").on("data", (d) => {
      out += d;
      if (!done && out.split("\n").some((l) => ready(l))) {
        done = true;
        resolve({ child, output: () => ({ stdout: out, stderr: err }) });
      }
    });
    child.stderr.setEncoding("utf8").on("data", (d) => (err += d));
    child.on("exit", (code, signal) => {
      if (!done) reject(new Error(`${cmd} ${args.join(" ")} exited ${code ?? signal} before ready\n${out}\n${err}`));
    });
  });
}
