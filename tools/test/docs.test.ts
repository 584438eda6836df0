// `npm run docs` must stay warning-free (TypeDoc with treatWarningsAsErrors and the notDocumented
// validation, see typedoc.json). The packages listed here already are; keep them so. When every
// public package is clean, this list equals all of them and the test is simply `npm run docs`.
import { existsSync, rmSync } from "node:fs";
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { node, repoRoot, tempDir } from "../packaging/lib.mjs";

const CLEAN = ["@nomadkit/protocol", "@nomadkit/protoc-gen-nomadkit", "@nomadkit/conformance"];

const out = tempDir("nomadkit-docs-test-");
afterAll(() => rmSync(out, { recursive: true, force: true }));

it(`TypeDoc documents ${CLEAN.join(", ")} with no warnings`, () => {
  // Runs with the repo's own environment (typedoc from its node_modules); throws with the warnings on failure.
  node([path.join(repoRoot, "tools/packaging/docs.mjs"), "--only", CLEAN.join(","), "--out", out], { cwd: repoRoot, env: process.env, timeout: 400_000 });
  expect(existsSync(path.join(out, "index.html"))).toBe(true);
}, 420_000);
