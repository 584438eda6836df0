import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { cpus } from "node:os";
import { createTaskDirs, makeDirectory, nodeTotalComputeMhz, nomadAgentConfig, nomadTaskConfig } from "../src/index.js";

const made: string[] = [];
afterEach(() => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});
function root(): string {
  const d = mkdtempSync(join(tmpdir(), "nk-taskdirs-"));
  // Reachable by nobody (mkdtemp makes it 0700).
  chmodSync(d, 0o755);
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
    // client/allocdir: every directory below the allocation's is 0777 (the task's tmp sticky), alloc/ included.
    const below = ["alloc", "alloc/data", "alloc/logs", "alloc/tmp", "web", "web/local", "web/secrets", "web/private", "web/tmp"];
    expect(["", ...below].map(mode)).toEqual(["755", "777", "777", "777", "777", "777", "777", "777", "777", "1777"]);
    // As root, Nomad gives them to nobody, so a task running as nobody can write where it can under Nomad.
    if (process.getuid?.() === 0) {
      const id = (flag: string) => execFileSync("id", [flag, "nobody"], { encoding: "utf8" }).trim();
      const nobody = Number(id("-u"));
      expect(below.map((d) => statSync(join(fresh, d)).uid)).toEqual(below.map(() => nobody));
      expect(statSync(fresh).uid).toBe(0);
      for (const d of ["alloc/ready", "web/local/x", "web/private/x"]) {
        execFileSync("setpriv", [`--reuid=${nobody}`, `--regid=${id("-g")}`, "--clear-groups", "touch", join(fresh, d)]);
      }
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

  it("a bad allocation directory fails at once, naming it (under /proc, where Node's recursive mkdir never returned)", () => {
    // In a child process with a deadline: a regression hangs the process (even SIGINT is not heard), not the suite.
    const built = fileURLToPath(new URL("../dist/esm/index.js", import.meta.url));
    const script = `
      const { createTaskDirs } = await import(${JSON.stringify(built)});
      try { createTaskDirs("/proc/nonexistent-xyz/alloc", "web"); console.log("no error"); }
      catch (err) { console.log(JSON.stringify({ message: err.message, code: err.code })); }`;
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 30_000, killSignal: "SIGKILL" });
    expect(r.signal, "createTaskDirs did not return").toBe(null);
    expect(JSON.parse(r.stdout)).toEqual({
      message: "allocation directory /proc/nonexistent-xyz/alloc: cannot create it: ENOENT: no such file or directory, mkdir '/proc/nonexistent-xyz'",
      code: "ENOENT",
    });
    // Below an allocation directory that is a file, the directory that could not be made is named.
    const file = join(root(), "a-file");
    writeFileSync(file, "");
    expect(() => createTaskDirs(file, "web")).toThrow(`allocation directory ${file}: cannot create it: EEXIST`);
    const alloc = root();
    writeFileSync(join(alloc, "web"), "");
    expect(() => createTaskDirs(alloc, "web")).toThrow(`allocation directory ${alloc}: cannot create web/local in it: ENOTDIR`);
  });

  it("refuses task names that are not one directory below the allocation", () => {
    const alloc = root();
    for (const name of ["", ".", "..", "a/b", "../x", "a\0b"]) {
      expect(() => createTaskDirs(alloc, name), JSON.stringify(name)).toThrow(/cannot name a directory below the allocation directory/);
    }
  });
});

describe("makeDirectory", () => {
  it("makes the missing parents as mkdir -p does; an existing directory is fine, a file is not", () => {
    const base = root();
    expect(makeDirectory(join(base, "a/b/c"))).toBe(join(base, "a"));
    expect(statSync(join(base, "a/b/c")).isDirectory()).toBe(true);
    expect(makeDirectory(join(base, "a/b"))).toBe(undefined);
    writeFileSync(join(base, "f"), "");
    expect(() => makeDirectory(join(base, "f"))).toThrow(expect.objectContaining({ code: "EEXIST" }));
    expect(() => makeDirectory(join(base, "f/g"))).toThrow(expect.objectContaining({ code: "ENOTDIR" }));
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
      NOMAD_SHORT_ALLOC_ID: "a1",
      NOMAD_ALLOC_NAME: "nomadkit.web[0]",
      NOMAD_ALLOC_INDEX: "0",
      NOMAD_REGION: "global",
      NOMAD_DC: "dc1",
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
    const t = nomadTaskConfig({ ...o, allocId: "0123456789abcdef", allocIndex: 3, region: "eu", datacenter: "fra1", jobName: "j", groupName: "g", namespace: "ns", user: "nobody", cpuMhz: 500, memoryMb: 64, env: { NOMAD_JOB_NAME: "override", X: "1" }, networkIsolation: { path: "/var/run/netns/x" } });
    expect(t).toMatchObject({ jobName: "j", taskGroupName: "g", namespace: "ns", user: "nobody", networkIsolationSpec: { path: "/var/run/netns/x" } });
    expect(t.resources?.linuxResources).toMatchObject({ cpuShares: 500n, memoryLimitBytes: 64n * 1024n * 1024n });
    expect(t.env).toMatchObject({ NOMAD_JOB_NAME: "override", X: "1", NOMAD_GROUP_NAME: "g", NOMAD_MEMORY_LIMIT: "64" });
    expect(t.env).toMatchObject({ NOMAD_SHORT_ALLOC_ID: "01234567", NOMAD_ALLOC_NAME: "j.g[3]", NOMAD_ALLOC_INDEX: "3", NOMAD_REGION: "eu", NOMAD_DC: "fra1" });
    expect(() => nomadTaskConfig({ ...o, allocIndex: -1 })).toThrow(/allocIndex -1: must be a non-negative integer/);
    expect(nomadTaskConfig(o).allocId).not.toBe(nomadTaskConfig(o).allocId);
    expect(nomadTaskConfig({ ...o, allocId: "same" }).id).not.toBe(nomadTaskConfig({ ...o, allocId: "same" }).id);
  });

  it("gives PercentTicks as the task's share of the node's compute, the compute SetConfig's topology describes", () => {
    const dirs = createTaskDirs(root(), "ticks");
    const o = { name: "ticks", dirs, msgpackDriverConfig: new Uint8Array(), stdoutPath: "/o", stderrPath: "/e", cpuMhz: 500 };
    expect(nomadTaskConfig({ ...o, totalComputeMhz: 4000 }).resources?.linuxResources?.PercentTicks).toBe(0.125);
    const cores = nomadAgentConfig().driver!.Topology!.cores!;
    expect(cores).toHaveLength(cpus().length);
    const total = cores.reduce((sum, c) => sum + Number(c.baseSpeed || c.maxSpeed || c.guessSpeed), 0);
    expect(total).toBe(nodeTotalComputeMhz());
    expect(nomadTaskConfig(o).resources?.linuxResources?.PercentTicks).toBe(500 / total);
    expect(nomadAgentConfig({ minPort: 1, maxPort: 2, overrideTotalComputeMhz: 9000 }).driver).toMatchObject({ ClientMinPort: 1, ClientMaxPort: 2, Topology: { overrideTotalCompute: 9000n } });
    expect(nodeTotalComputeMhz({ overrideTotalComputeMhz: 9000 })).toBe(9000);
  });

  it("reads the cores' speeds as Nomad's numalib does: cpufreq base and max, the /proc/cpuinfo average as the guess", () => {
    const dir = root();
    const cpuinfo = join(dir, "cpuinfo");
    writeFileSync(cpuinfo, cpus().map((_, i) => `processor\t: ${i}\ncpu MHz\t\t: ${i % 2 ? "2400.500" : "2599.500"}\n`).join("\n"));
    const sysfs = join(dir, "cpu");
    // Core 0 tells its base frequency, core 1 (if any) only its max: kHz, as sysfs has them.
    mkdirSync(join(sysfs, "cpu0/cpufreq"), { recursive: true });
    writeFileSync(join(sysfs, "cpu0/cpufreq/base_frequency"), "2000000\n");
    mkdirSync(join(sysfs, "cpu1/cpufreq"), { recursive: true });
    writeFileSync(join(sysfs, "cpu1/cpufreq/cpuinfo_max_freq"), "3700000\n");
    const o = { sysfsCpuRoot: sysfs, cpuinfoPath: cpuinfo };
    const mhz = cpus().map((_, i) => (i % 2 ? 2400.5 : 2599.5));
    const guess = BigInt(Math.round(mhz.reduce((a, b) => a + b, 0) / mhz.length));
    const cores = nomadAgentConfig(o).driver!.Topology!.cores!;
    expect(cores[0]).toMatchObject({ baseSpeed: 2000n, maxSpeed: 0n, guessSpeed: guess });
    const expected = cpus().map((_, i) => (i === 0 ? 2000 : i === 1 ? 3700 : Number(guess))).reduce((a, b) => a + b, 0);
    expect(nodeTotalComputeMhz(o)).toBe(expected);
    // Nothing readable at all: Nomad's fallback, 1000 MHz a core.
    expect(nodeTotalComputeMhz({ sysfsCpuRoot: join(dir, "none"), cpuinfoPath: join(dir, "none") })).toBe(1000 * cpus().length);
  });

  it("passes the host's environment minus Nomad's denylist, and shows isolated tasks their directories inside", () => {
    const dirs = createTaskDirs(root(), "iso");
    const hostEnv = { PATH: "/host/bin", HOME: "/root", VAULT_TOKEN: "s3cret", AWS_SECRET_ACCESS_KEY: "k", NOMAD_TASK_NAME: "host's" };
    const o = { name: "iso", dirs, msgpackDriverConfig: new Uint8Array(), stdoutPath: "/o", stderrPath: "/e", hostEnv };
    const none = nomadTaskConfig(o).env!;
    expect(none).toMatchObject({ PATH: "/host/bin", HOME: "/root", NOMAD_TASK_NAME: "iso", ...dirs.env });
    expect(none.VAULT_TOKEN).toBeUndefined();
    expect(none.AWS_SECRET_ACCESS_KEY).toBeUndefined();
    const inside = { NOMAD_ALLOC_DIR: "/alloc", NOMAD_TASK_DIR: "/local", NOMAD_SECRETS_DIR: "/secrets" };
    expect(nomadTaskConfig({ ...o, fsIsolation: "chroot" }).env).toMatchObject({ PATH: "/host/bin", HOME: "/root", ...inside });
    const image = nomadTaskConfig({ ...o, fsIsolation: "image" }).env!;
    expect(image).toMatchObject({ ...inside, NOMAD_TASK_NAME: "iso" });
    expect([image.PATH, image.HOME]).toEqual([undefined, undefined]);
  });
});
