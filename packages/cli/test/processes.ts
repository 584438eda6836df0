// Process checks for the tests that stop the CLI with a signal or hold its streams.
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/** Whether `pid` exists (a killed child counts as gone once reaped). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Resolves once `cond()` holds; fails after 10 s. */
export async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`condition not met in 10 s: ${cond.toString()}`);
}

/** Every process below `pid`, now. */
export function descendants(pid: number): number[] {
  const kids = spawnSync("ps", ["-o", "pid=", "--ppid", String(pid)], { encoding: "utf8" })
    .stdout.split("\n")
    .map((l) => Number(l.trim()))
    .filter((n) => n > 0);
  return kids.flatMap((k) => [k, ...descendants(k)]);
}

/** Every process whose environment has `name=value` (Linux /proc; those we may read). */
export function withEnv(name: string, value: string): number[] {
  const needle = `\0${name}=${value}\0`;
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return `\0${readFileSync(`/proc/${p}/environ`, "latin1")}`.includes(needle);
      } catch {
        return false; // gone, or not ours
      }
    })
    .map(Number);
}

/** Bytes `pid` has written so far (Linux /proc/<pid>/io wchar); undefined once it is gone. */
export function bytesWritten(pid: number): number | undefined {
  try {
    return Number(/^wchar: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, "utf8"))![1]);
  } catch {
    return undefined;
  }
}

/** `pid`'s peak resident set (Linux /proc/<pid>/status VmHWM), in bytes. */
export function peakRss(pid: number): number {
  return Number(/^VmHWM:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024;
}

/**
 * Resolves with `count()` once it passes `limit`, or once it has stopped growing (the same for 25
 * samples 20 ms apart): the producer it counts is held. Not a measure of time: a busy machine only
 * makes the producer look held early, when less has been produced.
 */
export async function grownTo(count: () => number, limit: number): Promise<number> {
  let last = -1;
  for (let same = 0; same < 25; ) {
    const n = count();
    if (n > limit) return n;
    same = n === last ? same + 1 : 0;
    last = n;
    await new Promise((r) => setTimeout(r, 20));
  }
  return last;
}
