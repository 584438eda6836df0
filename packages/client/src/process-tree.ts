/**
 * A plugin's processes as /proc (Linux) lists them: what a host that stops a plugin hard must also
 * stop (an executor and its task outlive their plugin by design, for Nomad to recover them).
 */
import { readdirSync, readFileSync } from "node:fs";

/** What `/proc/<pid>/stat` says of a process. */
export interface ProcInfo {
  /** Its parent's pid. */
  ppid: number;
  /** Its process group. */
  pgid: number;
  /** Start time in clock ticks since boot: with the pid, it names one process (pids are reused). */
  start: number;
}

/**
 * Parent, process group and start time of `pid`; undefined when it is gone (or without `/proc`).
 *
 * @example
 * ```ts
 * const before = procInfo(pid);
 * // later: still that process, not another one given the same pid
 * if (before && procInfo(pid)?.start === before.start) process.kill(pid, "SIGKILL");
 * ```
 */
export function procInfo(pid: number): ProcInfo | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // "pid (comm) state ppid pgrp session ...": fields from the state on; starttime is field 22.
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { ppid: Number(f[1]), pgid: Number(f[2]), start: Number(f[19]) };
  } catch {
    return undefined;
  }
}

/**
 * Every live descendant of `root` (not `root` itself), with what {@link procInfo} says of it;
 * empty without `/proc`. Processes that left the tree (a daemon reparented to init) are not in it.
 *
 * @example
 * ```ts
 * for (const [pid, info] of processDescendants(plugin.pid)) console.log(pid, info.ppid);
 * ```
 */
export function processDescendants(root: number): Map<number, ProcInfo> {
  const all = new Map<number, ProcInfo>();
  let entries: string[] = [];
  try {
    entries = readdirSync("/proc");
  } catch {
    return all;
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    const info = procInfo(Number(e));
    if (info) all.set(Number(e), info);
  }
  const children = new Map<number, number[]>();
  for (const [pid, info] of all) children.set(info.ppid, [...(children.get(info.ppid) ?? []), pid]);
  const out = new Map<number, ProcInfo>();
  const todo = [...(children.get(root) ?? [])];
  while (todo.length > 0) {
    const pid = todo.pop()!;
    if (out.has(pid)) continue;
    out.set(pid, all.get(pid)!);
    todo.push(...(children.get(pid) ?? []));
  }
  return out;
}
