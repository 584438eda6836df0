// The gates must bite: in a throwaway copy of the repository, a hand edit to generated code, a
// wire-breaking proto change and a lint violation each make their gate fail, naming the culprit.
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";

// Each gate run spawns buf and its plugins; on a loaded 2-core machine that can take a minute.
vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

const repo = path.resolve(__dirname, "../..");
let copy: string;

/** Copies the tracked (and untracked, not ignored) files, links node_modules, and commits. */
function copyRepo(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "nomadkit-gates-"));
  const files = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "-z"], { cwd: repo, encoding: "utf8" })
    .split("\0")
    .filter(Boolean);
  for (const f of files) {
    mkdirSync(path.dirname(path.join(dir, f)), { recursive: true });
    try {
      cpSync(path.join(repo, f), path.join(dir, f));
    } catch {
      // deleted in the working tree but still in the index: not part of the copy
    }
  }
  symlinkSync(path.join(repo, "node_modules"), path.join(dir, "node_modules"));
  const git = (...args: string[]) => execFileSync("git", args, { cwd: dir, stdio: "ignore" });
  git("init", "-q", "-b", "main");
  git("add", "-A");
  git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "copy");
  return dir;
}

function gate(name: string) {
  const r = spawnSync(process.execPath, [path.join(copy, "tools/gates", `${name}.mjs`)], { cwd: copy, encoding: "utf8" });
  return { status: r.status, output: `${r.stdout}\n${r.stderr}` };
}

/** Applies `edit` to a file of the copy, runs `fn`, then restores the file. */
function withEdit(rel: string, edit: (src: string) => string, fn: () => void) {
  const file = path.join(copy, rel);
  const original = readFileSync(file, "utf8");
  const changed = edit(original);
  expect(changed).not.toBe(original);
  writeFileSync(file, changed);
  try {
    fn();
  } finally {
    writeFileSync(file, original);
  }
}

const DRIVER = "proto/hashicorp/nomad/plugins/drivers/proto/driver.proto";

beforeAll(() => {
  copy = copyRepo();
});
afterAll(() => {
  if (copy) rmSync(copy, { recursive: true, force: true });
});

describe("the gates pass on the repository as it is", () => {
  it.each(["lint", "breaking", "drift"])("check:%s", (name) => {
    const r = gate(name);
    expect(r.output).toContain(`check:${name}: ok`);
    expect(r.status).toBe(0);
  });
});

describe("check:drift", () => {
  it("fails naming a hand-edited generated file", () => {
    const rel = "packages/protocol/src/gen/hashicorp/nomad/plugins/drivers/proto/driver_pb.ts";
    withEdit(rel, (s) => s.replace("export type InitRequest", "export type InitRequestEdited"), () => {
      const r = gate("drift");
      expect(r.status).toBe(1);
      expect(r.output).toContain(`M  ${rel}`);
      expect(r.output).toContain("InitRequestEdited");
    });
  });
  it("fails naming a stray file in a generated directory", () => {
    const rel = "packages/protocol/src/gen/stray_pb.ts";
    writeFileSync(path.join(copy, rel), "export {};\n");
    try {
      const r = gate("drift");
      expect(r.status).toBe(1);
      expect(r.output).toContain(`D  ${rel}`);
    } finally {
      rmSync(path.join(copy, rel));
    }
  });
});

describe("check:breaking", () => {
  it("fails when a field is renumbered", () => {
    withEdit(DRIVER, (s) => s.replace(/(bool\s+exited\s*=\s*)3;/, "$113;"), () => {
      const r = gate("breaking");
      expect(r.status).toBe(1);
      expect(r.output).toMatch(/ExecTaskStreamingResponse/);
    });
  });
  it("fails when an RPC is renamed", () => {
    withEdit(DRIVER, (s) => s.replace(/rpc\s+TaskStats\s*\(/, "rpc TaskStatistics("), () => {
      const r = gate("breaking");
      expect(r.status).toBe(1);
      expect(r.output).toMatch(/TaskStats/);
    });
  });
  it("fails when a field is deleted, even with its number and name reserved", () => {
    withEdit(DRIVER, (s) => s.replace(/\n\s*\/\/ Fingerprinting error text, if any\.\n\s*string err = 4;/, '\n  reserved 4;\n  reserved "err";'), () => {
      const r = gate("breaking");
      expect(r.status).toBe(1);
      expect(r.output).toContain('field "4" with name "err" on message "FingerprintResponse" was deleted');
    });
  });
  it("fails when an enum value is deleted, even with its number and name reserved", () => {
    withEdit(DRIVER, (s) => s.replace(/\n\s*\/\/ The task has exited\.\n\s*EXITED = 2;/, '\n  reserved 2;\n  reserved "EXITED";'), () => {
      const r = gate("breaking");
      expect(r.status).toBe(1);
      expect(r.output).toContain('enum value "2" on enum "TaskState" was deleted');
    });
  });
  it("passes for a wire-compatible addition", () => {
    withEdit(DRIVER, (s) => s + "\n// An addition.\nmessage NomadkitAddition {}\n", () => {
      const r = gate("breaking");
      expect(r.status).toBe(0);
    });
  });
});

describe("check:lint", () => {
  it("fails on a lint violation", () => {
    withEdit(DRIVER, (s) => s + "\n// Badly named.\nmessage bad_name {}\n", () => {
      const r = gate("lint");
      expect(r.status).toBe(1);
      expect(r.output).toMatch(/bad_name/);
    });
  });
  it("fails on a field without a comment", () => {
    withEdit(DRIVER, (s) => s.replace(/(\n\s*)string err = 4;/, "$1string err = 4;\n  string nomadkit_undocumented = 99;"), () => {
      const r = gate("lint");
      expect(r.status).toBe(1);
      expect(r.output).toContain('Field "nomadkit_undocumented" should have a non-empty comment');
    });
  });
  it("fails on unformatted protos", () => {
    withEdit(DRIVER, (s) => s.replace("message ExitResult {", "message ExitResult    {"), () => {
      const r = gate("lint");
      expect(r.status).toBe(1);
      expect(r.output).toContain("buf-formatted");
    });
  });
});

