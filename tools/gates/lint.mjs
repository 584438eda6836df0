#!/usr/bin/env node
// check:lint — buf lint (rules and the reasoned exceptions live in buf.yaml) and buf format.
// When buf.yaml differs from the base (the PR base, or origin/main; see base.mjs), proto/ must also
// pass the base's lint rules, so a change cannot relax the rules that judge it: a relaxation goes in
// a change of its own, without proto edits, where it is reviewed as one.
import { changedBufConfig, findBase } from "./base.mjs";
import { bin, finish, run } from "./exec.mjs";

const failures = [];
const lint = run(bin("buf"), ["lint"]);
if (lint !== 0) failures.push("buf lint reported violations (see above)");

const { ref, base, error } = findBase();
if (error) failures.push(error);
const baseConfig = base && changedBufConfig(base);
if (lint === 0 && baseConfig) {
  console.log(`check:lint: buf.yaml differs from ${ref}; proto/ again, under its buf.yaml`);
  if (run(bin("buf"), ["lint", "--config", baseConfig]) !== 0)
    failures.push(
      `the lint rules were relaxed: proto/ breaks rules of ${ref}'s buf.yaml (see above) that this change's buf.yaml drops or ignores; ` +
        "relax buf.yaml (each exception naming the frozen Nomad name that forces it) in a change of its own, without proto edits",
    );
}

if (run(bin("buf"), ["format", "proto", "--diff", "--exit-code"]) !== 0)
  failures.push("proto files are not buf-formatted: run `npx buf format -w proto`");
finish("check:lint", failures);
