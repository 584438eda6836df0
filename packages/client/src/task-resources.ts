/**
 * Nomad's rules for a task's `resources` block (structs.Resources.Validate and MeetsMinResources),
 * for tools that let a person give a task resources the way a job would: what Nomad refuses at
 * job registration is refused here, with Nomad's reason, before a task is started with it.
 */
import { checkCpuNumbers } from "./cpu-list.js";

/** A task's `resources` as a job gives them, in the units and names of `nomadTaskConfig`'s options. */
export interface TaskResources {
  /** `cpu`, in MHz. */
  cpuMhz?: number;
  /** `memory`, in MB. */
  memoryMb?: number;
  /** `memory_max`, in MB: 0 for none, -1 for no hard limit (Nomad's memoryNoLimit). */
  memoryMaxMb?: number;
  /** The reserved cores (`cores`, as the scheduler picked them): CPU numbers. */
  cores?: readonly number[];
}

/** Nomad's smallest task (structs.MinResources): 1 MHz, 10 MB. */
const MIN_CPU_MHZ = 1;
const MIN_MEMORY_MB = 10;

/**
 * Throws a RangeError, naming the option, for resources Nomad refuses in a job: a `cpu` below 1 MHz,
 * a `memory` below 10 MB, a `memory_max` other than 0 or -1 below `memory` (`memoryMb`, or
 * `defaultMemoryMb` when not given), `cores` that are not CPU numbers, and `cpu` together with
 * `cores` (Nomad: "Task can only ask for 'cpu' or 'cores' resource, not both."). Each value must be
 * a whole number. `names` gives the options' names as the caller's user knows them (flags, say);
 * by default the field names.
 *
 * @example
 * ```ts
 * checkTaskResources({ memoryMb: 256, memoryMaxMb: 128 }, { names: { memoryMaxMb: "--memory-max", memoryMb: "--memory" } });
 * // RangeError: --memory-max 128: below the task's memory, 256 MB (--memory); Nomad refuses it: ...
 * ```
 */
export function checkTaskResources(
  r: TaskResources,
  o: {
    names?: Partial<Record<keyof TaskResources, string>>;
    defaultMemoryMb?: number;
  } = {},
): void {
  const name = (k: keyof TaskResources) => o.names?.[k] ?? k;
  const whole = (
    k: "cpuMhz" | "memoryMb" | "memoryMaxMb",
    min: number,
    what: string,
  ) => {
    const v = r[k];
    if (v !== undefined && (!Number.isSafeInteger(v) || v < min))
      throw new RangeError(`${name(k)} ${String(v)}: ${what}`);
  };
  whole(
    "cpuMhz",
    MIN_CPU_MHZ,
    `must be a whole number of MHz, at least ${MIN_CPU_MHZ} (Nomad's minimum)`,
  );
  whole(
    "memoryMb",
    MIN_MEMORY_MB,
    `must be a whole number of MB, at least ${MIN_MEMORY_MB} (Nomad's minimum)`,
  );
  whole(
    "memoryMaxMb",
    -1,
    "must be a whole number of MB (0: none, -1: no hard limit)",
  );
  const memory = r.memoryMb ?? o.defaultMemoryMb;
  const max = r.memoryMaxMb;
  if (max !== undefined && max > 0 && memory !== undefined && max < memory) {
    const given = r.memoryMb === undefined ? "the default" : name("memoryMb");
    throw new RangeError(
      `${name("memoryMaxMb")} ${max}: below the task's memory, ${memory} MB (${given}); Nomad refuses it: "MemoryMaxMB value (${max}) should be larger than MemoryMB value (${memory})"`,
    );
  }
  const cores = r.cores ?? [];
  checkCpuNumbers(cores, name("cores"));
  if (cores.length > 0 && r.cpuMhz !== undefined)
    throw new RangeError(
      `${name("cpuMhz")} and ${name("cores")}: a task asks for one or the other; Nomad refuses both: "Task can only ask for 'cpu' or 'cores' resource, not both."`,
    );
}
