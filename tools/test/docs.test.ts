// `npm run docs` must stay warning-free (TypeDoc with treatWarningsAsErrors and the notDocumented
// validation, see typedoc.json). Every public package is clean; keep them so. A new public package
// must be added here (the first test fails until it is), so the docs of every package stay guarded.
import { existsSync, rmSync } from "node:fs";
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { node, publicPackages, repoRoot, tempDir } from "../packaging/lib.mjs";

const CLEAN = [
  "@nomadkit/protocol",
  "@nomadkit/protoc-gen-nomadkit",
  "@nomadkit/client",
  "@nomadkit/server",
  "@nomadkit/conformance",
  "@nomadkit/cli",
];

const out = tempDir("nomadkit-docs-test-");
afterAll(() => rmSync(out, { recursive: true, force: true }));

it("CLEAN lists every public package", () => {
  expect([...CLEAN].sort()).toEqual(publicPackages().map((p) => p.name).sort());
});

it(`TypeDoc documents ${CLEAN.join(", ")} with no warnings`, () => {
  // Runs with the repo's own environment (typedoc from its node_modules); throws with the warnings on failure.
  node([path.join(repoRoot, "tools/packaging/docs.mjs"), "--only", CLEAN.join(","), "--out", out], { cwd: repoRoot, env: process.env, timeout: 400_000 });
  expect(existsSync(path.join(out, "index.html"))).toBe(true);
}, 420_000);
