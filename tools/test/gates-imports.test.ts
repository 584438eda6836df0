// check:packages' import check: a package's shipped code may import only what its package.json
// declares (dependencies, peer or optional), builtins, and itself.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { undeclaredImports } from "../gates/imports.mjs";

const dir = mkdtempSync(path.join(tmpdir(), "nomadkit-imports-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(rel: string, text: string) {
  mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
  writeFileSync(path.join(dir, rel), text);
}

it("names what the built code and types import without declaring it, and nothing else", () => {
  file(
    "dist/esm/index.js",
    [
      'import { a } from "declared-dep";',
      'import "@scope/side-effect/sub/path.js";',
      'import fs from "node:fs";',
      'import path from "path";',
      'import { self } from "@me/pkg/other";',
      'const lazy = await import("peer-one");',
      'export * from "./local.js";',
      // A code generator's method call names a symbol, not a package.
      'f.import("ClientRuntime", "@nomadkit/client");',
    ].join("\n"),
  );
  file("dist/cjs/index.cjs", 'const x = require("undeclared-cjs"); const o = require("optional-one");');
  file("dist/esm/index.d.ts", 'import type { T } from "types-only-dep";');
  file("bin/tool", '#!/usr/bin/env node\nimport "undeclared-in-bin";\n');
  const pkg = {
    name: "@me/pkg",
    dependencies: { "declared-dep": "1.0.0" },
    peerDependencies: { "peer-one": "1.0.0" },
    optionalDependencies: { "optional-one": "1.0.0" },
    devDependencies: { "types-only-dep": "1.0.0" },
  };
  expect(undeclaredImports(dir, pkg).sort()).toEqual([
    "@scope/side-effect (imported by dist/esm/index.js)",
    "types-only-dep (imported by dist/esm/index.d.ts)",
    "undeclared-cjs (imported by dist/cjs/index.cjs)",
    "undeclared-in-bin (imported by bin/tool)",
  ]);
});
