import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  CPUUsageSchema,
  CPUUsage_Fields,
  MemoryUsageSchema,
  MemoryUsage_Fields,
  TaskResourceUsageSchema,
  TaskStatsSchema,
  type TaskResourceUsage,
  type TaskStats,
} from "@nomadkit/protocol/driver";
import { setTimeout as delay } from "node:timers/promises";
import { timerDelayMs } from "../runtime/timer-delay.js";
import { cgroupProcs, readCgroupV1, readCgroupV2, type CgroupV1Dirs, type CgroupV2Reading } from "./cgroup.js";
import { clockTicksPerSecond, hostCompute, totalTicks, type HostCompute } from "./host.js";
import { monotonicSeconds, processTreeTimed, readProcMemory, readProcStatTimed, type TimedProcStat } from "./proc.js";

/** Options for {@link ProcessTreeSampler}. */
export interface ProcessTreeSamplerOptions {
  /** Host capacity for total_ticks; default {@link hostCompute}(). */
  host?: HostCompute;
  /**
   * A cgroup v2 directory that holds exactly the task (a dedicated cgroup). When set and readable,
   * the aggregate comes from the cgroup (cpu.stat, memory.current, memory.stat, ...) and lists the
   * extra fields it measures, and the task's processes are those in it and its sub-cgroups
   * (cgroup.procs, as Nomad lists them), daemons that left the process tree included; per-pid
   * numbers always come from /proc.
   */
  cgroupPath?: string;
  /**
   * The task's dedicated cgroup v1 directories (memory, cpuacct, cpu), used like `cgroupPath` when
   * that is not set: the aggregate comes from their files, the processes from the first of them.
   */
  cgroupV1?: CgroupV1Dirs;
  /**
   * Lists the task's processes (an executor's own containment cgroup, say), winning over the
   * cgroup's processes and the tree walk; undefined falls back to them.
   */
  listPids?: () => readonly number[] | undefined | Promise<readonly number[] | undefined>;
  /** Alternative procfs mount (tests). */
  procRoot?: string;
  /** Clock ticks per second; default `getconf CLK_TCK`. */
  clockTicks?: number;
}

/** One sample of a process tree. */
export interface ResourceSample {
  /** When the sample was taken. */
  timestamp: Date;
  /** Usage of the whole tree (or of the cgroup), cpu and memory always set. */
  agg: TaskResourceUsage;
  /** Usage per process, keyed by pid as a decimal string (Nomad's `resource_usage_by_pid`). */
  byPid: Record<string, TaskResourceUsage>;
}

interface CpuMark {
  utime: number;
  stime: number;
  at: number;
}

const PROC_CPU_FIELDS = [CPUUsage_Fields.SYSTEM_MODE, CPUUsage_Fields.USER_MODE, CPUUsage_Fields.PERCENT];

/**
 * Samples CPU and memory of a process and all its descendants from /proc (or of the processes of
 * the task's cgroup, when it has one), optionally with the cgroup's own counters. CPU percentages
 * are relative to one core and computed between consecutive samples, each counter against the time
 * it was read; a process (or cgroup) seen for the first time reports 0 %, as Nomad's CPU tracker
 * does, so the first sample of a new sampler shows no CPU use. `total_ticks` is derived with
 * {@link totalTicks}. `measured_fields` lists only what was really read: system/user mode and
 * percent, RSS and swap (plus usage, cache, peak, kernel, throttling from a cgroup).
 *
 * @example
 * ```ts
 * import { ProcessTreeSampler } from "@nomadkit/server/stats";
 * const sampler = new ProcessTreeSampler(child.pid!);
 * const stats = await sampler.taskStats("task-1"); // TaskStats message, ready to send
 * console.log(stats.aggResourceUsage?.cpu?.percent, stats.aggResourceUsage?.memory?.rss);
 * ```
 */
export class ProcessTreeSampler {
  /** The process whose tree (it and all its descendants) is sampled. */
  readonly rootPid: number;
  /** Host capacity used to turn CPU percent into `total_ticks` (MHz). */
  readonly host: HostCompute;
  private readonly options: ProcessTreeSamplerOptions;
  private readonly clk: number;
  private marks = new Map<string, CpuMark>();
  private cgMark: { reading: CgroupV2Reading; at: number } | undefined;

  constructor(rootPid: number, options: ProcessTreeSamplerOptions = {}) {
    this.rootPid = rootPid;
    this.options = options;
    this.host = options.host ?? hostCompute();
    this.clk = options.clockTicks ?? clockTicksPerSecond();
  }

  /**
   * A sampler of the same processes that goes on from this one's last readings, for a second
   * consumer: each of two consumers sampling one sampler would measure CPU over the sliver of time
   * since the other's sample, while a new sampler's first sample would report 0 %.
   *
   * @example
   * ```ts
   * const mine = shared.fork();
   * const stats = await mine.taskStats("task-1"); // CPU since shared's last sample
   * ```
   */
  fork(): ProcessTreeSampler {
    const copy = new ProcessTreeSampler(this.rootPid, { ...this.options, host: this.host, clockTicks: this.clk });
    copy.marks = new Map(this.marks);
    copy.cgMark = this.cgMark;
    return copy;
  }

  /** Takes one sample. A vanished root yields zeros (with timestamp, cpu and memory set). */
  async sample(): Promise<ResourceSample> {
    const procRoot = this.options.procRoot;
    const timestamp = new Date();
    const procs = await this.taskProcesses();
    const mems = await Promise.all(procs.map((p) => readProcMemory(p.stat.pid, procRoot)));

    const nextMarks = new Map<string, CpuMark>();
    const byPid: Record<string, TaskResourceUsage> = {};
    let aggUser = 0;
    let aggSys = 0;
    let aggRss = 0n;
    let aggSwap = 0n;
    let swapKnown = true;
    procs.forEach((p, i) => {
      const { user, sys } = this.cpuPercent(p, nextMarks);
      // Gone since its stat was read: nothing resident, nothing swapped.
      const mem = mems[i] ?? { rss: 0n, swap: 0n };
      aggUser += user;
      aggSys += sys;
      aggRss += mem.rss;
      if (mem.swap === undefined) swapKnown = false;
      else aggSwap += mem.swap;
      byPid[String(p.stat.pid)] = this.usage(user, sys, mem.rss, mem.swap);
    });
    this.marks = nextMarks;

    let agg = this.usage(aggUser, aggSys, aggRss, swapKnown ? aggSwap : undefined);
    const { cgroupPath, cgroupV1 } = this.options;
    if (cgroupPath) {
      const r = await readCgroupV2(cgroupPath);
      agg = this.cgroupUsage(r, monotonicSeconds(), agg);
    } else if (cgroupV1) {
      const r = await readCgroupV1(cgroupV1, { clockTicks: this.clk });
      agg = this.cgroupUsage(r, monotonicSeconds(), agg);
    }
    return { timestamp, agg, byPid };
  }

  /**
   * The task's processes, each with its stat and the time it was read: from `listPids`, else the
   * cgroup's processes (sub-cgroups included), else the tree under `rootPid`.
   */
  private async taskProcesses(): Promise<TimedProcStat[]> {
    const { procRoot, cgroupPath, cgroupV1, listPids } = this.options;
    let pids = listPids ? await listPids() : undefined;
    const dir = cgroupPath ?? cgroupV1?.memory ?? cgroupV1?.cpuacct ?? cgroupV1?.cpu;
    if (pids === undefined && dir !== undefined) pids = cgroupProcs(dir);
    if (pids === undefined) return processTreeTimed(this.rootPid, procRoot);
    const stats = await Promise.all(pids.map((pid) => readProcStatTimed(pid, procRoot)));
    return stats.filter((t): t is TimedProcStat => t !== undefined);
  }

  /** Takes one sample and wraps it as a `TaskStats` message for task `id`. */
  async taskStats(id: string): Promise<TaskStats> {
    return toTaskStats(id, await this.sample());
  }

  private cpuPercent({ stat: p, at }: TimedProcStat, next: Map<string, CpuMark>) {
    const key = `${p.pid}:${p.starttime}`;
    const prev = this.marks.get(key);
    next.set(key, { utime: p.utime, stime: p.stime, at });
    // First sight: no rate yet (Nomad's cpustats.Tracker answers 0 without a previous reading).
    if (!prev) return { user: 0, sys: 0 };
    const seconds = at - prev.at;
    if (!(seconds > 0)) return { user: 0, sys: 0 };
    const f = 100 / this.clk / seconds;
    return { user: Math.max(0, (p.utime - prev.utime) * f), sys: Math.max(0, (p.stime - prev.stime) * f) };
  }

  private usage(user: number, sys: number, rss: bigint, swap: bigint | undefined): TaskResourceUsage {
    const percent = user + sys;
    const memFields = [MemoryUsage_Fields.RSS];
    if (swap !== undefined) memFields.push(MemoryUsage_Fields.SWAP);
    return create(TaskResourceUsageSchema, {
      cpu: create(CPUUsageSchema, {
        userMode: user,
        systemMode: sys,
        percent,
        totalTicks: totalTicks(percent, this.host),
        measuredFields: PROC_CPU_FIELDS,
      }),
      memory: create(MemoryUsageSchema, { rss, swap: swap ?? 0n, measuredFields: memFields }),
    });
  }

  private cgroupUsage(r: CgroupV2Reading, at: number, procAgg: TaskResourceUsage): TaskResourceUsage {
    const prev = this.cgMark;
    this.cgMark = { reading: r, at };
    const cpu = procAgg.cpu!;
    if (r.usageUsec !== undefined && prev?.reading.usageUsec !== undefined && at > prev.at) {
      const f = 100 / 1e6 / (at - prev.at);
      const d = (a: bigint | undefined, b: bigint | undefined) =>
        a !== undefined && b !== undefined && a >= b ? Number(a - b) * f : 0;
      cpu.percent = d(r.usageUsec, prev.reading.usageUsec);
      cpu.userMode = d(r.userUsec, prev.reading.userUsec);
      cpu.systemMode = d(r.systemUsec, prev.reading.systemUsec);
      cpu.totalTicks = totalTicks(cpu.percent, this.host);
    }
    if (r.nrThrottled !== undefined && r.throttledUsec !== undefined) {
      cpu.throttledPeriods = r.nrThrottled;
      cpu.throttledTime = r.throttledUsec * 1000n;
      cpu.measuredFields = [...PROC_CPU_FIELDS, CPUUsage_Fields.THROTTLED_PERIODS, CPUUsage_Fields.THROTTLED_TIME];
    }
    if (r.memoryCurrent === undefined) return procAgg;
    const fields: MemoryUsage_Fields[] = [MemoryUsage_Fields.USAGE];
    const memory = create(MemoryUsageSchema, { usage: r.memoryCurrent });
    if (r.anon !== undefined) {
      memory.rss = r.anon;
      fields.push(MemoryUsage_Fields.RSS);
    }
    if (r.file !== undefined) {
      memory.cache = r.file;
      fields.push(MemoryUsage_Fields.CACHE);
    }
    if (r.memoryPeak !== undefined) {
      memory.maxUsage = r.memoryPeak;
      fields.push(MemoryUsage_Fields.MAX_USAGE);
    }
    if (r.kernel !== undefined) {
      memory.kernelUsage = r.kernel;
      fields.push(MemoryUsage_Fields.KERNEL_USAGE);
    }
    if (r.kernelMax !== undefined) {
      memory.kernelMaxUsage = r.kernelMax;
      fields.push(MemoryUsage_Fields.KERNEL_MAX_USAGE);
    }
    if (r.swapCurrent !== undefined) {
      memory.swap = r.swapCurrent;
      fields.push(MemoryUsage_Fields.SWAP);
    }
    memory.measuredFields = fields.sort((a, b) => a - b);
    return create(TaskResourceUsageSchema, { cpu, memory });
  }
}

/**
 * Wraps a {@link ResourceSample} as a `TaskStats` message (timestamp, agg_resource_usage with cpu
 * and memory, resource_usage_by_pid), the shape both Driver.TaskStats and Executor.Stats send.
 *
 * @example
 * ```ts
 * import { ProcessTreeSampler, toTaskStats } from "@nomadkit/server/stats";
 * const stats = toTaskStats("task-1", await new ProcessTreeSampler(pid).sample());
 * ```
 */
export function toTaskStats(id: string, sample: ResourceSample): TaskStats {
  return create(TaskStatsSchema, {
    id,
    timestamp: timestampFromDate(sample.timestamp),
    aggResourceUsage: sample.agg,
    resourceUsageByPid: sample.byPid,
  });
}

/**
 * Yields one `TaskStats` per interval (the first at once) until `signal` aborts; the loop a stats
 * RPC needs. Sampling errors end the iteration with that error.
 *
 * @example
 * ```ts
 * import { ProcessTreeSampler, pollTaskStats } from "@nomadkit/server/stats";
 * for await (const s of pollTaskStats(new ProcessTreeSampler(pid), "t1", { intervalMs: 1000, signal })) {
 *   send(s);
 * }
 * ```
 */
export async function* pollTaskStats(
  sampler: ProcessTreeSampler,
  id: string,
  options: { intervalMs: number; signal?: AbortSignal },
): AsyncGenerator<TaskStats> {
  const interval = Math.max(1, timerDelayMs(options.intervalMs));
  const { signal } = options;
  while (!signal?.aborted) {
    yield await sampler.taskStats(id);
    try {
      await delay(interval, undefined, { signal });
    } catch {
      return; // aborted
    }
  }
}
