/**
 * CPU lists in the cpuset(7) "List Format" ("0-2,5"), as the kernel's cpuset files hold them and as
 * Nomad writes reserved cores (client/lib/idset): one module for reading and writing them, for the
 * task cgroup, the task config and the flags that take reserved cores.
 */

/** The highest CPU number a list may name: Nomad's core ids are 16-bit (hw.CoreID). */
export const MAX_CPU_NUMBER = 65_535;

/**
 * A cpuset list ("0-2,5", blanks around the pieces allowed, "" for none) as CPU numbers, ascending,
 * each once. Unlike Nomad's idset.Parse, which assumes a valid list and drops what it cannot read,
 * a piece that is not a number or a low-high span, or names a CPU above {@link MAX_CPU_NUMBER},
 * throws a RangeError naming it: the list may come from a person.
 *
 * @example
 * ```ts
 * parseCpuList("0-2,5"); // [0, 1, 2, 5]
 * parseCpuList("3-1"); // RangeError: "3-1" is not a CPU number or a low-high span
 * ```
 */
export function parseCpuList(text: string): number[] {
  const out = new Set<number>();
  if (text.trim() === "") return [];
  for (const piece of text.split(",")) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(piece.trim());
    const low = m ? Number(m[1]) : NaN;
    const high = m ? Number(m[2] ?? m[1]) : NaN;
    if (!(low <= high))
      throw new RangeError(
        `${JSON.stringify(piece.trim())} is not a CPU number or a low-high span`,
      );
    if (high > MAX_CPU_NUMBER)
      throw new RangeError(
        `${JSON.stringify(piece.trim())}: CPU numbers go up to ${MAX_CPU_NUMBER}`,
      );
    for (let c = low; c <= high; c++) out.add(c);
  }
  return [...out].sort((a, b) => a - b);
}

/**
 * CPU numbers as a cpuset list with ranges, ascending ("0-2,5"), as Nomad's idset writes them; ""
 * for none.
 *
 * @example
 * ```ts
 * formatCpuList([5, 0, 1, 2]); // "0-2,5"
 * ```
 */
export function formatCpuList(cpus: Iterable<number>): string {
  const sorted = [...new Set(cpus)].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length;) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    parts.push(j === i ? `${sorted[i]}` : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(",");
}

/**
 * Throws a RangeError naming `name` unless `cores` is a list of CPU numbers (whole numbers ≥ 0),
 * as reserved cores are given to the task cgroup, the task config and Nomad's job rules.
 *
 * @example
 * ```ts
 * checkCpuNumbers([0, 2]); // fine
 * checkCpuNumbers([1.5], "--cores"); // RangeError: --cores: 1.5 is not a CPU number (an integer >= 0)
 * ```
 */
export function checkCpuNumbers(cores: readonly number[], name = "cores"): void {
  if (!Array.isArray(cores)) throw new RangeError(`${name} ${String(cores)}: must be a list of CPU numbers`);
  for (const c of cores) {
    if (!Number.isSafeInteger(c) || c < 0) throw new RangeError(`${name}: ${String(c)} is not a CPU number (an integer >= 0)`);
  }
}
