import { readFile } from "node:fs/promises";
import { existsSync, readFileSync, readdirSync, type Dirent } from "node:fs";
import { join } from "node:path";

/** One reading of a cgroup v2 directory. Absent fields were not readable (controller not enabled). */
export interface CgroupV2Reading {
  /** cpu.stat usage_usec: total CPU time, microseconds. */
  usageUsec?: bigint;
  /** cpu.stat user_usec: CPU time in user mode, microseconds. */
  userUsec?: bigint;
  /** cpu.stat system_usec: CPU time in kernel mode, microseconds. */
  systemUsec?: bigint;
  /** cpu.stat nr_throttled: periods throttled (only with the cpu controller). */
  nrThrottled?: bigint;
  /** cpu.stat throttled_usec: time throttled, microseconds (only with the cpu controller). */
  throttledUsec?: bigint;
  /** memory.current, bytes. */
  memoryCurrent?: bigint;
  /** memory.peak, bytes (kernel 5.19+). */
  memoryPeak?: bigint;
  /** memory.swap.current, bytes. */
  swapCurrent?: bigint;
  /** memory.stat anon: anonymous memory, bytes. */
  anon?: bigint;
  /** memory.stat file: page cache, bytes. */
  file?: bigint;
  /** memory.stat kernel (or kernel_stack + slab on older kernels), bytes. */
  kernel?: bigint;
  /** Peak kernel memory, bytes: cgroup v1's memory.kmem.max_usage_in_bytes (v2 has no such file). */
  kernelMax?: bigint;
}

/** Default mount point of the cgroup v2 hierarchy. */
export const CGROUP_V2_ROOT = "/sys/fs/cgroup";

/**
 * The cgroup v2 directory of a process (`0::/path` in /proc/<pid>/cgroup joined to the unified
 * mount), or undefined when the host is not on a pure cgroup v2 hierarchy or the process is gone.
 *
 * @example
 * ```ts
 * import { cgroupV2PathOf } from "@nomadkit/server/stats";
 * const dir = await cgroupV2PathOf(process.pid); // "/sys/fs/cgroup/system.slice/nomad.service"
 * ```
 */
export async function cgroupV2PathOf(
  pid: number,
  options: { procRoot?: string; cgroupRoot?: string } = {},
): Promise<string | undefined> {
  const cgroupRoot = options.cgroupRoot ?? CGROUP_V2_ROOT;
  // A hybrid v1/v2 host has no cgroup.controllers at the root: v2 there holds no controllers.
  if (!existsSync(`${cgroupRoot}/cgroup.controllers`)) return undefined;
  let text: string;
  try {
    text = await readFile(`${options.procRoot ?? "/proc"}/${pid}/cgroup`, "utf8");
  } catch {
    return undefined;
  }
  const line = text.split("\n").find((l) => l.startsWith("0::"));
  if (!line) return undefined;
  const rel = line.slice(3);
  return rel === "/" ? cgroupRoot : `${cgroupRoot}${rel}`;
}

async function readOpt(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch {
    return undefined;
  }
}

function flatKeyed(text: string | undefined): Map<string, bigint> {
  const out = new Map<string, bigint>();
  if (!text) return out;
  for (const line of text.split("\n")) {
    const [k, v] = line.trim().split(/\s+/);
    if (k && v && /^\d+$/.test(v)) out.set(k, BigInt(v));
  }
  return out;
}

function single(text: string | undefined): bigint | undefined {
  const t = text?.trim();
  return t && /^\d+$/.test(t) ? BigInt(t) : undefined;
}

/**
 * Reads cpu.stat, memory.current, memory.peak, memory.swap.current and memory.stat of a cgroup v2
 * directory. Missing files leave their fields undefined, so callers can set measured_fields truthfully.
 *
 * @example
 * ```ts
 * import { readCgroupV2 } from "@nomadkit/server/stats";
 * const r = await readCgroupV2("/sys/fs/cgroup/nomad.slice/task.scope");
 * console.log(r.memoryCurrent, r.usageUsec);
 * ```
 */
export async function readCgroupV2(dir: string): Promise<CgroupV2Reading> {
  const [cpuStat, current, peak, swap, memStat] = await Promise.all([
    readOpt(`${dir}/cpu.stat`),
    readOpt(`${dir}/memory.current`),
    readOpt(`${dir}/memory.peak`),
    readOpt(`${dir}/memory.swap.current`),
    readOpt(`${dir}/memory.stat`),
  ]);
  const cpu = flatKeyed(cpuStat);
  const mem = flatKeyed(memStat);
  const r: CgroupV2Reading = {};
  const set = <K extends keyof CgroupV2Reading>(k: K, v: bigint | undefined) => {
    if (v !== undefined) r[k] = v;
  };
  set("usageUsec", cpu.get("usage_usec"));
  set("userUsec", cpu.get("user_usec"));
  set("systemUsec", cpu.get("system_usec"));
  set("nrThrottled", cpu.get("nr_throttled"));
  set("throttledUsec", cpu.get("throttled_usec"));
  set("memoryCurrent", single(current));
  set("memoryPeak", single(peak));
  set("swapCurrent", single(swap));
  set("anon", mem.get("anon"));
  set("file", mem.get("file"));
  const kernel =
    mem.get("kernel") ??
    (mem.has("kernel_stack") || mem.has("slab") ? (mem.get("kernel_stack") ?? 0n) + (mem.get("slab") ?? 0n) : undefined);
  set("kernel", kernel);
  return r;
}

/** The cgroup v1 directories of a task, by controller (the ones it has; others are left out). */
export interface CgroupV1Dirs {
  /** The memory controller's directory. */
  memory?: string | undefined;
  /** The cpuacct controller's directory (CPU time). */
  cpuacct?: string | undefined;
  /** The cpu controller's directory (throttling). */
  cpu?: string | undefined;
}

/**
 * Reads a task's cgroup v1 files into the same shape as {@link readCgroupV2}: cpuacct.usage and
 * cpuacct.stat (CPU time), cpu.stat (throttling), memory.usage_in_bytes, memory.max_usage_in_bytes,
 * memory.stat (rss, cache, swap: the hierarchical `total_` counts when present),
 * memory.kmem.usage_in_bytes and memory.kmem.max_usage_in_bytes. Controllers or files that are missing leave their fields undefined.
 *
 * @example
 * ```ts
 * import { readCgroupV1 } from "@nomadkit/server/stats";
 * const r = await readCgroupV1({ memory: "/sys/fs/cgroup/memory/nomad/a.web", cpuacct: "/sys/fs/cgroup/cpuacct/nomad/a.web" });
 * console.log(r.memoryCurrent, r.usageUsec);
 * ```
 */
export async function readCgroupV1(dirs: CgroupV1Dirs, options: { clockTicks?: number } = {}): Promise<CgroupV2Reading> {
  const at = (dir: string | undefined, file: string) => (dir === undefined ? Promise.resolve(undefined) : readOpt(`${dir}/${file}`));
  const [usage, acctStat, cpuStat, memUsage, memMax, memStat, kmem, kmemMax] = await Promise.all([
    at(dirs.cpuacct, "cpuacct.usage"),
    at(dirs.cpuacct, "cpuacct.stat"),
    at(dirs.cpu, "cpu.stat"),
    at(dirs.memory, "memory.usage_in_bytes"),
    at(dirs.memory, "memory.max_usage_in_bytes"),
    at(dirs.memory, "memory.stat"),
    at(dirs.memory, "memory.kmem.usage_in_bytes"),
    at(dirs.memory, "memory.kmem.max_usage_in_bytes"),
  ]);
  const r: CgroupV2Reading = {};
  const set = <K extends keyof CgroupV2Reading>(k: K, v: bigint | undefined) => {
    if (v !== undefined) r[k] = v;
  };
  const usageNs = single(usage);
  set("usageUsec", usageNs === undefined ? undefined : usageNs / 1000n);
  // cpuacct.stat counts USER_HZ ticks.
  const usecPerTick = BigInt(Math.round(1e6 / (options.clockTicks ?? 100)));
  const acct = flatKeyed(acctStat);
  const ticks = (k: string) => (acct.has(k) ? acct.get(k)! * usecPerTick : undefined);
  set("userUsec", ticks("user"));
  set("systemUsec", ticks("system"));
  const cpu = flatKeyed(cpuStat);
  set("nrThrottled", cpu.get("nr_throttled"));
  const throttledNs = cpu.get("throttled_time");
  set("throttledUsec", throttledNs === undefined ? undefined : throttledNs / 1000n);
  set("memoryCurrent", single(memUsage));
  set("memoryPeak", single(memMax));
  const mem = flatKeyed(memStat);
  const stat = (k: string) => mem.get(`total_${k}`) ?? mem.get(k);
  set("anon", stat("rss"));
  set("file", stat("cache"));
  set("swapCurrent", stat("swap"));
  set("kernel", single(kmem));
  set("kernelMax", single(kmemMax));
  return r;
}

/**
 * The processes of a cgroup and of all its sub-cgroups, from their cgroup.procs files (how Nomad
 * lists a task's processes when it has a cgroup: daemons that left the process tree stay in it).
 * Undefined when `dir` has no readable cgroup.procs; sub-cgroups removed meanwhile are skipped.
 *
 * @example
 * ```ts
 * import { cgroupProcs } from "@nomadkit/server/stats";
 * const pids = cgroupProcs("/sys/fs/cgroup/nomad.slice/share.slice/a.web.scope"); // [4242, 4250]
 * ```
 */
export function cgroupProcs(dir: string): number[] | undefined {
  // Synchronous: a task's cgroup tree is a few small files, and Shutdown's kill loop reads it too.
  const read = (d: string): string | undefined => {
    try {
      return readFileSync(join(d, "cgroup.procs"), "utf8");
    } catch {
      return undefined; // removed meanwhile
    }
  };
  const own = read(dir);
  if (own === undefined) return undefined;
  const out = new Set<number>();
  const add = (text: string) => {
    // Not guaranteed free of duplicates (cgroups(7)): a set.
    for (const t of text.split("\n")) if (/^\d+$/.test(t)) out.add(Number(t));
  };
  add(own);
  const walk = (d: string): void => {
    let subs: Dirent[];
    try {
      subs = readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of subs) {
      if (!e.isDirectory()) continue;
      const sub = join(d, e.name);
      const text = read(sub);
      if (text === undefined) continue;
      add(text);
      walk(sub);
    }
  };
  walk(dir);
  return [...out];
}
