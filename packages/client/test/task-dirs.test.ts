import { mkdtempSync, rmSync, statSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createTaskDirs } from "../src/index.js";

const made: string[] = [];
afterEach(() => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});
function root(): string {
  const d = mkdtempSync(join(tmpdir(), "nk-taskdirs-"));
  made.push(d);
  return d;
}

describe("createTaskDirs", () => {
  it("creates Nomad's allocation and task directories and names them in env", () => {
    const alloc = join(root(), "alloc-1"); // made too
    const dirs = createTaskDirs(alloc, "web");
    expect(dirs).toEqual({
      allocDir: alloc,
      sharedDir: join(alloc, "alloc"),
      logsDir: join(alloc, "alloc/logs"),
      taskDir: join(alloc, "web"),
      env: { NOMAD_ALLOC_DIR: join(alloc, "alloc"), NOMAD_TASK_DIR: join(alloc, "web/local"), NOMAD_SECRETS_DIR: join(alloc, "web/secrets") },
    });
    for (const d of ["alloc/data", "alloc/logs", "alloc/tmp", "web/local", "web/secrets", "web/tmp", "web/private"]) {
      expect(statSync(join(alloc, d)).isDirectory(), d).toBe(true);
    }
  });

  it("keeps what a second task of the same allocation finds there", () => {
    const alloc = root();
    const first = createTaskDirs(alloc, "a");
    writeFileSync(join(first.sharedDir, "data/kept"), "x");
    const second = createTaskDirs(alloc, "b");
    expect(second.sharedDir).toBe(first.sharedDir);
    expect(readFileSync(join(second.sharedDir, "data/kept"), "utf8")).toBe("x");
    expect(statSync(join(alloc, "b/local")).isDirectory()).toBe(true);
  });

  it("refuses task names that are not one directory below the allocation", () => {
    const alloc = root();
    for (const name of ["", ".", "..", "a/b", "../x", "a\0b"]) {
      expect(() => createTaskDirs(alloc, name), JSON.stringify(name)).toThrow(/cannot name a directory below the allocation directory/);
    }
  });
});
