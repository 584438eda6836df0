#!/usr/bin/env node
// check:breaking — WIRE_JSON breaking-change detection (rules in buf.yaml) against
//   (a) the committed baseline image of the released contract (tools/gates/baseline/released.binpb),
//       which works offline in any clone, shallow or not; and
//   (b) the PR base (GITHUB_BASE_REF in GitHub Actions; then it must be in the history) or, outside
//       a PR, origin/main when git history has it.
// An intended break is recorded by regenerating the baseline (`npm run baseline -- "reason"`), which
// also appends the reason to tools/gates/baseline/HISTORY.md; check (b) then accepts the change
// because the record is part of the same diff: a new HISTORY.md line in that format, the older lines
// untouched, and the image rebuilt (history.mjs). When buf.yaml differs from the base, (b) also runs
// under the base's buf.yaml, so a change cannot relax the rules that judge it.
import { devNull } from "node:os";
import { changedBufConfig, findBase } from "./base.mjs";
import { bin, capture, finish, run } from "./exec.mjs";
import { BASELINE, recordedSince } from "./history.mjs";

const POLICY = 'an intended break (Nomad changed the protocol) is recorded with `npm run baseline -- "reason"`, see the breaking-change policy in README.md';
const failures = [];
// In GitHub Actions, buf's own annotation format puts each break on the PR's diff.
const format = process.env.GITHUB_ACTIONS === "true" ? ["--error-format", "github-actions"] : [];

// A proto/ that does not compile makes buf breaking report the compile errors; say so, not "breaking".
if (run(bin("buf"), ["build", "proto", "-o", devNull]) !== 0) {
  failures.push("proto/ does not compile (errors above), so it cannot be compared with anything");
  finish("check:breaking", failures);
}

console.log(`check:breaking: proto/ against the released baseline ${BASELINE}`);
if (run(bin("buf"), ["breaking", "proto", "--against", BASELINE, ...format]) !== 0)
  failures.push(`wire-breaking change against the released baseline (${BASELINE}); ${POLICY}`);

// In a PR the comparison must happen: a checkout without the base's history (fetch-depth 1) would
// otherwise pass every break the released baseline does not know about yet.
const { ref: baseRef, base, error } = findBase();
if (error) {
  failures.push(error);
} else if (!base) {
  console.log("check:breaking: no origin/main in this clone's history; base comparison skipped");
} else if (!capture("git", ["ls-tree", "-d", base, "proto"])) {
  console.log(`check:breaking: ${baseRef} has no proto/ yet; base comparison skipped`);
} else {
  const record = recordedSince(base);
  const recorded = record.changed && record.problems.length === 0;
  console.log(`check:breaking: proto/ against ${baseRef} (${base.slice(0, 12)})`);
  // A recorded break still prints what changed, but not as PR error annotations.
  const against = ["breaking", "proto", "--against", `.git#ref=${base},subdir=proto`, ...(recorded ? [] : format)];
  let status = run(bin("buf"), against);
  let rules = "";
  // A change that also relaxes buf.yaml (an ignore, a dropped rule) must still pass the base's rules.
  const baseConfig = changedBufConfig(base);
  if (status === 0 && baseConfig) {
    console.log(`check:breaking: buf.yaml differs from ${baseRef}; proto/ against ${baseRef} again, under its buf.yaml`);
    status = run(bin("buf"), [...against, "--config", baseConfig]);
    rules = ` under its buf.yaml rules (this change relaxes them)`;
  }
  if (status !== 0 && recorded) console.log("check:breaking: break against the base is recorded in HISTORY.md; accepted");
  else if (status !== 0 && record.changed)
    failures.push(`wire-breaking change against ${baseRef}${rules}, and HISTORY.md does not record it: ${record.problems.join("; ")}; ${POLICY}`);
  else if (status !== 0) failures.push(`wire-breaking change against ${baseRef}${rules}; ${POLICY}`);
}
finish("check:breaking", failures);
