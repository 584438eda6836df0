// The gates must bite: in a throwaway copy of the repository, a hand edit to generated code, a
// wire-breaking proto change (against the released baseline and against the base branch) and a lint
// violation each make their gate fail, naming the culprit; wire-compatible changes pass.
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

/** Runs a gate in the copy as outside CI (no PR base, plain buf output), plus `env`. */
function gate(name: string, env: Record<string, string> = {}) {
  const { GITHUB_BASE_REF: _base, GITHUB_ACTIONS: _actions, ...outside } = process.env;
  const r = spawnSync(process.execPath, [path.join(copy, "tools/gates", `${name}.mjs`)], { cwd: copy, encoding: "utf8", env: { ...outside, ...env } });
  return { status: r.status, output: `${r.stdout}\n${r.stderr}` };
}

function git(...args: string[]) {
  return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.invalid", ...args], { cwd: copy, encoding: "utf8" }).trim();
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
      // Listed once, though it is also untracked.
      expect(r.output).toContain(`1 generated file(s) out of sync: ${rel} `);
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
  it("says so when proto/ does not compile, instead of reporting a break", () => {
    withEdit(DRIVER, (s) => s.replace(/\bbool exited = 3;/, "boool exited = 3;"), () => {
      const r = gate("breaking");
      expect(r.status).toBe(1);
      expect(r.output).toContain("proto/ does not compile");
      expect(r.output).not.toContain("wire-breaking change");
    });
  });
  it("passes for a comment-only change", () => {
    withEdit(DRIVER, (s) => s.replace("// The task is running.", "// The task is running (reworded)."), () => {
      const r = gate("breaking");
      expect(r.output).toContain("check:breaking: ok");
      expect(r.status).toBe(0);
    });
  });
  it("in a PR, fails when the PR base is not in the history instead of skipping the comparison", () => {
    const r = gate("breaking", { GITHUB_BASE_REF: "main" });
    expect(r.status).toBe(1);
    expect(r.output).toContain("the PR base origin/main (GITHUB_BASE_REF) is not in this clone's history");
  });
  describe("against origin/main, a break the released baseline does not know", () => {
    // main gains two fields after the release; the branch then deletes one of them again.
    const HISTORY = "tools/gates/baseline/HISTORY.md";
    let original: string;
    beforeAll(() => {
      const file = path.join(copy, DRIVER);
      original = readFileSync(file, "utf8");
      const unreleased = "$1string err = 4;\n  // Unreleased.\n  string nomadkit_unreleased = 99;\n  // Unreleased, kept.\n  string nomadkit_kept = 98;";
      writeFileSync(file, original.replace(/(\n\s*)string err = 4;/, unreleased));
      git("commit", "-qam", "unreleased fields");
      git("update-ref", "refs/remotes/origin/main", "HEAD");
      writeFileSync(file, readFileSync(file, "utf8").replace(/\n\s*\/\/ Unreleased\.\n\s*string nomadkit_unreleased = 99;/, ""));
    });
    afterAll(() => {
      git("reset", "-q", "--hard", "HEAD~1");
      git("update-ref", "-d", "refs/remotes/origin/main");
    });
    /** Runs `npm run baseline` in the copy, runs `fn`, then restores the baseline files. */
    function withBaseline(reason: string, fn: () => void) {
      execFileSync(process.execPath, [path.join(copy, "tools/gates/baseline.mjs"), reason], { cwd: copy, stdio: "ignore" });
      try {
        fn();
      } finally {
        git("checkout", "-q", "--", "tools/gates/baseline");
      }
    }
    const unrecorded = "wire-breaking change against origin/main, and HISTORY.md does not record it";

    it("fails on it, and accepts it once `npm run baseline` records it", () => {
      let r = gate("breaking");
      expect(r.status).toBe(1);
      expect(r.output).toContain('field "99" with name "nomadkit_unreleased" on message "FingerprintResponse" was deleted');
      expect(r.output).toContain("wire-breaking change against origin/main;");
      expect(r.output).not.toContain("against the released baseline (");
      // The same PR base through GITHUB_BASE_REF, as in GitHub Actions.
      expect(gate("breaking", { GITHUB_BASE_REF: "main" }).status).toBe(1);
      withBaseline("drops nomadkit_unreleased", () => {
        r = gate("breaking");
        expect(r.output).toContain("recorded in HISTORY.md; accepted");
        expect(r.status).toBe(0);
      });
    });
    it("does not count an edit or deletion of an existing HISTORY.md line as a record", () => {
      withBaseline("drops nomadkit_unreleased", () => {
        const lines = readFileSync(path.join(copy, HISTORY), "utf8").split("\n");
        const last = lines.length - 2; // the line just appended; the release's record is before it
        const appended = lines[last];
        // Reword the release's record instead of appending one (the image is rebuilt all the same).
        lines.splice(last, 1);
        lines[last - 1] = lines[last - 1].replace("initial release", "first release");
        withEdit(HISTORY, () => lines.join("\n"), () => {
          const r = gate("breaking");
          expect(r.status).toBe(1);
          expect(r.output).toContain(`${unrecorded}: line ${last} of the base's ${HISTORY} was changed or removed`);
        });
        // Delete the release's record and keep the new one.
        withEdit(HISTORY, (s) => s.replace(/^- 2026-11-30 .*\n/m, ""), () => {
          const r = gate("breaking");
          expect(r.status).toBe(1);
          expect(r.output).toContain(`${unrecorded}: line ${last} of the base's ${HISTORY} was changed or removed`);
        });
        expect(appended).toMatch(/^- \d{4}-\d{2}-\d{2} \(from [0-9a-f]+\): drops nomadkit_unreleased$/);
      });
    });
    it("does not count an appended line that is not a record", () => {
      withBaseline("drops nomadkit_unreleased", () => {
        withEdit(HISTORY, (s) => s.replace(/^- (\d{4}-\d{2}-\d{2}) \(from \w+\): drops/m, "- $1: drops"), () => {
          const r = gate("breaking");
          expect(r.status).toBe(1);
          expect(r.output).toMatch(new RegExp(`${unrecorded}: ${HISTORY} line \\d+ is not a record like`));
        });
        withEdit(HISTORY, (s) => s.replace(/^- \d{4}-\d{2}-\d{2} (\(from \w+\): drops)/m, "- 2026-02-30 $1"), () => {
          const r = gate("breaking");
          expect(r.status).toBe(1);
          expect(r.output).toContain('is not a record like `- YYYY-MM-DD (from <sha>): <reason>`: "- 2026-02-30 (from');
        });
      });
    });
    it("does not count a record without the rebuilt image", () => {
      // nomadkit_kept is in proto/ but not in the released image, so a rebuild changes it.
      withEdit(HISTORY, (s) => `${s}- 2026-12-01 (from 0123abc): drops nomadkit_unreleased\n`, () => {
        const r = gate("breaking");
        expect(r.status).toBe(1);
        expect(r.output).toContain(`${unrecorded}: tools/gates/baseline/released.binpb is the base's, not an image of proto/ as changed`);
      });
    });
    it("accepts a record whose rebuilt image is the released one unchanged", () => {
      // Both unreleased fields go: proto/ is the release again, and a rebuild writes the same image.
      withEdit(DRIVER, (s) => s.replace(/\n\s*\/\/ Unreleased, kept\.\n\s*string nomadkit_kept = 98;/, ""), () => {
        withEdit(HISTORY, (s) => `${s}- 2026-12-01 (from 0123abc): drops the unreleased fields\n`, () => {
          const r = gate("breaking");
          expect(r.output).toContain("recorded in HISTORY.md; accepted");
          expect(r.status).toBe(0);
        });
      });
    });
  });
  it("against origin/main: a change that relaxes buf.yaml must still pass the base's rules", () => {
    git("update-ref", "refs/remotes/origin/main", "HEAD");
    try {
      const ignoreDriver = (s: string) => s.replace(/\nbreaking:\n  use:/, `\nbreaking:\n  ignore:\n    - ${DRIVER}\n  use:`);
      withEdit("buf.yaml", ignoreDriver, () => {
        withEdit(DRIVER, (s) => s.replace(/(bool\s+exited\s*=\s*)3;/, "$113;"), () => {
          const r = gate("breaking");
          expect(r.status).toBe(1);
          expect(r.output).toContain("wire-breaking change against origin/main under its buf.yaml rules");
          expect(r.output).toMatch(/ExecTaskStreamingResponse/);
        });
      });
    } finally {
      git("update-ref", "-d", "refs/remotes/origin/main");
    }
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
  it("fails on a field without a comment that a buf:lint:ignore comment waives", () => {
    const waived = (s: string) => s.replace(/(\n\s*)string err = 4;/, "$1string err = 4;\n  // buf:lint:ignore COMMENT_FIELD\n  string nomadkit_undocumented = 99;");
    withEdit(DRIVER, waived, () => {
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

describe("check:lint against origin/main: a change that relaxes buf.yaml", () => {
  const UNDOCUMENTED = (s: string) => s.replace(/(\n\s*)string err = 4;/, "$1string err = 4;\n  string nomadkit_undocumented = 99;");
  const dropCommentField = (s: string) => s.replace(/\n    - COMMENT_FIELD\n/, "\n");
  beforeAll(() => git("update-ref", "refs/remotes/origin/main", "HEAD"));
  afterAll(() => git("update-ref", "-d", "refs/remotes/origin/main"));

  it("fails when the proto change breaks a rule the change drops from buf.yaml", () => {
    withEdit("buf.yaml", dropCommentField, () => {
      withEdit(DRIVER, UNDOCUMENTED, () => {
        for (const env of [{}, { GITHUB_BASE_REF: "main" }]) {
          const r = gate("lint", env);
          expect(r.status).toBe(1);
          expect(r.output).toContain('Field "nomadkit_undocumented" should have a non-empty comment');
          expect(r.output).toContain("the lint rules were relaxed: proto/ breaks rules of origin/main's buf.yaml");
        }
      });
    });
  });
  it("fails when the proto change breaks a rule the change ignores for its file", () => {
    const ignore = (s: string) => s.replace("\n  ignore_only:\n", `\n  ignore_only:\n    COMMENT_FIELD:\n      - ${DRIVER}\n`);
    withEdit("buf.yaml", ignore, () => {
      withEdit(DRIVER, UNDOCUMENTED, () => {
        const r = gate("lint");
        expect(r.status).toBe(1);
        expect(r.output).toContain("the lint rules were relaxed");
      });
    });
  });
  it("passes the relaxation alone, and a buf.yaml edit with a proto change that keeps the base's rules", () => {
    withEdit("buf.yaml", dropCommentField, () => {
      const r = gate("lint");
      expect(r.output).toContain("buf.yaml differs from origin/main; proto/ again, under its buf.yaml");
      expect(r.output).toContain("check:lint: ok");
      expect(r.status).toBe(0);
    });
    withEdit("buf.yaml", (s) => s.replace("# buf configuration", "# The buf configuration"), () => {
      withEdit(DRIVER, (s) => s + "\n// An addition.\nmessage NomadkitAddition {}\n", () => {
        const r = gate("lint");
        expect(r.output).toContain("check:lint: ok");
        expect(r.status).toBe(0);
      });
    });
  });
});

describe("check:lint in a PR", () => {
  it("fails when the PR base is not in the history instead of skipping the buf.yaml comparison", () => {
    const r = gate("lint", { GITHUB_BASE_REF: "main" });
    expect(r.status).toBe(1);
    expect(r.output).toContain("the PR base origin/main (GITHUB_BASE_REF) is not in this clone's history");
  });
});

describe("check:packages", () => {
  it("fails naming a package.json that is not JSON (before packing anything)", () => {
    const rel = "packages/protoc-gen-nomadkit/package.json";
    withEdit(rel, (src) => src.replace("{", "{,"), () => {
      const r = gate("packages");
      expect(r.status).toBe(1);
      expect(r.output).toMatch(new RegExp(`check:packages: FAILED\\n  - ${rel.replace(/[./]/g, "\\$&")}: .*JSON`));
    });
  });
});
