// The executor's task cgroups, on this host's real cgroup v1 controllers and on a cgroup v2
// hierarchy mounted for the test: the task starts inside them, Shutdown kills what escaped its
// process group and tree, OOM kills are reported, and bad cgroups are refused by field.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { PassThrough, Writable } from "node:stream";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { RequestQueue } from "@nomadkit/client";
import { ExecTaskStreamingRequestSchema, MemoryUsage_Fields, type ExecTaskStreamingRequest, type TaskStats } from "@nomadkit/protocol/driver";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { runExecCommand } from "../src/exec/index.js";
import { executorBinPath, isProcessAlive, launchExecutor, TaskCgroups, type ExecutorHandle } from "../src/executor.js";
import { processTree } from "../src/stats.js";
import { mountCgroup2, removeCgroupTree } from "../../client/test/cgroup-fixtures.js";
import { collectExec, endExecutors } from "./executor-helpers.js";
import { createTestUser, parseGroups } from "./test-user.js";

const isRoot = process.getuid?.() === 0;
const V1 = "/sys/fs/cgroup";
const hasV1 =
  isRoot && ["freezer", "memory", "cpuset"].every((c) => existsSync(`${V1}/${c}/cgroup.procs`)) && !existsSync(`${V1}/cgroup.controllers`);
const PATH = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
const tag = `nomadkit-test-${process.pid}`;

let dir: string;
const handles: ExecutorHandle[] = [];
const cleanups: (() => void)[] = [];

beforeAll(() => {
  if (!existsSync(executorBinPath())) throw new Error(`build first: ${executorBinPath()} is missing (npx turbo run build)`);
  dir = mkdtempSync(join(tmpdir(), "nk-cgroups-"));
});
afterEach(async () => {
  await endExecutors(handles, []);
  for (const c of cleanups.splice(0).reverse()) c();
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function executor(env?: NodeJS.ProcessEnv): Promise<ExecutorHandle> {
  const h = await launchExecutor({ config: { exitAfterShutdown: false }, ...(env && { env }) });
  handles.push(h);
  return h;
}

function procs(cg: string): number[] {
  return readFileSync(join(cg, "cgroup.procs"), "utf8").split("\n").filter(Boolean).map(Number);
}

/** Makes a cgroup and removes it after the test (killing what is left in it). */
function cgroup(path: string): string {
  // The directories this creates (the leaf and any missing parents), removed deepest first.
  const made: string[] = [];
  for (let d = path; !existsSync(d); d = dirname(d)) made.push(d);
  mkdirSync(path, { recursive: true });
  for (const d of made.reverse()) cleanups.push(() => removeCgroupTree(d));
  return path;
}

/** A stream that keeps what is written to it (`text`). */
function collector(): Writable & { text: string } {
  const w = new Writable({
    write(c: Buffer, _e, cb) {
      w.text += c.toString();
      cb();
    },
  }) as Writable & { text: string };
  w.text = "";
  return w;
}

async function until(what: string, cond: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Starts a task that leaves a daemon outside its process group and tree; returns both pids. */
async function launchEscaper(
  exe: ExecutorHandle,
  cgroups: {
    cgroupV1Override?: Record<string, string>;
    cgroupV2Override?: string;
  },
) {
  const out = join(dir, `escaper-${Math.random()}`);
  const { process: p } = await exe.client.launch({
    cmd: "sh",
    // The subshell exits at once, so the setsid'd sleep is nobody's child of the task's.
    args: ["-c", "(setsid sleep 1000 & echo $!) ; exec sleep 1000"],
    env: [PATH],
    stdoutPath: out,
    ...cgroups,
  });
  let escaped = 0;
  await until("the daemon's pid", () => {
    escaped = Number(existsSync(out) ? readFileSync(out, "utf8").trim() : "");
    return escaped > 0;
  });
  await until("the subshell to exit", async () => !(await processTree(p!.pid)).some((x) => x.pid === escaped));
  return { task: p!.pid, escaped };
}

function cgroupLines(pid: number): string {
  return readFileSync(`/proc/${pid}/cgroup`, "utf8");
}

async function expectRefused(p: Promise<unknown>, code: Code, ...parts: string[]) {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  expect((err as ConnectError).code).toBe(code);
  for (const part of parts) expect((err as ConnectError).rawMessage).toContain(part);
}

describe("checkInterpreter", () => {
  it("does not block on a FIFO in place of the command (a task may swap it after the lookup)", () => {
    const built = join(dirname(fileURLToPath(import.meta.url)), "../dist/esm/exec/find-executable.js");
    if (!existsSync(built)) throw new Error(`build first: ${built} is missing (npx turbo run build)`);
    const dir = mkdtempSync(join(tmpdir(), "nk-interp-"));
    try {
      const fifo = join(dir, "cmd");
      expect(spawnSync("mkfifo", [fifo]).status).toBe(0);
      const script = `const { checkInterpreter } = await import(${JSON.stringify(pathToFileURL(built).href)}); checkInterpreter(${JSON.stringify(fifo)}); process.stdout.write("returned");`;
      const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 10_000 });
      expect(r.signal).toBe(null); // not killed by the timeout
      expect(r.stdout).toBe("returned");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!hasV1)("executor cgroups: v1", () => {
  it("starts the task in its cgroups and Shutdown kills a daemon that left its group and tree", async () => {
    const freezer = cgroup(`${V1}/freezer/${tag}/a`);
    const memory = cgroup(`${V1}/memory/${tag}/a`);
    const exe = await executor();
    const { task, escaped } = await launchEscaper(exe, {
      cgroupV1Override: { freezer: `${tag}/a`, memory },
    });
    expect(cgroupLines(task)).toContain(`:freezer:/${tag}/a\n`);
    expect(cgroupLines(task)).toContain(`:memory:/${tag}/a\n`);
    expect(procs(freezer).sort()).toEqual([task, escaped].sort());
    expect(isProcessAlive(escaped)).toBe(true);

    await exe.shutdownTask("SIGTERM", 5_000);
    expect(procs(freezer)).toEqual([]);
    await until("the daemon's death", () => !isProcessAlive(escaped));
    expect((await exe.client.wait({})).process).toMatchObject({
      signal: 15,
      oomKilled: false,
    });
    expect(readFileSync(`${freezer}/freezer.state`, "utf8").trim()).toBe("THAWED");
  });

  it("runs the task's first instruction, Exec and ExecStreaming (with and without a terminal) in the task's cgroups", async () => {
    const freezer = cgroup(`${V1}/freezer/${tag}/b`);
    const exe = await executor();
    const out = join(dir, "first");
    await exe.client.launch({
      cmd: "cat",
      args: ["/proc/self/cgroup"],
      env: [PATH],
      stdoutPath: out,
      cgroupV1Override: { freezer },
    });
    expect((await exe.client.wait({})).process!.exitCode).toBe(0);
    expect(readFileSync(out, "utf8")).toContain(`:freezer:/${tag}/b\n`);

    const exe2 = await executor();
    await exe2.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH], cgroupV1Override: { freezer } });
    const r = await exe2.client.exec({ cmd: "cat", args: ["/proc/self/cgroup"] });
    expect(r.exitCode).toBe(0);
    expect(Buffer.from(r.output).toString()).toContain(`:freezer:/${tag}/b\n`);

    // ExecStreaming without a terminal.
    const q = new RequestQueue<ExecTaskStreamingRequest>();
    q.push(create(ExecTaskStreamingRequestSchema, { setup: { taskId: "t", command: ["cat", "/proc/self/cgroup"], tty: false } }));
    const { stdout, exitCode } = await collectExec(exe2.client.execStreaming(q));
    q.end();
    expect(exitCode).toBe(0);
    expect(stdout).toContain(`:freezer:/${tag}/b\n`);

    // ExecStreaming with a terminal: node-pty starts the process, which is moved in at once.
    const t = new RequestQueue<ExecTaskStreamingRequest>();
    t.push(create(ExecTaskStreamingRequestSchema, { setup: { taskId: "t", command: ["sh", "-c", "echo $$; exec sleep 1000"], tty: true } }));
    let terminal = "";
    for await (const m of exe2.client.execStreaming(t)) {
      if (m.stdout?.data.length) terminal += Buffer.from(m.stdout.data).toString();
      if (/^\d+\r?\n/.test(terminal)) break; // leaving the loop ends the session
    }
    t.end();
    expect(cgroupLines(Number(terminal.trim().split(/\s+/)[0]))).toContain(`:freezer:/${tag}/b\n`);
  });

  it("Stats reads the task's memory and cpuacct cgroups", async () => {
    const memory = cgroup(`${V1}/memory/${tag}/stats`);
    const cpuacct = cgroup(`${V1}/cpuacct/${tag}/stats`);
    const exe = await executor();
    const out = join(dir, "stats-ready");
    await exe.client.launch({
      cmd: process.execPath,
      // 64 MiB touched, then busy: the cgroup's usage covers it, and its CPU time grows.
      args: ["-e", "globalThis.b = Buffer.alloc(64 << 20, 1); console.log('ready'); for (;;);"],
      env: [PATH],
      stdoutPath: out,
      cgroupV1Override: { memory, cpuacct },
    });
    await until("the task's allocation", () => existsSync(out) && readFileSync(out, "utf8").includes("ready"));
    let sample: TaskStats | undefined;
    for await (const m of exe.client.stats({ interval: 100_000_000n })) {
      sample = m.stats;
      if ((sample?.aggResourceUsage?.cpu?.percent ?? 0) > 0) break;
    }
    const agg = sample!.aggResourceUsage!;
    const usage = Number(readFileSync(`${memory}/memory.usage_in_bytes`, "utf8"));
    expect(agg.memory!.usage).toBeGreaterThanOrEqual(64n << 20n);
    expect(Number(agg.memory!.usage)).toBeLessThanOrEqual(usage * 2);
    expect(agg.memory!.measuredFields).toEqual(expect.arrayContaining([MemoryUsage_Fields.USAGE, MemoryUsage_Fields.MAX_USAGE, MemoryUsage_Fields.RSS, MemoryUsage_Fields.CACHE]));
    expect(agg.cpu!.percent).toBeGreaterThan(0);
  });

  it("Stats lists the processes of the task's own cgroup, a daemon that left the tree included (Nomad: procstats.List)", async () => {
    const freezer = cgroup(`${V1}/freezer/${tag}/ps`);
    // A memory cgroup shared with a process that is not the task's: not where the pids come from.
    const memory = cgroup(`${V1}/memory/${tag}/ps`);
    const other = spawn("sleep", ["1000"], { stdio: "ignore" });
    cleanups.push(() => other.kill("SIGKILL"));
    writeFileSync(join(memory, "cgroup.procs"), String(other.pid));
    const exe = await executor();
    const { task, escaped } = await launchEscaper(exe, { cgroupV1Override: { freezer: `${tag}/ps`, memory } });
    const ac = new AbortController();
    let pids: number[] = [];
    for await (const m of exe.client.stats({ interval: 50_000_000n }, { signal: ac.signal })) {
      pids = Object.keys(m.stats!.resourceUsageByPid).map(Number);
      break;
    }
    ac.abort();
    expect(pids.sort()).toEqual([task, escaped].sort());
    expect(procs(freezer).sort()).toEqual([task, escaped].sort());
  });

  it("Shutdown kills through the task's freezer only: a memory cgroup shared with another task is left alone", async () => {
    const shared = cgroup(`${V1}/memory/${tag}/shared`);
    const exeA = await executor();
    const exeB = await executor();
    const a = await exeA.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH], cgroupV1Override: { freezer: cgroup(`${V1}/freezer/${tag}/A`), memory: shared } });
    const b = await exeB.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH], cgroupV1Override: { freezer: cgroup(`${V1}/freezer/${tag}/B`), memory: shared } });
    expect(procs(shared).sort()).toEqual([a.process!.pid, b.process!.pid].sort());
    await exeA.shutdownTask("SIGTERM", 5_000);
    expect(isProcessAlive(a.process!.pid)).toBe(false);
    expect(isProcessAlive(b.process!.pid)).toBe(true);
  });

  it("reports an OOM kill, and not a plain SIGKILL as one", async () => {
    const memory = cgroup(`${V1}/memory/${tag}/oom`);
    writeFileSync(`${memory}/memory.limit_in_bytes`, String(64 * 1024 * 1024));
    // With swap, the limit must cover it too, or the task swaps instead of being killed.
    if (existsSync(`${memory}/memory.memsw.limit_in_bytes`)) writeFileSync(`${memory}/memory.memsw.limit_in_bytes`, String(64 * 1024 * 1024));
    const exe = await executor();
    await exe.client.launch({
      cmd: process.execPath,
      args: ["-e", "const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1));"],
      env: [PATH],
      cgroupV1Override: { memory },
    });
    expect((await exe.client.wait({})).process).toMatchObject({
      signal: 9,
      exitCode: 137,
      oomKilled: true,
    });

    const exe2 = await executor();
    await exe2.client.launch({
      cmd: "sleep",
      args: ["1000"],
      env: [PATH],
      cgroupV1Override: { memory },
    });
    await exe2.client.signal({ signal: 9 });
    expect((await exe2.client.wait({})).process).toMatchObject({
      signal: 9,
      oomKilled: false,
    });
  });

  it("joins the cgroups of Nomad's v1 layout from the cpuset cgroup the client made", async () => {
    const base = cgroup(`${V1}/cpuset/${tag}`);
    const cpus = readFileSync(`${V1}/cpuset/cpuset.cpus`, "utf8").trim();
    const mems = readFileSync(`${V1}/cpuset/cpuset.mems`, "utf8").trim();
    for (const d of [base, cgroup(`${base}/share`), cgroup(`${base}/share/alloc1.web`)]) {
      writeFileSync(`${d}/cpuset.cpus`, cpus);
      writeFileSync(`${d}/cpuset.mems`, mems);
    }
    const freezer = cgroup(`${V1}/freezer/${tag}/alloc1.web`);
    const exe = await executor();
    const { process: p } = await exe.client.launch({
      cmd: "sleep",
      args: ["1000"],
      env: [PATH],
      resources: {
        linuxResources: { cpusetCgroup: `${base}/share/alloc1.web` },
      },
    });
    expect(cgroupLines(p!.pid)).toContain(`:cpuset:/${tag}/share/alloc1.web\n`);
    expect(procs(freezer)).toEqual([p!.pid]);
  });

  /** Nomad's v1 layout for `alloc.task`, as its client makes it: the cpuset cgroup, and freezer, cpu and memory beside it. */
  function nomadV1Layout(leaf: string): { cpuset: string; memory: string; cpu: string } {
    const base = cgroup(`${V1}/cpuset/${tag}`);
    const cpus = readFileSync(`${V1}/cpuset/cpuset.cpus`, "utf8").trim();
    const mems = readFileSync(`${V1}/cpuset/cpuset.mems`, "utf8").trim();
    for (const d of [base, cgroup(`${base}/share`), cgroup(`${base}/share/${leaf}`)]) {
      writeFileSync(`${d}/cpuset.cpus`, cpus);
      writeFileSync(`${d}/cpuset.mems`, mems);
    }
    cgroup(`${V1}/freezer/${tag}/${leaf}`);
    return { cpuset: `${base}/share/${leaf}`, memory: cgroup(`${V1}/memory/${tag}/${leaf}`), cpu: cgroup(`${V1}/cpu/${tag}/${leaf}`) };
  }

  it("writes the task's limits into its cgroups as Nomad's executor does: a task over its memory is OOM-killed", async () => {
    const cg = nomadV1Layout("alloc1.limits");
    const exe = await executor();
    await exe.client.launch({
      cmd: process.execPath,
      args: ["-e", "const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1));"],
      env: [PATH],
      resources: {
        allocatedResources: { memory: { memoryMb: 64n } },
        linuxResources: { cpusetCgroup: cg.cpuset, cpuShares: 500n, cpusetCpus: "0" },
      },
    });
    // Before: the kernel's defaults (no memory limit, 1024 shares, every cpu), and the task ran on.
    expect(readFileSync(`${cg.memory}/memory.limit_in_bytes`, "utf8").trim()).toBe(String(64 * 1024 * 1024));
    expect(readFileSync(`${cg.cpu}/cpu.shares`, "utf8").trim()).toBe("500");
    expect(readFileSync(`${cg.cpuset}/cpuset.cpus`, "utf8").trim()).toBe("0");
    // Swap off for the task, as Nomad sets it on cgroup v1: on a host with swap, a task at its limit
    // is OOM-killed instead of being swapped out (the kernel's default, inherited, is 60).
    expect(readFileSync(`${cg.memory}/memory.swappiness`, "utf8").trim()).toBe("0");
    expect((await exe.client.wait({})).process).toMatchObject({ exitCode: 137, signal: 9, oomKilled: true });
  });

  it("a task without reserved cores: the shared cpuset (<parent>/share) is joined, never killed through; its own cgroups come from its env", async () => {
    // Nomad's client sends <root>/cpuset/<parent>/share for every task without reserved cores; the
    // task's freezer, cpu and memory cgroups are <root>/<controller>/<parent>/<alloc>.<task>.
    const cpus = readFileSync(`${V1}/cpuset/cpuset.cpus`, "utf8").trim();
    const mems = readFileSync(`${V1}/cpuset/cpuset.mems`, "utf8").trim();
    const share = cgroup(`${V1}/cpuset/${tag}/share`);
    for (const d of [`${V1}/cpuset/${tag}`, share]) {
      writeFileSync(`${d}/cpuset.cpus`, cpus);
      writeFileSync(`${d}/cpuset.mems`, mems);
    }
    const memory = cgroup(`${V1}/memory/${tag}/alloc9.web`);
    const freezer = cgroup(`${V1}/freezer/${tag}/alloc9.web`);
    // Another task of the node, in the same shared cpuset cgroup.
    const other = spawn("sleep", ["1000"], { stdio: "ignore", detached: true });
    cleanups.push(() => other.kill("SIGKILL"));
    writeFileSync(`${share}/cgroup.procs`, String(other.pid));
    const exe = await executor();
    const { process: p } = await exe.client.launch({
      cmd: "sleep",
      args: ["1000"],
      env: [PATH, "NOMAD_ALLOC_ID=alloc9", "NOMAD_TASK_NAME=web"],
      resources: { allocatedResources: { memory: { memoryMb: 64n } }, linuxResources: { cpusetCgroup: share, cpuShares: 500n } },
    });
    expect(procs(share)).toContain(p!.pid);
    expect(procs(freezer)).toEqual([p!.pid]);
    expect(readFileSync(`${memory}/memory.limit_in_bytes`, "utf8").trim()).toBe(String(64 * 1024 * 1024));
    await exe.client.shutdown({ signal: "SIGKILL", gracePeriod: 0n });
    expect((await exe.client.wait({})).process).toMatchObject({ signal: 9 });
    // Before: the shared cpuset was the task's own cgroup, and Shutdown killed every task in it.
    expect(isProcessAlive(other.pid!)).toBe(true);
  });

  it("with memory_max_mb, memory_mb is the soft limit; memory_max_mb -1 is none (Nomad's computeMemory)", async () => {
    for (const [leaf, memoryMaxMb, hard, soft] of [
      ["alloc1.max", 96n, String(96 * 1024 * 1024), String(32 * 1024 * 1024)],
      ["alloc1.nolimit", -1n, "9223372036854771712", String(32 * 1024 * 1024)],
    ] as const) {
      const cg = nomadV1Layout(leaf);
      const exe = await executor();
      await exe.client.launch({
        cmd: "sleep",
        args: ["1000"],
        env: [PATH],
        resources: { allocatedResources: { memory: { memoryMb: 32n, memoryMaxMb } }, linuxResources: { cpusetCgroup: cg.cpuset, cpuShares: 100n } },
      });
      expect(readFileSync(`${cg.memory}/memory.limit_in_bytes`, "utf8").trim(), leaf).toBe(hard);
      expect(readFileSync(`${cg.memory}/memory.soft_limit_in_bytes`, "utf8").trim(), leaf).toBe(soft);
      await exe.shutdownTask("SIGKILL", 0);
    }
  });

  it("refuses cgroups that are missing, refuse the task, or hold the executor, naming the field", async () => {
    const exe = await executor();
    await expectRefused(
      exe.client.launch({
        cmd: "sleep",
        args: ["1000"],
        env: [PATH],
        cgroupV1Override: { freezer: `${tag}/missing` },
      }),
      Code.FailedPrecondition,
      'cgroup_v1_override["freezer"]',
      "not a cgroup directory",
    );
    await expectRefused(
      exe.client.launch({
        cmd: "sleep",
        args: ["1000"],
        env: [PATH],
        cgroupV1Override: { "../x": "y" },
      }),
      Code.InvalidArgument,
      'cgroup_v1_override["../x"]',
    );
    await expectRefused(
      exe.client.launch({
        cmd: "sleep",
        args: ["1000"],
        env: [PATH],
        cgroupV1Override: { freezer: "/sys/fs/cgroup/freezer" },
      }),
      Code.FailedPrecondition,
      "root of its cgroup hierarchy",
    );
    // A cpuset cgroup without CPUs refuses every process: the held task must not run on.
    const empty = cgroup(`${V1}/cpuset/${tag}-empty`);
    const marker = `NOMADKIT_CGROUP_TEST=${Math.random()}`;
    await expectRefused(
      exe.client.launch({
        cmd: "sleep",
        args: ["1000"],
        env: [PATH, marker],
        cgroupV1Override: { cpuset: empty },
      }),
      Code.FailedPrecondition,
      'cgroup_v1_override["cpuset"]',
      "cannot move the task",
    );
    await until("the refused task's death", () => !withEnv(marker).some(isProcessAlive));
    // The executor's own cgroup (its parent's too, here) is refused.
    const own = /:freezer:(.*)\n/.exec(cgroupLines(exe.pid))![1]!;
    await expectRefused(
      exe.client.launch({
        cmd: "sleep",
        args: ["1000"],
        env: [PATH],
        cgroupV1Override: { freezer: `${V1}/freezer${own}` },
      }),
      Code.FailedPrecondition,
      own === "/" ? "root" : "holds the executor",
    );
    // After the refusals the executor still launches a task.
    await exe.client.launch({ cmd: "true", env: [PATH] });
    expect((await exe.client.wait({})).process!.exitCode).toBe(0);
  });
});

describe("executor cgroups: the limits written on cgroup v2", () => {
  it("memory.max (max for memory_max_mb -1), memory.low, cpu.weight from the shares as runc converts them, cpuset.cpus", () => {
    // The files of a v2 cgroup, as regular files: this host's cgroup2 mount may lack the controllers.
    const root = mkdtempSync(join(tmpdir(), "nk-v2limits-"));
    cleanups.push(() => rmSync(root, { recursive: true, force: true }));
    writeFileSync(join(root, "cgroup.controllers"), "cpuset cpu memory\n");
    const task = join(root, "nomad.slice", "share.slice", "a.web.scope");
    mkdirSync(task, { recursive: true });
    for (const f of ["cgroup.procs", "cgroup.events"]) writeFileSync(join(task, f), "");
    const cgroups = TaskCgroups.resolve({ cpusetCgroup: "nomad.slice/share.slice/a.web.scope" }, { v2: root })!;
    const read = (f: string) => readFileSync(join(task, f), "utf8");
    expect(cgroups.applyLimits({ memoryMb: 300n, memoryMaxMb: 0n, cpuShares: 1024n, cpusetCpus: "0-1" })).toEqual([]);
    expect([read("memory.max"), existsSync(join(task, "memory.low")), read("cpu.weight"), read("cpuset.cpus")]).toEqual([
      String(300 * 1024 * 1024),
      false,
      "39", // 1 + (1024 - 2) * 9999 / 262142
      "0-1",
    ]);
    cgroups.applyLimits({ memoryMb: 100n, memoryMaxMb: -1n, cpuShares: 2n, cpusetCpus: "" });
    expect([read("memory.max"), read("memory.low"), read("cpu.weight")]).toEqual(["max", String(100 * 1024 * 1024), "1"]);
  });
});

describe.skipIf(!isRoot)("executor cgroups: v2", () => {
  it("starts the task in its cgroup and Shutdown kills everything in it with cgroup.kill", async (t) => {
    const mnt = mountCgroup2(cleanups);
    if (!mnt) return t.skip();
    const cg = cgroup(join(mnt, tag));
    const exe = await executor();
    const { task, escaped } = await launchEscaper(exe, {
      cgroupV2Override: cg,
    });
    expect(cgroupLines(task)).toContain(`0::/${tag}\n`);
    expect(procs(cg).sort()).toEqual([task, escaped].sort());

    await exe.shutdownTask("SIGINT", 0);
    expect(procs(cg)).toEqual([]);
    await until("the daemon's death", () => !isProcessAlive(escaped));
    expect((await exe.client.wait({})).process).toMatchObject({
      signal: 9,
      oomKilled: false,
    });
  });

  it("refuses the hierarchy's root, and a cgroup with the executor anywhere below it", async (t) => {
    const mnt = mountCgroup2(cleanups);
    if (!mnt) return t.skip();
    const exe = await executor();
    await expectRefused(exe.client.launch({ cmd: "true", env: [PATH], cgroupV2Override: mnt }), Code.FailedPrecondition, "cgroup_v2_override", "root");
    // Shutdown would kill (cgroup.kill) the executor and its neighbours with the task.
    const parent = cgroup(join(mnt, `${tag}-parent`));
    writeFileSync(join(cgroup(join(parent, "executor")), "cgroup.procs"), String(exe.pid));
    await expectRefused(
      exe.client.launch({ cmd: "true", env: [PATH], cgroupV2Override: parent }),
      Code.FailedPrecondition,
      "cgroup_v2_override",
      "holds the executor",
    );
    writeFileSync(join(mnt, "cgroup.procs"), String(exe.pid));
  });

  it("Shutdown also kills what the task moved into a sub-cgroup of its own", async (t) => {
    const mnt = mountCgroup2(cleanups);
    if (!mnt) return t.skip();
    const cg = cgroup(join(mnt, `${tag}-nested`));
    cleanups.push(() => removeCgroupTree(join(cg, "sub")));
    const exe = await executor();
    const out = join(dir, "nested");
    await exe.client.launch({
      cmd: "sh",
      args: ["-c", `mkdir "$CG/sub"; (setsid sleep 1000 & echo $! > "$CG/sub/cgroup.procs"; echo $!); exec sleep 1000`],
      env: [PATH, `CG=${cg}`],
      stdoutPath: out,
      cgroupV2Override: cg,
    });
    let daemon = 0;
    await until("the daemon in the sub-cgroup", () => {
      daemon = Number(existsSync(out) ? readFileSync(out, "utf8").trim() : "");
      return daemon > 0 && procs(join(cg, "sub")).includes(daemon);
    });
    await exe.shutdownTask("SIGTERM", 5_000);
    await until("the daemon's death", () => !isProcessAlive(daemon));
    expect(procs(join(cg, "sub"))).toEqual([]);
  });
});

describe.skipIf(!isRoot)("executor cgroups: what the task gets", () => {
  it("gets the oom_score_adj asked for, as Nomad's executor sets it; one out of range is refused naming it", async () => {
    const exe = await executor();
    const { process: p } = await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH], oomScoreAdj: 500 });
    expect(readFileSync(`/proc/${p!.pid}/oom_score_adj`, "utf8").trim()).toBe("500");
    expect(p!.exitCode).toBe(-1); // running, as Nomad's Launch answers
    const other = await executor();
    await expectRefused(other.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH], oomScoreAdj: 2000 }), Code.InvalidArgument, "oom_score_adj", "2000");
  });

  it("gets oom_score_adj 0 when it asks for none, not what the plugin and executor inherited (Nomad's agent runs at -1000)", async () => {
    // Raised for this test process, so the executor inherits it (lowering it back would take CAP_SYS_RESOURCE).
    writeFileSync("/proc/self/oom_score_adj", "300");
    const exe = await executor();
    const { process: p } = await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    expect(readFileSync(`/proc/${exe.pid}/oom_score_adj`, "utf8").trim()).toBe("0");
    expect(readFileSync(`/proc/${p!.pid}/oom_score_adj`, "utf8").trim()).toBe("0");
  });

  // Both gates: perl (found on this host) and the /bin/sh fallback (NOMADKIT_GATE=sh in the executor's environment).
  it.each([
    ["perl", {}],
    ["sh", { NOMADKIT_GATE: "sh" }],
  ] as const)("keeps environment names a shell would drop, adds none, and reports a missing interpreter at launch (%s gate)", async (gateName, gateEnv, t) => {
    const mnt = mountCgroup2(cleanups);
    if (!mnt) return t.skip();
    const cg = cgroup(join(mnt, `${tag}-env-${gateName}`));
    const exe = await executor(gateEnv);
    const out = join(dir, `env-${gateName}`);
    // What would act on a perl gate (PERL5OPT: no such module; LD_LIBRARY_PATH: a libcrypt that is
    // not one; LANG: a locale this host lacks) is the command's business only.
    const badlib = join(dir, `badlib-${gateName}`);
    mkdirSync(badlib);
    writeFileSync(join(badlib, "libcrypt.so.1"), "not a shared object");
    await exe.client.launch({
      cmd: "env",
      env: [PATH, "NOMAD_META_release.channel=beta", "java-opts=-Xmx1g", "EMPTY=", "IFS=x", "PERL5OPT=-Mno_such_module_nk", "LANG=xx_YY.UTF-8", "LC_ALL=zz_ZZ", `LD_LIBRARY_PATH=${badlib}`],
      stdoutPath: out,
      stderrPath: `${out}.err`,
      cgroupV2Override: cg,
    });
    expect((await exe.client.wait({})).process!.exitCode).toBe(0);
    expect(readFileSync(out, "utf8").split("\n").filter(Boolean).sort()).toEqual(
      ["EMPTY=", "IFS=x", "LANG=xx_YY.UTF-8", "LC_ALL=zz_ZZ", `LD_LIBRARY_PATH=${badlib}`, "NOMAD_META_release.channel=beta", "PERL5OPT=-Mno_such_module_nk", PATH, "java-opts=-Xmx1g"].sort(),
    );
    expect(readFileSync(`${out}.err`, "utf8")).toBe("");

    const script = join(dir, "script");
    writeFileSync(script, "#!/nonexistent/python9\nprint(1)\n", { mode: 0o755 });
    const exe2 = await executor(gateEnv);
    await expectRefused(exe2.client.launch({ cmd: script, env: [PATH], cgroupV2Override: cg }), Code.InvalidArgument, "/nonexistent/python9", "ENOENT");
    mkdirSync(join(dir, `with=sign-${gateName}`));
    const tool = join(dir, `with=sign-${gateName}`, "tool");
    writeFileSync(tool, "#!/bin/sh\nexit 0\n", { mode: 0o755 });
    if (gateName === "sh") {
      // env(1) would read a path with "=" as one more variable.
      await expectRefused(exe2.client.launch({ cmd: tool, env: [PATH], cgroupV2Override: cg }), Code.InvalidArgument, 'its path contains "="');
    } else {
      await exe2.client.launch({ cmd: tool, env: [PATH], cgroupV2Override: cg });
      expect((await exe2.client.wait({})).process!.exitCode).toBe(0);
    }
  });

  it.each(["perl", "sh"] as const)("holds a terminal's process at its gate until it is in the cgroups: nothing of the command runs outside (ptyGate, %s gate)", async (gateName, t) => {
    const mnt = mountCgroup2(cleanups);
    if (!mnt) return t.skip();
    const cg = cgroup(join(mnt, `${tag}-pty-${gateName}`));
    // The gate is chosen when wrap is called, from this (the executor's) environment.
    if (gateName === "sh") {
      process.env.NOMADKIT_GATE = "sh";
      cleanups.push(() => delete process.env.NOMADKIT_GATE);
    }
    const gate = TaskCgroups.resolve({ cgroupV2Override: cg })!.ptyGate();
    let atAdmission: { pid: number; cmdline: string; inCgroup: boolean } | undefined;
    const stdout = collector();
    const r = await runExecCommand(
      {
        // Not through a shell, which would drop the dotted name: cgroup, environment (NUL-separated), then "<pid> (cat) ...".
        command: ["/bin/cat", "/proc/self/cgroup", "/proc/self/environ", "/proc/self/stat"],
        tty: true,
        cwd: dir,
        env: { [PATH.split("=")[0]!]: PATH.slice(PATH.indexOf("=") + 1), "NOMAD_META_release.channel": "beta", VAULT_TOKEN: "s.secret" },
        ptyGate: {
          wrap: gate.wrap,
          async admit(pid) {
            // node-pty has started it: still the gate (the command not exec'd), outside the cgroup.
            await until("the gate to stop", () => readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.startsWith("T"));
            atAdmission = { pid, cmdline: readFileSync(`/proc/${pid}/cmdline`, "utf8"), inCgroup: procs(cg).includes(pid) };
            await gate.admit(pid);
          },
        },
      },
      { stdin: new PassThrough(), stdout, stderr: new PassThrough().resume() },
    );
    expect(r.exitCode).toBe(0);
    if (gateName === "perl") {
      expect(atAdmission?.cmdline.split("\0").slice(0, 2)).toEqual(["/usr/bin/perl", "-e"]);
      expect(atAdmission?.cmdline).toContain('kill "STOP"');
      // The environment is in the gate's own (private) environment, not in its argv, which every user can read.
      expect(atAdmission?.cmdline).not.toContain("s.secret");
    } else {
      expect(atAdmission?.cmdline.split("\0").slice(0, 2)).toEqual(["/bin/sh", "-c"]);
      expect(atAdmission?.cmdline).toContain("kill -STOP");
    }
    expect(atAdmission?.inCgroup).toBe(false);
    // The command ran in it, with the gate's pid, and exactly its environment plus what node-pty adds.
    const lines = stdout.text.split(/\r?\n|\0/).filter(Boolean);
    expect(lines).toContain(`0::/${tag}-pty-${gateName}`);
    expect(lines.filter((l) => /^[A-Za-z_][^=]*=/.test(l)).sort()).toEqual(["NOMAD_META_release.channel=beta", PATH, `PWD=${dir}`, "TERM=xterm", "VAULT_TOKEN=s.secret"].sort());
    expect(lines.find((l) => l.includes(" (cat) "))).toMatch(new RegExp(`^${atAdmission!.pid} \\(cat\\) `));
  });

  it("a terminal's process that dies before it is admitted (its gate cannot start) reports its exit, not a cgroup error", async (t) => {
    const mnt = mountCgroup2(cleanups);
    if (!mnt) return t.skip();
    const cg = cgroup(join(mnt, `${tag}-pty-gone`));
    const gate = TaskCgroups.resolve({ cgroupV2Override: cg })!.ptyGate();
    const stdout = collector();
    // node-pty's child fails its execvp and exits before the gate could stop it for admission.
    const r = await runExecCommand(
      { command: ["/bin/true"], tty: true, cwd: dir, ptyGate: { wrap: (f, a, e) => ({ ...gate.wrap(f, a, e), file: join(dir, "no-such-gate") }), admit: gate.admit } },
      { stdin: new PassThrough(), stdout, stderr: new PassThrough().resume() },
    );
    expect(r.exitCode).not.toBe(0);
    expect(stdout.text).toContain("execvp");
  });

  it.each(["perl", "sh"] as const)("a ^C typed while the terminal's process waits at its gate is dropped: the command runs, with SIGINT and SIGQUIT at default (%s gate)", async (gateName, t) => {
    const mnt = mountCgroup2(cleanups);
    if (!mnt) return t.skip();
    const cg = cgroup(join(mnt, `${tag}-pty-intr-${gateName}`));
    if (gateName === "sh") {
      process.env.NOMADKIT_GATE = "sh";
      cleanups.push(() => delete process.env.NOMADKIT_GATE);
    }
    const gate = TaskCgroups.resolve({ cgroupV2Override: cg })!.ptyGate();
    const stdin = new PassThrough();
    const stdout = collector();
    const r = await runExecCommand(
      {
        command: ["/bin/grep", "^Sig[IC]", "/proc/self/status"],
        tty: true,
        cwd: dir,
        env: { [PATH.split("=")[0]!]: PATH.slice(PATH.indexOf("=") + 1) },
        ptyGate: {
          wrap: gate.wrap,
          async admit(pid) {
            await until("the gate to stop", () => readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.startsWith("T"));
            stdin.write("\x03");
            // The terminal echoes ^C once it has signalled the foreground group: the gate.
            await until("the terminal to take the ^C", () => stdout.text.includes("^C"));
            await gate.admit(pid);
          },
        },
      },
      { stdin, stdout, stderr: new PassThrough().resume() },
    );
    expect({ exitCode: r.exitCode, signal: r.signal || undefined }).toEqual({ exitCode: 0, signal: undefined });
    const masks = Object.fromEntries([...stdout.text.matchAll(/(Sig[IC]\w+):\s*([0-9a-f]+)/g)].map((m) => [m[1], BigInt(`0x${m[2]}`)]));
    // SIGINT is 2 and SIGQUIT 3: bits 1 and 2 (the echoed ^C precedes the first line).
    expect(masks.SigIgn! & 0b110n).toBe(0n);
    expect(masks.SigCgt).toBeDefined();
  });
});

describe.skipIf(!isRoot)("executor cgroups: the task user's groups", () => {
  it("runs the task behind the cgroup gate as the user, with its supplementary groups, as the process the executor waits on", async (t) => {
    const mnt = mountCgroup2(cleanups);
    if (!mnt) return t.skip();
    const user = createTestUser("c");
    cleanups.push(() => user.remove());
    const cg = cgroup(join(mnt, `${tag}-user`));
    const exe = await executor();
    const out = join(dir, "user-groups");
    const { process: p } = await exe.client.launch({
      cmd: "sh",
      args: ["-c", 'echo $$; id -G; grep ^0:: /proc/self/cgroup; exec sleep 1000'],
      env: [PATH],
      user: user.name,
      stdoutPath: out,
      cgroupV2Override: cg,
    });
    await until("the task's output", () => existsSync(out) && readFileSync(out, "utf8").includes("0::"));
    const [pid, groups, cgroupLine] = readFileSync(out, "utf8").trim().split("\n");
    expect(Number(pid)).toBe(p!.pid);
    expect(parseGroups(groups!)).toEqual(user.groups);
    expect(cgroupLine).toBe(`0::/${tag}-user`);
    // grep has written its line but may not have exited: the shell has waited for it once it execs sleep.
    await until("the task's exec of sleep", () => readFileSync(`/proc/${p!.pid}/comm`, "utf8").trim() === "sleep");
    expect(procs(cg)).toEqual([p!.pid]);
    // Exec joins the cgroup as the user too.
    const r = await exe.client.exec({ cmd: "sh", args: ["-c", "id -G; grep ^0:: /proc/self/cgroup"] });
    const [execGroups, execCgroup] = Buffer.from(r.output).toString().trim().split("\n");
    expect(parseGroups(execGroups!)).toEqual(user.groups);
    expect(execCgroup).toBe(`0::/${tag}-user`);
    await exe.shutdownTask("SIGTERM", 5_000);
    expect((await exe.client.wait({})).process).toMatchObject({ pid: p!.pid, signal: 15 });
  });
});

describe("TaskCgroups.resolve", () => {
  it("names nothing without cgroups in the request", () => {
    expect(TaskCgroups.resolve({})).toBeUndefined();
    expect(TaskCgroups.resolve({ cgroupV1Override: {} })).toBeUndefined();
  });

  it("takes the override of the host's cgroup mode, then the cpuset cgroup (missing directories are refused by field)", () => {
    const v1Host = mkdtempSync(join(tmpdir(), "nk-v1host-"));
    const v2Host = mkdtempSync(join(tmpdir(), "nk-v2host-"));
    writeFileSync(join(v2Host, "cgroup.controllers"), "cpu memory\n");
    cleanups.push(() => rmSync(v1Host, { recursive: true }), () => rmSync(v2Host, { recursive: true }));
    const both = { cgroupV2Override: "a.scope", cgroupV1Override: { freezer: "b" }, cpusetCgroup: "c" };
    // v1 host: the v1 override (the v2 one names no cgroup2 directory).
    expect(() => TaskCgroups.resolve(both, { v1: v1Host, v2: v1Host })).toThrow(`cgroup_v1_override["freezer"]: "${v1Host}/freezer/b"`);
    // ... but the v2 one when there is no v1 override.
    expect(() => TaskCgroups.resolve({ cgroupV2Override: "a.scope" }, { v1: v1Host, v2: v1Host })).toThrow(`cgroup_v2_override: "${v1Host}/a.scope"`);
    // v2 host: the v2 override.
    expect(() => TaskCgroups.resolve(both, { v1: v2Host, v2: v2Host })).toThrow(`cgroup_v2_override: "${v2Host}/a.scope"`);
    // v2 host, only a v1 override: ignored, the cpuset cgroup counts.
    expect(() =>
      TaskCgroups.resolve({ cgroupV1Override: { freezer: "b" }, cpusetCgroup: "c", cpusetField: "resources.linux_resources.cpuset_cgroup" }, { v1: v2Host, v2: v2Host }),
    ).toThrow(`resources.linux_resources.cpuset_cgroup: "${v2Host}/c"`);
    expect(() => TaskCgroups.resolve({ cpusetCgroup: "c" }, { v1: v1Host, v2: v1Host })).toThrow(`cpuset_cgroup: "${v1Host}/cpuset/c"`);
  });
});

/** Pids whose environment holds `entry`. */
function withEnv(entry: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/environ`, "utf8").split("\0").includes(entry)) out.push(Number(name));
    } catch {
      // gone or not ours
    }
  }
  return out;
}
