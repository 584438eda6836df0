import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { CPUUsage_Fields, MemoryUsage_Fields, TaskStatsResponseSchema, TaskStatsSchema } from "@nomadkit/protocol/driver";
import fc from "fast-check";
import { normalizeTaskStats } from "../src/driver/stats.js";
import { encodeBinary } from "../src/runtime/binary-encoder.js";
import type { TaskStatsInput } from "../src/driver/types.js";
import {
  ProcessTreeSampler,
  cgroupProcs,
  hostCompute,
  parseProcStat,
  pollTaskStats,
  processTree,
  readProcMemory,
  readCgroupV1,
  readCgroupV2,
  totalTicks,
} from "../src/stats.js";

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) {
    try {
      process.kill(-c.pid!, "SIGKILL");
    } catch {
      /* gone */
    }
  }
});

/** A shell with two busy-looping children, in its own process group so cleanup kills all. */
function busyTree(): ChildProcess {
  const c = spawn("sh", ["-c", "sh -c 'while :; do :; done' & sh -c 'while :; do :; done' & wait"], {
    detached: true,
    stdio: "ignore",
  });
  children.push(c);
  return c;
}

async function until<T>(probe: () => Promise<T | undefined>): Promise<T> {
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    await new Promise((r) => setImmediate(r));
  }
}

describe("total_ticks and host compute", () => {
  it("is percent/100 * totalComputeMhz / numCores", () => {
    expect(totalTicks(150, { numCores: 4, totalComputeMhz: 10000 })).toBe(3750);
    expect(totalTicks(0, { numCores: 4, totalComputeMhz: 10000 })).toBe(0);
    expect(totalTicks(Number.NaN, { numCores: 4, totalComputeMhz: 10000 })).toBe(0);
  });

  it("sums cpu MHz from cpuinfo, falls back to 1000 per core, honours overrides", () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-cpuinfo-"));
    try {
      const withMhz = join(dir, "a");
      writeFileSync(withMhz, "processor\t: 0\ncpu MHz\t\t: 2000.5\n\nprocessor\t: 1\ncpu MHz\t\t: 1999.5\n");
      expect(hostCompute({ cpuinfoPath: withMhz })).toEqual({ numCores: 2, totalComputeMhz: 4000 });
      const noMhz = join(dir, "b");
      writeFileSync(noMhz, "processor\t: 0\n\nprocessor\t: 1\n\nprocessor\t: 2\n");
      expect(hostCompute({ cpuinfoPath: noMhz })).toEqual({ numCores: 3, totalComputeMhz: 3000 });
      expect(hostCompute({ cpuinfoPath: withMhz, totalComputeMhz: 9000 })).toEqual({ numCores: 2, totalComputeMhz: 9000 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const real = hostCompute();
    expect(real.numCores).toBeGreaterThan(0);
    expect(real.totalComputeMhz).toBeGreaterThan(0);
  });
});

describe("normalizing a TaskStats sample", () => {
  const host = hostCompute({ totalComputeMhz: 4000, numCores: 2 });
  const cpu = fc.record(
    {
      percent: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 400, noNaN: true })),
      totalTicks: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 1e6, noNaN: true })),
      userMode: fc.double({ min: 0, max: 1e6, noNaN: true }),
      measuredFields: fc.subarray([CPUUsage_Fields.PERCENT, CPUUsage_Fields.TOTAL_TICKS, CPUUsage_Fields.USER_MODE]),
    },
    { requiredKeys: [] },
  );
  const memory = fc.record(
    { rss: fc.bigInt({ min: 0n, max: 2n ** 40n }), measuredFields: fc.subarray([MemoryUsage_Fields.RSS, MemoryUsage_Fields.SWAP]) },
    { requiredKeys: [] },
  );
  const usage = fc.record({ cpu, memory }, { requiredKeys: [] });
  const byPid = fc.dictionary(fc.integer({ min: 1, max: 99999 }).map(String), usage, { maxKeys: 3 });
  const when = fc.date({ min: new Date(0), max: new Date(2 ** 40), noInvalidDate: true });
  // Every shape TaskStatsInput allows, the message form included.
  const input: fc.Arbitrary<TaskStatsInput> = fc.oneof(
    fc.record({ cpu, memory, byPid, timestamp: when }, { requiredKeys: ["timestamp"] }),
    fc.record({ agg: usage, byPid, timestamp: when }, { requiredKeys: ["agg", "timestamp"] }),
    fc
      .record({ aggResourceUsage: usage, resourceUsageByPid: byPid, timestamp: when }, { requiredKeys: ["timestamp"] })
      .map(({ timestamp, ...rest }) => ({ ...rest, timestamp: { seconds: BigInt(Math.floor(timestamp.getTime() / 1000)), nanos: 0 } })),
    fc
      .record({ aggResourceUsage: usage, resourceUsageByPid: byPid, timestamp: when }, { requiredKeys: ["timestamp"] })
      .map(({ timestamp, ...rest }) => create(TaskStatsSchema, { ...rest, timestamp: { seconds: BigInt(Math.floor(timestamp.getTime() / 1000)) } })),
  );

  it("lists in measured_fields what a sample gives when it lists nothing (Nomad shows and publishes only listed fields)", () => {
    const C = CPUUsage_Fields;
    const M = MemoryUsage_Fields;
    const fields = (t: ReturnType<typeof normalizeTaskStats>) => [t.aggResourceUsage!.cpu!.measuredFields, t.aggResourceUsage!.memory!.measuredFields];
    // Plain objects: what they set, 0 included (an idle task); total_ticks when derived.
    expect(fields(normalizeTaskStats("t", { cpu: { percent: 0, userMode: 1 }, memory: { rss: 5n, swap: 0n } }, host))).toEqual([
      [C.USER_MODE, C.PERCENT],
      [M.RSS, M.SWAP],
    ]);
    expect(fields(normalizeTaskStats("t", { cpu: { percent: 50 } }, host))).toEqual([[C.PERCENT, C.TOTAL_TICKS], []]);
    expect(fields(normalizeTaskStats("t", { agg: { memory: { usage: 7n, cache: 0n } } }, host))).toEqual([[], [M.CACHE, M.USAGE]]);
    // A list the driver gave is kept as it is.
    expect(fields(normalizeTaskStats("t", { cpu: { percent: 50, measuredFields: [C.PERCENT] }, memory: { rss: 1n, measuredFields: [M.SWAP] } }, host))).toEqual([
      [C.PERCENT],
      [M.SWAP],
    ]);
    // A TaskStats init shape counts as plain objects: its explicit 0 % is a measurement.
    expect(fields(normalizeTaskStats("t", { aggResourceUsage: { cpu: { percent: 0 } } }, host))).toEqual([[C.PERCENT], []]);
    // Messages (unset reads 0): the non-zero fields.
    const msg = create(TaskStatsSchema, { aggResourceUsage: { cpu: { systemMode: 2 }, memory: { rss: 9n } } });
    expect(fields(normalizeTaskStats("t", msg, host))).toEqual([[C.SYSTEM_MODE], [M.RSS]]);
    expect(msg.aggResourceUsage!.cpu!.measuredFields).toEqual([]); // the caller's message untouched
  });

  it("makes a complete TaskStats from every shape of sample, sent as protobuf-es would, without touching the sample", () => {
    fc.assert(
      fc.property(input, (sample) => {
        const before = structuredClone(sample);
        const message = normalizeTaskStats("t1", sample, host);
        const sent = encodeBinary(TaskStatsResponseSchema, { stats: message });
        expect(sent).toEqual(Buffer.from(toBinary(TaskStatsResponseSchema, create(TaskStatsResponseSchema, { stats: message }))));
        expect(sample).toEqual(before);
        expect(message.id).toBe("t1");
        expect(message.timestamp).toBeDefined();
        for (const u of [message.aggResourceUsage, ...Object.values(message.resourceUsageByPid)]) {
          expect(u?.cpu).toBeDefined();
          expect(u?.memory).toBeDefined();
          // Derived where missing (a percent too small for a tick still derives 0).
          if (u!.cpu!.totalTicks === 0) expect(totalTicks(u!.cpu!.percent, host)).toBe(0);
        }
      }),
      { numRuns: 300 },
    );
  });

  it("derives total_ticks from percent only where it is missing, and stamps a sample without a time", () => {
    const m = normalizeTaskStats("t1", { cpu: { percent: 50 }, memory: { rss: 1024n } }, host);
    expect(m.aggResourceUsage?.cpu?.totalTicks).toBe(totalTicks(50, host));
    expect(normalizeTaskStats("t1", { cpu: { percent: 50, totalTicks: 7 } }, host).aggResourceUsage?.cpu?.totalTicks).toBe(7);
    // No timestamp in the sample: now.
    const seconds = Number(normalizeTaskStats("t1", {}, host).timestamp?.seconds);
    expect(Math.abs(seconds - Date.now() / 1000)).toBeLessThan(60);
  });
});

describe("/proc readers", () => {
  it("parses a stat line whose comm holds spaces and parentheses", () => {
    const s = parseProcStat("4242 (my (odd) cmd) R 17 4242 4242 0 -1 4194560 1 0 0 0 70 30 0 0 20 0 1 0 1234 0 0")!;
    expect(s).toMatchObject({ pid: 4242, comm: "my (odd) cmd", state: "R", ppid: 17, utime: 70, stime: 30, starttime: 1234 });
  });

  it("finds the whole process tree", async () => {
    const root = busyTree();
    const tree = await until(async () => {
      const t = await processTree(root.pid!);
      return t.length >= 3 ? t : undefined;
    });
    expect(tree[0]!.pid).toBe(root.pid);
    expect(tree.slice(1).every((p) => p.ppid === root.pid)).toBe(true);
    expect(await processTree(2 ** 22 + 12345)).toEqual([]);
  });
});

describe("ProcessTreeSampler", () => {
  it("reports cpu, memory, timestamp and per-pid usage of a busy tree", async () => {
    const root = busyTree();
    // Wait until the tree exists and has burnt at least one tick (a condition, not a sleep).
    await until(async () => {
      const t = await processTree(root.pid!);
      return t.length >= 3 && t.some((p) => p.utime + p.stime > 0) ? t : undefined;
    });
    const host = { numCores: 2, totalComputeMhz: 4000 };
    const sampler = new ProcessTreeSampler(root.pid!, { host });
    // No previous reading: 0 %, as Nomad's cpustats.Tracker, not the processes' lifetime average.
    const first = await sampler.taskStats("t1");
    expect(first.aggResourceUsage!.cpu!.percent).toBe(0);
    expect(Object.values(first.resourceUsageByPid).map((u) => u.cpu!.percent)).toEqual(Object.keys(first.resourceUsageByPid).map(() => 0));
    // Later samples measure the interval since the one before; the loops burn CPU, so one shows it.
    const stats = await until(async () => {
      const s = await sampler.taskStats("t1");
      return s.aggResourceUsage!.cpu!.percent > 0 ? s : undefined;
    });
    expect(stats.id).toBe("t1");
    expect(stats.timestamp).toBeDefined();
    const cpu = stats.aggResourceUsage!.cpu!;
    const mem = stats.aggResourceUsage!.memory!;
    expect(cpu.percent).toBeGreaterThan(0);
    expect(cpu.userMode + cpu.systemMode).toBeCloseTo(cpu.percent, 6);
    expect(cpu.totalTicks).toBeCloseTo(totalTicks(cpu.percent, host), 6);
    expect(cpu.measuredFields).toEqual([CPUUsage_Fields.SYSTEM_MODE, CPUUsage_Fields.USER_MODE, CPUUsage_Fields.PERCENT]);
    expect(cpu.measuredFields).not.toContain(CPUUsage_Fields.TOTAL_TICKS);
    expect(mem.rss).toBeGreaterThan(0n);
    expect(mem.measuredFields).toContain(MemoryUsage_Fields.RSS);
    expect(mem.measuredFields).not.toContain(MemoryUsage_Fields.USAGE);
    expect(Object.keys(stats.resourceUsageByPid).length).toBeGreaterThanOrEqual(3);
    expect(stats.resourceUsageByPid[String(root.pid)]).toBeDefined();

    const again = await sampler.sample();
    expect(again.agg.cpu!.percent).toBeGreaterThanOrEqual(0);
    expect(again.agg.memory!.rss).toBeGreaterThan(0n);
  });

  it("counts a zombie's swap as 0, keeping Swap measured (Nomad's Aggregate always lists RSS and Swap)", async () => {
    // The child exits at once; its parent (now sleep, same pid) never reaps it.
    const c = spawn("sh", ["-c", "sh -c 'exit 0' & exec sleep 30"], { detached: true, stdio: "ignore" });
    children.push(c);
    const zombie = await until(async () => (await processTree(c.pid!)).find((p) => p.pid !== c.pid && p.state === "Z"));
    expect(await readProcMemory(zombie.pid)).toEqual({ rss: 0n, swap: 0n });
    const s = await new ProcessTreeSampler(c.pid!).sample();
    expect(s.byPid[String(zombie.pid)]!.memory!.measuredFields).toEqual([MemoryUsage_Fields.RSS, MemoryUsage_Fields.SWAP]);
    expect(s.agg.memory!.measuredFields).toEqual([MemoryUsage_Fields.RSS, MemoryUsage_Fields.SWAP]);
    expect(s.agg.memory!.rss).toBeGreaterThan(0n);
  });

  it("times each CPU counter when it is read, not before the scan (Nomad's Tracker takes Now() at each read)", async () => {
    // A fake procfs and cpuacct cgroup whose counters are FIFOs: a read ends only when the test
    // writes, so the second readings are known to be at least 500 ms after the first sample ended.
    const root = mkdtempSync(join(tmpdir(), "nk-timed-"));
    try {
      const proc = join(root, "proc");
      const cpuacct = join(root, "cpuacct");
      mkdirSync(join(proc, "4242"), { recursive: true });
      mkdirSync(cpuacct);
      writeFileSync(join(proc, "uptime"), "1000.00 1000.00\n");
      writeFileSync(join(proc, "4242", "status"), "Name:\tbusy\nVmRSS:\t1024 kB\nVmSwap:\t0 kB\n");
      const stat = join(proc, "4242", "stat");
      const usage = join(cpuacct, "cpuacct.usage");
      for (const f of [stat, usage]) expect(spawnSync("mkfifo", [f]).status).toBe(0);
      const statLine = (utime: number) => `4242 (busy) R 1 4242 4242 0 -1 4194560 1 0 0 0 ${utime} 0 0 0 20 0 1 0 5000 0 0\n`;
      const sampler = new ProcessTreeSampler(4242, { procRoot: proc, cgroupV1: { cpuacct }, clockTicks: 100 });

      const writes1 = Promise.all([writeFile(stat, statLine(0)), writeFile(usage, "0\n")]);
      await sampler.sample();
      await writes1;
      const second = sampler.sample(); // blocks on the FIFOs
      await new Promise((r) => setTimeout(r, 500));
      // 0.5 s of CPU, in ticks and in nanoseconds: at most 100 % of a core over >= 500 ms.
      const writes2 = Promise.all([writeFile(stat, statLine(50)), writeFile(usage, "500000000\n")]);
      const s = await second;
      await writes2;
      const pidPercent = s.byPid["4242"]!.cpu!.percent;
      expect(pidPercent).toBeGreaterThan(0);
      expect(pidPercent).toBeLessThanOrEqual(100);
      expect(s.agg.cpu!.percent).toBeGreaterThan(0);
      expect(s.agg.cpu!.percent).toBeLessThanOrEqual(100);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("lists the processes of the task's cgroup and its sub-cgroups, daemons outside the tree included", async () => {
    const root = busyTree();
    const daemon = spawn("sleep", ["30"], { detached: true, stdio: "ignore" }); // not under root
    children.push(daemon);
    const nested = spawn("sleep", ["30"], { detached: true, stdio: "ignore" });
    children.push(nested);
    const tree = await until(async () => {
      const t = await processTree(root.pid!);
      return t.length >= 3 ? t : undefined;
    });
    const dir = mkdtempSync(join(tmpdir(), "nk-cgprocs-"));
    try {
      // A stand-in cgroup: cgroup.procs files (duplicates are allowed), a sub-cgroup, a non-cgroup dir.
      writeFileSync(join(dir, "cgroup.procs"), [...tree.map((p) => p.pid), daemon.pid, root.pid].join("\n") + "\n");
      mkdirSync(join(dir, "sub", "deeper"), { recursive: true });
      writeFileSync(join(dir, "sub", "cgroup.procs"), "");
      writeFileSync(join(dir, "sub", "deeper", "cgroup.procs"), `${nested.pid}\n`);
      mkdirSync(join(dir, "not-a-cgroup"));
      const want = [...tree.map((p) => p.pid), daemon.pid!, nested.pid!].sort((a, b) => a - b);
      expect((await cgroupProcs(dir))!.sort((a, b) => a - b)).toEqual(want);
      expect(await cgroupProcs(join(dir, "missing"))).toBeUndefined();

      const pids = (s: Awaited<ReturnType<ProcessTreeSampler["sample"]>>) => Object.keys(s.byPid).map(Number).sort((a, b) => a - b);
      expect(pids(await new ProcessTreeSampler(root.pid!, { cgroupPath: dir }).sample())).toEqual(want);
      expect(pids(await new ProcessTreeSampler(root.pid!, { cgroupV1: { memory: dir } }).sample())).toEqual(want);
      // listPids wins; undefined from it falls back to the cgroup; no readable cgroup: the tree.
      expect(pids(await new ProcessTreeSampler(root.pid!, { cgroupPath: dir, listPids: () => [daemon.pid!] }).sample())).toEqual([daemon.pid]);
      expect(pids(await new ProcessTreeSampler(root.pid!, { cgroupPath: dir, listPids: () => undefined }).sample())).toEqual(want);
      const fallback = pids(await new ProcessTreeSampler(root.pid!, { cgroupPath: join(dir, "missing") }).sample());
      expect(fallback).toContain(root.pid);
      expect(fallback).not.toContain(daemon.pid);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("answers zeros, with cpu, memory and timestamp, once the process is gone", async () => {
    const c = spawn("true");
    await new Promise((r) => c.on("exit", r));
    const stats = await new ProcessTreeSampler(c.pid!).taskStats("gone");
    expect(stats.timestamp).toBeDefined();
    expect(stats.aggResourceUsage!.cpu!.percent).toBe(0);
    expect(stats.aggResourceUsage!.memory!.rss).toBe(0n);
    expect(stats.resourceUsageByPid).toEqual({});
  });

  it("pollTaskStats yields until aborted", async () => {
    const ac = new AbortController();
    const got = [];
    for await (const s of pollTaskStats(new ProcessTreeSampler(process.pid), "self", { intervalMs: 1, signal: ac.signal })) {
      got.push(s);
      if (got.length === 3) ac.abort();
    }
    expect(got).toHaveLength(3);
    expect(got.every((s) => s.timestamp && s.aggResourceUsage?.cpu && s.aggResourceUsage?.memory)).toBe(true);
  });
});

describe("cgroup v2", () => {
  it("reads cgroup files and lists only what it measured", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-cg-"));
    try {
      writeFileSync(join(dir, "cpu.stat"), "usage_usec 1000000\nuser_usec 600000\nsystem_usec 400000\nnr_periods 10\nnr_throttled 3\nthrottled_usec 2500\n");
      writeFileSync(join(dir, "memory.current"), "8192000\n");
      writeFileSync(join(dir, "memory.stat"), "anon 4096000\nfile 2048000\nkernel 1024\n");
      const r = await readCgroupV2(dir);
      expect(r).toMatchObject({ usageUsec: 1000000n, userUsec: 600000n, nrThrottled: 3n, throttledUsec: 2500n, memoryCurrent: 8192000n, anon: 4096000n, file: 2048000n, kernel: 1024n });
      expect(r.memoryPeak).toBeUndefined();
      expect(r.swapCurrent).toBeUndefined();

      const stats = await new ProcessTreeSampler(process.pid, { cgroupPath: dir }).taskStats("cg");
      const mem = stats.aggResourceUsage!.memory!;
      expect(mem.usage).toBe(8192000n);
      expect(mem.rss).toBe(4096000n);
      expect(mem.cache).toBe(2048000n);
      expect(mem.measuredFields).toEqual([MemoryUsage_Fields.RSS, MemoryUsage_Fields.CACHE, MemoryUsage_Fields.KERNEL_USAGE, MemoryUsage_Fields.USAGE]);
      const cpu = stats.aggResourceUsage!.cpu!;
      expect(cpu.throttledPeriods).toBe(3n);
      expect(cpu.throttledTime).toBe(2_500_000n);
      expect(cpu.measuredFields).toContain(CPUUsage_Fields.THROTTLED_TIME);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("cgroup v1", () => {
  it("reads a task's memory, cpuacct and cpu cgroups into the same fields", async () => {
    const root = mkdtempSync(join(tmpdir(), "nk-cg1-"));
    try {
      const memory = join(root, "memory");
      const cpuacct = join(root, "cpuacct");
      const cpu = join(root, "cpu");
      for (const d of [memory, cpuacct, cpu]) mkdirSync(d);
      writeFileSync(join(memory, "memory.usage_in_bytes"), "8192000\n");
      writeFileSync(join(memory, "memory.max_usage_in_bytes"), "9000000\n");
      // The hierarchical total_ counts win over the cgroup's own.
      writeFileSync(join(memory, "memory.stat"), "cache 1\nrss 2\nswap 3\ntotal_cache 2048000\ntotal_rss 4096000\ntotal_swap 512\n");
      writeFileSync(join(memory, "memory.kmem.usage_in_bytes"), "65536\n");
      writeFileSync(join(memory, "memory.kmem.max_usage_in_bytes"), "131072\n");
      writeFileSync(join(cpuacct, "cpuacct.usage"), "1500000000\n");
      writeFileSync(join(cpuacct, "cpuacct.stat"), "user 90\nsystem 60\n");
      writeFileSync(join(cpu, "cpu.stat"), "nr_periods 10\nnr_throttled 3\nthrottled_time 2500000\n");
      const r = await readCgroupV1({ memory, cpuacct, cpu }, { clockTicks: 100 });
      expect(r).toEqual({
        usageUsec: 1_500_000n,
        userUsec: 900_000n,
        systemUsec: 600_000n,
        nrThrottled: 3n,
        throttledUsec: 2500n,
        memoryCurrent: 8192000n,
        memoryPeak: 9000000n,
        anon: 4096000n,
        file: 2048000n,
        swapCurrent: 512n,
        kernel: 65536n,
        kernelMax: 131072n,
      });
      expect(await readCgroupV1({ memory: join(root, "missing") })).toEqual({});

      const stats = await new ProcessTreeSampler(process.pid, { cgroupV1: { memory, cpuacct, cpu } }).taskStats("cg1");
      const mem = stats.aggResourceUsage!.memory!;
      expect(mem).toMatchObject({ usage: 8192000n, rss: 4096000n, cache: 2048000n, maxUsage: 9000000n, swap: 512n, kernelUsage: 65536n, kernelMaxUsage: 131072n });
      // Nomad's v1 executor: RSS, Cache, Swap, Usage, Max Usage, Kernel Usage, Kernel Max Usage.
      const fields = [
        MemoryUsage_Fields.RSS,
        MemoryUsage_Fields.CACHE,
        MemoryUsage_Fields.SWAP,
        MemoryUsage_Fields.USAGE,
        MemoryUsage_Fields.MAX_USAGE,
        MemoryUsage_Fields.KERNEL_USAGE,
        MemoryUsage_Fields.KERNEL_MAX_USAGE,
      ];
      expect(mem.measuredFields).toEqual(fields.sort((x, y) => x - y));
      expect(stats.aggResourceUsage!.cpu).toMatchObject({ throttledPeriods: 3n, throttledTime: 2_500_000n });
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe("the /proc scan on a busy host", () => {
  it("finds the process tree when the host has more processes than the scanner may open files (ulimit -n 100, 600 pids)", () => {
    const root = mkdtempSync(join(tmpdir(), "nk-busy-proc-"));
    try {
      for (let pid = 1000; pid < 1600; pid++) {
        mkdirSync(join(root, String(pid)));
        // 1500 is the task; 1501 its child; the rest belong to others.
        const ppid = pid === 1501 ? 1500 : 1;
        writeFileSync(join(root, String(pid), "stat"), `${pid} (p${pid}) S ${ppid} ${pid} ${pid} 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 5000 0 0\n`);
      }
      // A process of its own with a low open-files limit, on the built module (the test's own process cannot lower it).
      const stats = new URL("../dist/esm/stats.js", import.meta.url).href;
      const script = `const { processTree } = await import(${JSON.stringify(stats)}); console.log(JSON.stringify((await processTree(1500, ${JSON.stringify(root)})).map((p) => p.pid)));`;
      const r = spawnSync("sh", ["-c", 'ulimit -n 100 && exec "$0" --input-type=module -e "$1"', process.execPath, script], { encoding: "utf8" });
      expect(r.stderr).toBe("");
      expect(JSON.parse(r.stdout)).toEqual([1500, 1501]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
