/**
 * TaskStats streams: the SDK owns the interval (`collection_interval`, default 1 s) and makes every
 * sample safe for Nomad's Go client: `timestamp` always set, `agg_resource_usage` with both `cpu` and
 * `memory`, `total_ticks` derived from `percent` when the driver left it out, and `measured_fields`
 * listing what the driver gave when it listed nothing.
 */
import { clone, create, isMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { TimestampSchema, timestampFromDate, timestampNow, type Duration, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { ClientTopology } from "@nomadkit/protocol/base";
import {
  CPUUsage_Fields,
  CPUUsageSchema,
  MemoryUsage_Fields,
  MemoryUsageSchema,
  TaskResourceUsageSchema,
  TaskStatsSchema,
  type TaskResourceUsage,
  type TaskStats,
} from "@nomadkit/protocol/driver";
import { timerDelayMs } from "../runtime/timer-delay.js";
import { hostCompute, totalTicks, type HostCompute } from "../stats/host.js";
import type { ResourceUsageInput, TaskStatsInput } from "./types.js";

/** Default and smallest sampling period. */
export const DEFAULT_STATS_INTERVAL_MS = 1000;
const MIN_STATS_INTERVAL_MS = 10;

/**
 * `collection_interval` in milliseconds (default 1 s when unset or zero).
 *
 * @example
 * ```ts
 * statsIntervalMs(create(DurationSchema, { seconds: 2n })); // 2000
 * ```
 */
export function statsIntervalMs(d: Duration | undefined): number {
  if (d === undefined) return DEFAULT_STATS_INTERVAL_MS;
  const ms = timerDelayMs(Number(d.seconds) * 1000 + d.nanos / 1e6);
  if (ms === 0) return DEFAULT_STATS_INTERVAL_MS;
  return Math.max(MIN_STATS_INTERVAL_MS, ms);
}

/**
 * Host compute capacity from Nomad's client topology (SetConfig's `nomad_config.driver.Topology`):
 * `override_total_compute` when set, else the sum of each core's base (or max, or guessed) speed;
 * the core count is the number of cores listed. Undefined when the topology says nothing usable.
 * The `total_ticks` formula itself is `totalTicks` in `@nomadkit/server/stats`.
 *
 * @example
 * ```ts
 * const host = computeFromTopology(setConfigRequest.nomadConfig?.driver?.Topology) ?? hostCompute();
 * ```
 */
export function computeFromTopology(topology: ClientTopology | undefined): HostCompute | undefined {
  if (topology === undefined || topology.cores.length === 0) return undefined;
  let mhz = Number(topology.overrideTotalCompute);
  if (!(mhz > 0)) {
    mhz = 0;
    // Nomad's numalib Core.MHz(): base, then max, then the guess (which Linux fills on every core).
    for (const c of topology.cores) mhz += Number(c.baseSpeed > 0n ? c.baseSpeed : c.maxSpeed > 0n ? c.maxSpeed : c.guessSpeed);
  }
  if (!(mhz > 0)) return undefined;
  return hostCompute({ totalComputeMhz: mhz, numCores: topology.cores.length });
}

// Nomad shows (`alloc status -verbose`) and publishes as metrics only the fields a sample lists
// in measured_fields: Go drivers list what they read.
const CPU_FIELDS = [
  ["systemMode", CPUUsage_Fields.SYSTEM_MODE],
  ["userMode", CPUUsage_Fields.USER_MODE],
  ["totalTicks", CPUUsage_Fields.TOTAL_TICKS],
  ["throttledPeriods", CPUUsage_Fields.THROTTLED_PERIODS],
  ["throttledTime", CPUUsage_Fields.THROTTLED_TIME],
  ["percent", CPUUsage_Fields.PERCENT],
] as const;
const MEMORY_FIELDS = [
  ["rss", MemoryUsage_Fields.RSS],
  ["cache", MemoryUsage_Fields.CACHE],
  ["swap", MemoryUsage_Fields.SWAP],
  ["usage", MemoryUsage_Fields.USAGE],
  ["maxUsage", MemoryUsage_Fields.MAX_USAGE],
  ["kernelUsage", MemoryUsage_Fields.KERNEL_USAGE],
  ["kernelMaxUsage", MemoryUsage_Fields.KERNEL_MAX_USAGE],
] as const;

/**
 * The measured fields of a sample that lists none: the fields a plain object sets (0 included: an
 * idle task's 0 % is a measurement), or a message's non-zero ones (its unset fields read 0 too).
 */
function measured<F>(fields: readonly (readonly [string, F])[], given: object | undefined, values: object): F[] {
  const g = given as Record<string, unknown> | undefined;
  const v = values as Record<string, unknown>;
  return fields.filter(([k]) => (g !== undefined ? g[k] !== undefined : v[k] !== 0 && v[k] !== 0n)).map(([, f]) => f);
}

function usage(input: ResourceUsageInput | MessageInitShape<typeof TaskResourceUsageSchema> | undefined, host: HostCompute): TaskResourceUsage {
  // Never mutate the caller's message (it may be forwarded from an executor or reused).
  const message = isMessage(input, TaskResourceUsageSchema);
  const u = message ? clone(TaskResourceUsageSchema, input) : create(TaskResourceUsageSchema, input ?? {});
  const givenCpu = message || input?.cpu === undefined || isMessage(input.cpu, CPUUsageSchema) ? undefined : input.cpu;
  const givenMemory = message || input?.memory === undefined || isMessage(input.memory, MemoryUsageSchema) ? undefined : input.memory;
  const cpuListed = (u.cpu?.measuredFields.length ?? 0) > 0;
  u.cpu ??= create(CPUUsageSchema);
  u.memory ??= create(MemoryUsageSchema);
  if (!cpuListed) u.cpu.measuredFields = measured(CPU_FIELDS, givenCpu, u.cpu);
  if (u.memory.measuredFields.length === 0) u.memory.measuredFields = measured(MEMORY_FIELDS, givenMemory, u.memory);
  // Derived, so computed whenever missing; a value the driver (or an executor) set is kept as is.
  if (u.cpu.totalTicks === 0 && u.cpu.percent > 0) {
    u.cpu.totalTicks = totalTicks(u.cpu.percent, host);
    if (!cpuListed && !u.cpu.measuredFields.includes(CPUUsage_Fields.TOTAL_TICKS)) u.cpu.measuredFields.push(CPUUsage_Fields.TOTAL_TICKS);
  }
  return u;
}

/**
 * Turn whatever `taskStats` returned into a complete `TaskStats` message for `taskId`: timestamp,
 * cpu and memory always present, `total_ticks` derived from `percent` where missing. The SDK applies
 * it to every sample; exported for drivers that build TaskStats themselves.
 *
 * @example
 * ```ts
 * const stats = normalizeTaskStats("t1", { cpu: { percent: 50 }, memory: { rss: 1024n } }, hostCompute());
 * stats.aggResourceUsage.cpu.totalTicks; // 50% of one core, in MHz
 * ```
 */
export function normalizeTaskStats(taskId: string, input: TaskStatsInput, host: HostCompute): TaskStats {
  let timestamp: TaskStats["timestamp"];
  let agg: TaskResourceUsage;
  const byPid: Record<string, TaskResourceUsage> = {};
  if (isMessage(input, TaskStatsSchema) || "aggResourceUsage" in input || "resourceUsageByPid" in input || "$typeName" in input) {
    const m = isMessage(input, TaskStatsSchema) ? input : create(TaskStatsSchema, input as MessageInitShape<typeof TaskStatsSchema>);
    timestamp = m.timestamp;
    // An init shape's own usages, not the message made from it: what it sets counts as measured.
    const init = isMessage(input, TaskStatsSchema) ? undefined : (input as MessageInitShape<typeof TaskStatsSchema>);
    agg = usage(init?.aggResourceUsage ?? m.aggResourceUsage, host);
    for (const [pid, u] of Object.entries(m.resourceUsageByPid)) byPid[pid] = usage(init?.resourceUsageByPid?.[pid] ?? u, host);
  } else {
    const s = input as { timestamp?: Date | Timestamp; agg?: ResourceUsageInput; byPid?: Record<string, ResourceUsageInput> } & ResourceUsageInput;
    // A Date, or the Timestamp of a TaskStats init shape that set nothing else.
    if (s.timestamp !== undefined) timestamp = s.timestamp instanceof Date ? timestampFromDate(s.timestamp) : create(TimestampSchema, s.timestamp);
    agg = usage("agg" in s ? s.agg : { cpu: s.cpu, memory: s.memory }, host);
    for (const [pid, u] of Object.entries(s.byPid ?? {})) byPid[pid] = usage(u, host);
  }
  return create(TaskStatsSchema, {
    id: taskId,
    timestamp: timestamp ?? timestampNow(),
    aggResourceUsage: agg,
    resourceUsageByPid: byPid,
  });
}
