/**
 * The agent settings a Nomad client hands a driver with SetConfig (`nomad_config`), for tools and
 * tests that configure plugins themselves: the port range its plugins and executors may listen on
 * and the node's CPU topology, which drivers turn into the compute behind `total_ticks`.
 */
import { readFileSync } from "node:fs";
import { cpus } from "node:os";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { NomadConfigSchema } from "@nomadkit/protocol/base";

/** Inputs of {@link nomadAgentConfig}; every one has Nomad's default. */
export interface NomadAgentConfigOptions {
  /** Lower bound of the plugin port range (Nomad's `client.min_dynamic_port` for plugins: 14000). */
  minPort?: number;
  /** Upper bound of the plugin port range (14512). */
  maxPort?: number;
  /** The operator's `cpu_total_compute` in MHz; 0 (default) for none. */
  overrideTotalComputeMhz?: number;
  /** Where the cores' cpufreq directories are read (tests); default `/sys/devices/system/cpu`. */
  sysfsCpuRoot?: string;
  /** Where the "cpu MHz" lines are read (tests); default `/proc/cpuinfo`. */
  cpuinfoPath?: string;
}

/** A core's speed where nothing tells it (Nomad's numalib fallback). */
const FALLBACK_MHZ = 1000;

/** One core's speeds in MHz, as Nomad's numalib fills them. */
interface CoreSpeeds {
  baseSpeed: bigint;
  maxSpeed: bigint;
  guessSpeed: bigint;
}

/** A cpufreq value of core `i` (kHz in sysfs) in MHz; 0 when there is none (a VM without cpufreq). */
function cpufreqMhz(root: string, i: number, file: string): bigint {
  try {
    const khz = Number(readFileSync(`${root}/cpu${i}/cpufreq/${file}`, "utf8").trim());
    return khz > 0 ? BigInt(Math.round(khz / 1000)) : 0n;
  } catch {
    return 0n;
  }
}

/** The average of /proc/cpuinfo's "cpu MHz" lines; 0 when it has none (ARM) or cannot be read. */
function cpuinfoAverageMhz(path: string): bigint {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return 0n;
  }
  const mhz = [...text.matchAll(/^cpu MHz\s*:\s*([\d.]+)/gm)].map((m) => Number(m[1])).filter((v) => v > 0);
  return mhz.length > 0 ? BigInt(Math.round(mhz.reduce((a, b) => a + b, 0) / mhz.length)) : 0n;
}

/**
 * This machine's cores as Nomad's numalib reads them on Linux: base and max speed from each core's
 * cpufreq (`base_frequency`, `cpuinfo_max_freq`), and on every core the guess: the average "cpu MHz"
 * of /proc/cpuinfo; the fallback 1000 MHz only where none of the three is known.
 */
function coreSpeeds(o: NomadAgentConfigOptions): CoreSpeeds[] {
  const root = o.sysfsCpuRoot ?? "/sys/devices/system/cpu";
  const guess = cpuinfoAverageMhz(o.cpuinfoPath ?? "/proc/cpuinfo");
  return cpus().map((_, i) => {
    const baseSpeed = cpufreqMhz(root, i, "base_frequency");
    const maxSpeed = cpufreqMhz(root, i, "cpuinfo_max_freq");
    const known = baseSpeed > 0n || maxSpeed > 0n || guess > 0n;
    return { baseSpeed, maxSpeed, guessSpeed: known ? guess : BigInt(FALLBACK_MHZ) };
  });
}

/** A core's speed as Nomad's `Core.MHz()` takes it: base, else max, else the guess. */
function coreMhz(c: CoreSpeeds): number {
  return Number(c.baseSpeed > 0n ? c.baseSpeed : c.maxSpeed > 0n ? c.maxSpeed : c.guessSpeed);
}

/**
 * SetConfig's `nomad_config` as a Nomad client sends it: the plugin port range and this machine's
 * cores as the node topology (one socket and NUMA node; each core's base and max speed from its
 * cpufreq and the guess from /proc/cpuinfo, as Nomad's numalib reads them).
 *
 * @example
 * ```ts
 * import { nomadAgentConfig } from "@nomadkit/client";
 * await plugin.basePlugin.setConfig({ msgpackConfig, pluginApiVersion: "v0.1.0", nomadConfig: nomadAgentConfig() });
 * ```
 */
export function nomadAgentConfig(o: NomadAgentConfigOptions = {}): MessageInitShape<typeof NomadConfigSchema> {
  return {
    driver: {
      ClientMinPort: o.minPort ?? 14000,
      ClientMaxPort: o.maxPort ?? 14512,
      Topology: {
        nodeIds: [0],
        cores: coreSpeeds(o).map((speeds, i) => ({ socketId: 0, nodeId: 0, coreId: i, ...speeds })),
        overrideTotalCompute: BigInt(o.overrideTotalComputeMhz ?? 0),
      },
    },
  };
}

/** The node's total compute in MHz, as {@link nomadAgentConfig} describes it: what PercentTicks divides by. */
export function nodeTotalComputeMhz(o: Pick<NomadAgentConfigOptions, "overrideTotalComputeMhz" | "sysfsCpuRoot" | "cpuinfoPath"> = {}): number {
  if (o.overrideTotalComputeMhz) return o.overrideTotalComputeMhz;
  return coreSpeeds(o).reduce((sum, c) => sum + coreMhz(c), 0);
}
