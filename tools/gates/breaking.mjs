#!/usr/bin/env node
// check:breaking — WIRE_JSON breaking-change detection (rules in buf.yaml) against
//   (a) the committed baseline image of the released contract (tools/gates/baseline/released.binpb),
//       which works offline in any clone, shallow or not; and
//   (b) the PR base or origin/main, when git history has it.
// An intended break is recorded by regenerating the baseline (`npm run baseline -- "reason"`), which
// also appends the reason to tools/gates/baseline/HISTORY.md; check (b) then accepts the change
// because the record is part of the same diff.
import { bin, capture, finish, run } from "./exec.mjs";

const BASELINE = "tools/gates/baseline/released.binpb";
const failures = [];

console.log(`check:breaking: proto/ against the released baseline ${BASELINE}`);
if (run(bin("buf"), ["breaking", "proto", "--against", BASELINE]) !== 0)
  failures.push(`wire-breaking change against the released baseline (${BASELINE})`);

const candidates = [process.env.GITHUB_BASE_REF && `origin/${process.env.GITHUB_BASE_REF}`, "origin/main"].filter(Boolean);
const baseRef = candidates.find((ref) => capture("git", ["rev-parse", "--verify", "--quiet", `${ref}^{commit}`]));
const base = baseRef && capture("git", ["merge-base", "HEAD", baseRef]);
if (!base) {
  console.log("check:breaking: no PR base / origin/main in this clone's history; base comparison skipped");
} else if (!capture("git", ["ls-tree", "-d", base, "proto"])) {
  console.log(`check:breaking: ${baseRef} has no proto/ yet; base comparison skipped`);
} else {
  const recorded = capture("git", ["diff", "--name-only", base, "--", "tools/gates/baseline/HISTORY.md"]);
  console.log(`check:breaking: proto/ against ${baseRef} (${base.slice(0, 12)})`);
  const status = run(bin("buf"), ["breaking", "proto", "--against", `.git#ref=${base},subdir=proto`]);
  if (status !== 0 && recorded) console.log("check:breaking: break against the base is recorded in HISTORY.md; accepted");
  else if (status !== 0) failures.push(`wire-breaking change against ${baseRef}; see the breaking-change policy in README.md`);
}
finish("check:breaking", failures);
