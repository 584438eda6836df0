// The task resources flags of `run` and `conformance`: a job's resources block, checked by Nomad's rules.
import type { Command } from "commander";
import {
  checkTaskResources,
  parseCpuList,
  type TaskResources,
} from "@nomadkit/client";
import { CliError } from "./errors.js";

/** The resource flags as commander gives them (strings; undefined when not given). */
export interface ResourceFlags {
  /** --cpu: MHz. */
  cpu?: string;
  /** --memory: MB. */
  memory?: string;
  /** --memory-max: MB, -1 for no hard limit. */
  memoryMax?: string;
  /** --cores: a cpuset list ("0-1,3"). */
  cores?: string;
}

/** Each resource's flag, for Nomad's rules to name. */
const FLAGS = {
  cpuMhz: "--cpu",
  memoryMb: "--memory",
  memoryMaxMb: "--memory-max",
  cores: "--cores",
} as const;

/**
 * Adds `--cpu`, `--memory`, `--memory-max` and `--cores` to `cmd`, a command that starts tasks;
 * `defaults` says what its tasks get without them.
 */
export function addResourceOptions(
  cmd: Command,
  defaults: { cpu: string; memory: string },
): Command {
  return cmd
    .option(
      "--cpu <mhz>",
      `the task's cpu in MHz (resources.cpu; cpu_shares, NOMAD_CPU_LIMIT); default ${defaults.cpu}; not with --cores`,
    )
    .option(
      "--memory <mb>",
      `the task's memory in MB (resources.memory; NOMAD_MEMORY_LIMIT), at least 10; default ${defaults.memory}`,
    )
    .option(
      "--memory-max <mb>",
      "the task's memory_max in MB (oversubscription: the hard limit, NOMAD_MEMORY_MAX_LIMIT), at least --memory; -1 for no hard limit",
    )
    .option(
      "--cores <cpus>",
      "CPUs the task reserves, as a cpuset list such as 0-1,3 (resources.cores, as the scheduler picked them): its own cpuset cgroup in Nomad's reserve partition, NOMAD_CPU_CORES; needs the task's cgroup (root); not with --cpu",
    );
}

/** A flag's whole number, or a CliError naming the flag. */
function wholeNumber(
  flag: string,
  value: string | undefined,
  unit: string,
): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\s*-?\d+\s*$/.test(value) || !Number.isSafeInteger(Number(value)))
    throw new CliError(
      `${flag} ${JSON.stringify(value)}: expected a whole number of ${unit}`,
    );
  return Number(value);
}

/**
 * The resources the flags give the task, refused (naming the flag) where Nomad would refuse the
 * job: see `checkTaskResources` of `@nomadkit/client`. `defaultMemoryMb` is what the task gets
 * without `--memory`, which `--memory-max` must not be below.
 */
export function parseResourceFlags(
  f: ResourceFlags,
  defaultMemoryMb: number,
): TaskResources {
  const r: TaskResources = {};
  const cpu = wholeNumber(FLAGS.cpuMhz, f.cpu, "MHz");
  if (cpu !== undefined) r.cpuMhz = cpu;
  const memory = wholeNumber(FLAGS.memoryMb, f.memory, "MB");
  if (memory !== undefined) r.memoryMb = memory;
  const memoryMax = wholeNumber(FLAGS.memoryMaxMb, f.memoryMax, "MB");
  if (memoryMax !== undefined) r.memoryMaxMb = memoryMax;
  if (f.cores !== undefined) {
    try {
      r.cores = parseCpuList(f.cores);
    } catch (err) {
      throw new CliError(
        `--cores ${JSON.stringify(f.cores)}: ${(err as Error).message} (a cpuset list such as 0-1,3)`,
      );
    }
    if (r.cores.length === 0)
      throw new CliError(
        `--cores ${JSON.stringify(f.cores)}: names no CPU (a cpuset list such as 0-1,3)`,
      );
  }
  try {
    checkTaskResources(r, { names: FLAGS, defaultMemoryMb });
  } catch (err) {
    throw new CliError((err as Error).message);
  }
  return r;
}
