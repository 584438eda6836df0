#!/usr/bin/env node
// Builds the package in the current directory as dual ESM + CommonJS, the way protobuf-es does:
// dist/esm (ESM, .js + .d.ts) and dist/cjs (CommonJS, .js + .d.ts, marked by a nested package.json).
// Both trees keep the source layout, so wildcard subpath exports resolve in either format.
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
const run = (args) => execFileSync(process.execPath, [tsc, ...args], { stdio: "inherit" });

rmSync("dist", { recursive: true, force: true });
run(["-p", "tsconfig.json", "--outDir", "dist/esm"]);
run(["-p", "tsconfig.json", "--outDir", "dist/cjs", "--module", "commonjs", "--moduleResolution", "node10"]);
mkdirSync("dist/cjs", { recursive: true });
writeFileSync("dist/cjs/package.json", JSON.stringify({ type: "commonjs" }) + "\n");
