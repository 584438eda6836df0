#!/usr/bin/env node
// check:drift — regenerates every output of buf.gen.yaml into a temporary directory with the pinned
// toolchain and compares it with the working tree. Any difference fails, with a porcelain-style
// file list (M changed, A generated but missing from the tree, D in the tree but no longer generated)
// and the diff. Comparing against a fresh generation (not `git diff` after regenerating in place)
// also catches hand edits that are not committed yet, and untracked leftovers in the gen dirs.
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { bin, capture, finish, root, run } from "./exec.mjs";

const outDirs = [...readFileSync(path.join(root, "buf.gen.yaml"), "utf8").matchAll(/^\s*out:\s*(\S+)\s*$/gm)].map((m) => m[1]);
const tmp = mkdtempSync(path.join(tmpdir(), "nomadkit-drift-"));
const failures = [];
try {
  if (run(bin("buf"), ["generate", "--output", tmp]) !== 0) {
    failures.push("buf generate failed (is protoc-gen-nomadkit built? run `npm run build`)");
  } else {
    const changes = [];
    for (const dir of outDirs) {
      const fresh = listFiles(path.join(tmp, dir));
      const tree = listFiles(path.join(root, dir));
      for (const f of new Set([...fresh, ...tree])) {
        const rel = path.join(dir, f);
        if (!tree.has(f)) changes.push(`A  ${rel}`);
        else if (!fresh.has(f)) changes.push(`D  ${rel}`);
        else if (!readFileSync(path.join(tmp, dir, f)).equals(readFileSync(path.join(root, dir, f)))) changes.push(`M  ${rel}`);
      }
      // Generated output that matches but is not committed is drift too: CI builds from commits.
      const untracked = capture("git", ["status", "--porcelain", "--untracked-files=all", "--", dir]);
      // A stray file is listed once (as D), not again as untracked.
      const listed = new Set(changes.map((c) => c.slice(3)));
      for (const line of untracked ? untracked.split("\n") : []) if (line.startsWith("??") && !listed.has(line.slice(3))) changes.push(line);
    }
    if (changes.length) {
      console.error(
        "Generated code differs from a fresh `npm run gen` (M changed, A generated but missing from the tree," +
          " D in the tree but not generated, ?? generated but not committed):\n" + changes.join("\n") + "\n",
      );
      for (const dir of outDirs) run("git", ["--no-pager", "diff", "--no-index", "--stat", "--", path.join(root, dir), path.join(tmp, dir)]);
      for (const dir of outDirs) run("git", ["--no-pager", "diff", "--no-index", "--", path.join(root, dir), path.join(tmp, dir)]);
      failures.push(`${changes.length} generated file(s) out of sync: ${changes.map((c) => c.slice(3)).join(", ")}` +
        " — never edit src/gen by hand; run `npm run generate` and commit the result");
    }
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
finish("check:drift", failures);

function listFiles(dir, prefix = "", out = new Set()) {
  let entries;
  try {
    entries = readdirSync(dir);
  } catch {
    return out;
  }
  for (const name of entries) {
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) listFiles(full, path.join(prefix, name), out);
    else out.add(path.join(prefix, name));
  }
  return out;
}
