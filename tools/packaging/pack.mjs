#!/usr/bin/env node
// Packs every public package (what `npm publish` would upload) into a directory and checks each
// tarball's contents with the rules in tarball.mjs; the same as the first part of
// tools/test/packaging.test.ts, for looking at the tarballs by hand.
//
//   node tools/packaging/pack.mjs [dest]     (default: a new directory under the OS temp dir)
import path from "node:path";
import { packAll, tempDir } from "./lib.mjs";
import { tarballProblems } from "./tarball.mjs";

const dest = process.argv[2] ? path.resolve(process.argv[2]) : tempDir("nomadkit-pack-");
let failed = false;
for (const p of packAll(dest)) {
  const problems = tarballProblems(p);
  failed ||= problems.length > 0;
  console.log(`${path.relative(process.cwd(), p.tarball) || p.tarball}  ${p.files.length} files${problems.length ? "" : "  ok"}`);
  for (const problem of problems) console.log(`  - ${problem}`);
}
process.exit(failed ? 1 : 0);
