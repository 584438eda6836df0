/**
 * Process resource statistics for Nomad task drivers: /proc and cgroup v1/v2 readers, a process-tree
 * sampler producing `TaskStats`, host compute capacity and the single `total_ticks` formula.
 *
 * @example
 * ```ts
 * import { ProcessTreeSampler, pollTaskStats } from "@nomadkit/server/stats";
 * const sampler = new ProcessTreeSampler(pid);
 * for await (const stats of pollTaskStats(sampler, taskId, { intervalMs: 1000, signal })) send(stats);
 * ```
 * @module
 */
export { clockTicksPerSecond, hostCompute, totalTicks } from "./stats/host.js";
export type { HostCompute, HostComputeOptions } from "./stats/host.js";
export { parseProcStat, processTree, readAllProcStats, readProcMemory, readProcStat, readUptimeSeconds } from "./stats/proc.js";
export type { ProcMemory, ProcStat } from "./stats/proc.js";
export { CGROUP_V2_ROOT, cgroupProcs, cgroupV2PathOf, readCgroupV1, readCgroupV2 } from "./stats/cgroup.js";
export type { CgroupV1Dirs, CgroupV2Reading } from "./stats/cgroup.js";
export { ProcessTreeSampler, pollTaskStats, toTaskStats } from "./stats/sampler.js";
export type { ProcessTreeSamplerOptions, ResourceSample } from "./stats/sampler.js";
