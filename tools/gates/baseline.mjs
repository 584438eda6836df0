#!/usr/bin/env node
// Regenerates the released-contract baseline image on purpose. Usage:
//   npm run baseline -- "why the released contract changes (e.g. Nomad 2.1 adds field X)"
// Commit the new image together with the HISTORY.md line this appends.
import { appendFileSync } from "node:fs";
import { capture } from "./exec.mjs";
import { BASELINE, HISTORY, buildImage, historyLine } from "./history.mjs";

const reason = process.argv.slice(2).join(" ").trim();
if (!reason) {
  console.error('baseline: give the reason, e.g. npm run baseline -- "Nomad 2.1 adds DriverCapabilities.foo"');
  process.exit(2);
}
if (buildImage(BASELINE) !== 0) process.exit(1);
const head = capture("git", ["rev-parse", "--short", "HEAD"]) ?? "uncommitted";
appendFileSync(HISTORY, historyLine(new Date(), head, reason));
console.log(`baseline: wrote ${BASELINE}; commit it with ${HISTORY}`);
