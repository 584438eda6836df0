import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { cpus } from "node:os";

/** The host's CPU capacity, the denominator of `total_ticks`. */
export interface HostCompute {
  /** Number of logical CPUs. */
  numCores: number;
  /** Sum of every logical CPU's clock in MHz. */
  totalComputeMhz: number;
}

/** Options for {@link hostCompute}. */
export interface HostComputeOptions {
  /** Use this total instead of reading /proc/cpuinfo (Nomad's `cpu_total_compute`). */
  totalComputeMhz?: number;
  /** Use this core count instead of the detected one. */
  numCores?: number;
  /** Alternative cpuinfo file (tests). Default `/proc/cpuinfo`. */
  cpuinfoPath?: string;
}

/**
 * Reads the host's compute capacity: the sum of every "cpu MHz" line of /proc/cpuinfo and the
 * number of logical CPUs. When the kernel reports no clock (some VMs, ARM), it falls back to
 * 1000 MHz per core, so `total_ticks` stays meaningful. Overrides win over detection.
 *
 * @example
 * ```ts
 * import { hostCompute } from "@nomadkit/server/stats";
 * const { numCores, totalComputeMhz } = hostCompute();
 * const pinned = hostCompute({ totalComputeMhz: 8000 });
 * ```
 */
export function hostCompute(options: HostComputeOptions = {}): HostCompute {
  let text = "";
  try {
    text = readFileSync(options.cpuinfoPath ?? "/proc/cpuinfo", "utf8");
  } catch {
    // Not Linux, or no procfs: fall through to os.cpus().
  }
  let mhz = 0;
  let processors = 0;
  for (const line of text.split("\n")) {
    const colon = line.indexOf(":");
    if (colon < 0) continue;
    const key = line.slice(0, colon).trim();
    if (key === "processor") processors++;
    else if (key === "cpu MHz") {
      const v = Number.parseFloat(line.slice(colon + 1));
      if (Number.isFinite(v) && v > 0) mhz += v;
    }
  }
  const detectedCores = processors > 0 ? processors : Math.max(1, cpus().length);
  const numCores = positive(options.numCores) ?? detectedCores;
  const totalComputeMhz = positive(options.totalComputeMhz) ?? (mhz > 0 ? mhz : numCores * 1000);
  return { numCores, totalComputeMhz };
}

function positive(v: number | undefined): number | undefined {
  return v !== undefined && Number.isFinite(v) && v > 0 ? v : undefined;
}

let cachedClkTck: number | undefined;

/**
 * Kernel clock ticks per second (`getconf CLK_TCK`), the unit of utime/stime in /proc/<pid>/stat.
 * Read once per process; 100 when getconf is unavailable (the value on every mainstream Linux).
 *
 * @example
 * ```ts
 * import { clockTicksPerSecond } from "@nomadkit/server/stats";
 * const seconds = 250 / clockTicksPerSecond();
 * ```
 */
export function clockTicksPerSecond(): number {
  if (cachedClkTck !== undefined) return cachedClkTck;
  let value = 100;
  try {
    const r = spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8", timeout: 5000 });
    const n = Number.parseInt(r.stdout ?? "", 10);
    if (r.status === 0 && Number.isFinite(n) && n > 0) value = n;
  } catch {
    // keep the default
  }
  cachedClkTck = value;
  return value;
}

/**
 * CPU consumed expressed in MHz, Nomad's `CPUUsage.total_ticks`:
 * `percent / 100 * totalComputeMhz / numCores`. `percent` is relative to one core (it exceeds 100
 * when several cores are busy). This is the single implementation the SDK uses (drivers and the
 * executor alike), so both hops report the same number.
 *
 * @example
 * ```ts
 * import { hostCompute, totalTicks } from "@nomadkit/server/stats";
 * const ticks = totalTicks(150, hostCompute()); // 1.5 cores busy
 * ```
 */
export function totalTicks(percent: number, host: HostCompute): number {
  if (!Number.isFinite(percent) || percent <= 0 || host.numCores <= 0) return 0;
  return (percent / 100) * (host.totalComputeMhz / host.numCores);
}
