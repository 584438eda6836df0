import { mkdtempSync, rmSync, statSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createTaskDirs, nomadTaskConfig } from "../src/index.js";

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
    // Nomad's modes, not the umask's: a task running as another user can reach and write them.
    const fresh = join(root(), "alloc-2");
    const mode = (d: string) => (statSync(join(fresh, d)).mode & 0o7777).toString(8);
    const old = process.umask(0o077);
    try {
      createTaskDirs(fresh, "web");
    } finally {
      process.umask(old);
    }
    expect(["", "alloc", "alloc/data", "alloc/logs", "alloc/tmp", "web", "web/local", "web/secrets", "web/tmp"].map(mode)).toEqual([
      "755",
      "755",
      "777",
      "777",
      "1777",
      "777",
      "777",
      "777",
      "1777",
    ]);
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

describe("nomadTaskConfig", () => {
  it("builds the TaskConfig Nomad sends: ids, names, NOMAD_* variables, directories, resources", () => {
    const dirs = createTaskDirs(root(), "web");
    const config = new Uint8Array([0x80]);
    const t = nomadTaskConfig({ name: "web", dirs, msgpackDriverConfig: config, stdoutPath: "/o", stderrPath: "/e", allocId: "a1" });
    expect(t.id).toMatch(/^a1\/web\/[0-9a-f]{8}$/);
    expect(t).toMatchObject({
      name: "web",
      allocId: "a1",
      jobName: "nomadkit",
      jobId: "nomadkit",
      taskGroupName: "web",
      namespace: "default",
      user: "",
      allocDir: dirs.allocDir,
      stdoutPath: "/o",
      stderrPath: "/e",
      msgpackDriverConfig: config,
      resources: {
        allocatedResources: { cpu: { cpuShares: 100n }, memory: { memoryMb: 300n } },
        linuxResources: { cpuShares: 100n, memoryLimitBytes: 300n * 1024n * 1024n },
      },
    });
    expect(t.env).toMatchObject({
      ...dirs.env,
      NOMAD_ALLOC_ID: "a1",
      NOMAD_TASK_NAME: "web",
      NOMAD_JOB_NAME: "nomadkit",
      NOMAD_GROUP_NAME: "web",
      NOMAD_NAMESPACE: "default",
      NOMAD_CPU_LIMIT: "100",
      NOMAD_MEMORY_LIMIT: "300",
    });
    expect(t.env!.PATH).toBeTruthy();
    expect(t.networkIsolationSpec).toBeUndefined();
  });

  it("takes job, group, user, resources and extra variables, and makes a new id per call", () => {
    const dirs = createTaskDirs(root(), "db");
    const o = { name: "db", dirs, msgpackDriverConfig: new Uint8Array(), stdoutPath: "/o", stderrPath: "/e" };
    const t = nomadTaskConfig({ ...o, jobName: "j", groupName: "g", namespace: "ns", user: "nobody", cpuMhz: 500, memoryMb: 64, env: { NOMAD_JOB_NAME: "override", X: "1" }, networkIsolation: { path: "/var/run/netns/x" } });
    expect(t).toMatchObject({ jobName: "j", taskGroupName: "g", namespace: "ns", user: "nobody", networkIsolationSpec: { path: "/var/run/netns/x" } });
    expect(t.resources?.linuxResources).toMatchObject({ cpuShares: 500n, memoryLimitBytes: 64n * 1024n * 1024n });
    expect(t.env).toMatchObject({ NOMAD_JOB_NAME: "override", X: "1", NOMAD_GROUP_NAME: "g", NOMAD_MEMORY_LIMIT: "64" });
    expect(nomadTaskConfig(o).allocId).not.toBe(nomadTaskConfig(o).allocId);
    expect(nomadTaskConfig({ ...o, allocId: "same" }).id).not.toBe(nomadTaskConfig({ ...o, allocId: "same" }).id);
  });
});
