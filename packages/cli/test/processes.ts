// Process checks for the tests that stop the CLI with a signal.
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
