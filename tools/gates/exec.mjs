// Shared helpers for the gate scripts: run repo-local binaries (buf, attw, publint) by path so the
// gates work the same from npm scripts, CI and the mutation tests' temp copies.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";

/** Absolute path of the repository root (the gates always run from it). */
export const root = process.cwd();

/** Path of a binary in node_modules/.bin, searched from the repo root upwards. */
export function bin(name) {
  let dir = root;
  for (;;) {
    const candidate = path.join(dir, "node_modules", ".bin", name);
    if (existsSync(candidate)) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`${name} not found in node_modules/.bin; run npm ci first`);
    dir = parent;
  }
}

/** Runs a command with inherited output; returns its exit status. */
export function run(cmd, args, options = {}) {
  const env = { ...process.env, PATH: `${path.dirname(bin("buf"))}${path.delimiter}${process.env.PATH}` };
  const r = spawnSync(cmd, args, { stdio: "inherit", cwd: root, env, ...options });
  if (r.error) throw r.error;
  return r.status ?? 1;
}

/** Runs a command and captures stdout (trimmed); null when it fails. */
export function capture(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: root, encoding: "utf8" });
  return r.status === 0 ? r.stdout.trim() : null;
}

/** Prints a gate result line and exits with its status. */
export function finish(gate, failures) {
  if (failures.length) {
    console.error(`\n${gate}: FAILED\n${failures.map((f) => `  - ${f}`).join("\n")}`);
    process.exit(1);
  }
  console.log(`${gate}: ok`);
}
