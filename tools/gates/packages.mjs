#!/usr/bin/env node
// check:packages — every public workspace package must pack cleanly for both module systems:
// publint (package.json/exports/files) and attw --pack (types resolve for node16 CJS + ESM and
// bundlers; node10 resolution is out of scope: engines.node is >=20), and every package its built
// code or types import is declared (dependencies, peer or optional): an undeclared one works only
// while npm happens to hoist it, and breaks under pnpm, Yarn PnP or `--install-strategy=linked`.
import { readFileSync } from "node:fs";
import path from "node:path";
import { bin, finish, root, run } from "./exec.mjs";
import { undeclaredImports } from "./imports.mjs";

/** A package.json, parsed; one that is not JSON fails the gate naming the file. */
function readPackageJson(dir) {
  const file = path.join(dir, "package.json");
  try {
    return JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    finish("check:packages", [`${path.relative(root, file) || file}: ${err.message}`]);
  }
}

const rootPkg = readPackageJson(root);
const failures = [];
for (const ws of rootPkg.workspaces) {
  const pkg = readPackageJson(path.join(root, ws));
  if (pkg.private) continue;
  console.log(`\n== ${pkg.name} (${ws})`);
  if (run(bin("publint"), ["--strict", ws]) !== 0) failures.push(`publint: ${pkg.name}`);
  const attw = ["--pack", ws, "--profile", "node16"];
  // Quiet when clean; on failure run again for the full resolution table (a failure either way).
  if (run(bin("attw"), [...attw, "--quiet"]) !== 0) {
    run(bin("attw"), attw);
    failures.push(`attw: ${pkg.name}`);
  } else console.log("attw: ok");
  const undeclared = undeclaredImports(path.join(root, ws), pkg);
  if (undeclared.length > 0) failures.push(`${pkg.name} imports packages its package.json does not declare: ${undeclared.join(", ")}`);
  else console.log("imports: all declared");
}
finish("check:packages", failures);
