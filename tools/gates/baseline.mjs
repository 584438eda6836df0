#!/usr/bin/env node
// Regenerates the released-contract baseline image on purpose. Usage:
//   npm run baseline -- "why the released contract changes (e.g. Nomad 2.1 adds field X)"
// Commit the new image together with the HISTORY.md line this appends.
import { appendFileSync } from "node:fs";
import { bin, capture, run } from "./exec.mjs";

const reason = process.argv.slice(2).join(" ").trim();
if (!reason) {
  console.error('baseline: give the reason, e.g. npm run baseline -- "Nomad 2.1 adds DriverCapabilities.foo"');
  process.exit(2);
}
const out = "tools/gates/baseline/released.binpb";
if (run(bin("buf"), ["build", "proto", "--exclude-source-info", "-o", out]) !== 0) process.exit(1);
const head = capture("git", ["rev-parse", "--short", "HEAD"]) ?? "uncommitted";
appendFileSync("tools/gates/baseline/HISTORY.md", `- ${new Date().toISOString().slice(0, 10)} (from ${head}): ${reason}\n`);
console.log(`baseline: wrote ${out}; commit it with tools/gates/baseline/HISTORY.md`);
