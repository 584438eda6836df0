#!/usr/bin/env node
// check:lint — buf lint (rules and the reasoned exceptions live in buf.yaml) and buf format.
import { bin, finish, run } from "./exec.mjs";

const failures = [];
if (run(bin("buf"), ["lint"]) !== 0) failures.push("buf lint reported violations (see above)");
if (run(bin("buf"), ["format", "proto", "--diff", "--exit-code"]) !== 0)
  failures.push("proto files are not buf-formatted: run `npx buf format -w proto`");
finish("check:lint", failures);
