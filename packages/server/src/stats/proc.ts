import { readFile, readdir } from "node:fs/promises";

/** The fields of /proc/<pid>/stat the SDK uses. Times are in clock ticks (see `clockTicksPerSecond`). */
export interface ProcStat {
  /** Process id. */
  pid: number;
  /** Parent pid. */
  ppid: number;
  /** Executable name, without the parentheses. */
  comm: string;
  /** One-letter state (R, S, Z, ...). */
  state: string;
  /** CPU time in user mode, clock ticks. */
  utime: number;
  /** CPU time in kernel mode, clock ticks. */
  stime: number;
  /** Start time after boot, clock ticks; with pid it identifies a process across pid reuse. */
  starttime: number;
}

/** Resident and swapped memory of one process, in bytes. */
export interface ProcMemory {
  /** Resident set size (VmRSS), bytes. */
  rss: bigint;
  /** Undefined when the kernel does not report VmSwap although it reports the process's memory. */
  swap: bigint | undefined;
}

/** A /proc/<pid>/stat reading and when it was read. */
export interface TimedProcStat {
  stat: ProcStat;
  /** Monotonic seconds taken right after the read: the time the CPU counters are from. */
  at: number;
}

/** Monotonic clock in seconds, the clock of {@link TimedProcStat.at}. */
export function monotonicSeconds(): number {
  return Number(process.hrtime.bigint()) / 1e9;
}

/**
 * Parses the text of /proc/<pid>/stat. The command name may contain spaces and parentheses, so
 * the fields are located from the LAST `)`.
 *
 * @example
 * ```ts
 * import { parseProcStat } from "@nomadkit/server/stats";
 * parseProcStat("42 (sh) S 1 42 42 0 -1 4194560 1 0 0 0 7 3 0 0 20 0 1 0 1234 0 0");
 * ```
 */
export function parseProcStat(text: string): ProcStat | undefined {
  const open = text.indexOf("(");
  const close = text.lastIndexOf(")");
  if (open < 0 || close < open) return undefined;
  const pid = Number.parseInt(text.slice(0, open), 10);
  // Field N of proc(5) (1-based) is rest[N - 3].
  const rest = text.slice(close + 2).trim().split(/\s+/);
  if (!Number.isFinite(pid) || rest.length < 20) return undefined;
  return {
    pid,
    comm: text.slice(open + 1, close),
    state: rest[0]!,
    ppid: Number(rest[1]),
    utime: Number(rest[11]),
    stime: Number(rest[12]),
    starttime: Number(rest[19]),
  };
}

/**
 * Reads /proc/<pid>/stat; undefined when the process does not exist (any more).
 *
 * @example
 * ```ts
 * import { readProcStat } from "@nomadkit/server/stats";
 * const self = await readProcStat(process.pid);
 * ```
 */
export async function readProcStat(pid: number, procRoot = "/proc"): Promise<ProcStat | undefined> {
  return (await readProcStatTimed(pid, procRoot))?.stat;
}

/** {@link readProcStat}, timestamped right after the read (so a slow scan does not skew CPU rates). */
export async function readProcStatTimed(pid: number, procRoot = "/proc"): Promise<TimedProcStat | undefined> {
  let text: string;
  try {
    text = await readFile(`${procRoot}/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  const at = monotonicSeconds();
  const stat = parseProcStat(text);
  return stat && { stat, at };
}

/**
 * Reads VmRSS and VmSwap from /proc/<pid>/status; undefined when the process is gone.
 * A process without memory of its own (a zombie, a kernel thread) has neither line and reads as
 * zero RSS and zero swap.
 *
 * @example
 * ```ts
 * import { readProcMemory } from "@nomadkit/server/stats";
 * const mem = await readProcMemory(process.pid); // { rss: 52428800n, swap: 0n }
 * ```
 */
export async function readProcMemory(pid: number, procRoot = "/proc"): Promise<ProcMemory | undefined> {
  let text: string;
  try {
    text = await readFile(`${procRoot}/${pid}/status`, "utf8");
  } catch {
    return undefined;
  }
  let rss: bigint | undefined;
  let swap: bigint | undefined;
  for (const line of text.split("\n")) {
    if (line.startsWith("VmRSS:")) rss = kib(line);
    else if (line.startsWith("VmSwap:")) swap = kib(line);
  }
  // No VmRSS either: no address space, so nothing swapped (not "swap unknown").
  if (rss === undefined) return { rss: 0n, swap: swap ?? 0n };
  return { rss, swap };
}

function kib(line: string): bigint {
  const m = /(\d+)\s*kB/.exec(line);
  return m ? BigInt(m[1]!) * 1024n : 0n;
}

/**
 * Every live process of the host as /proc/<pid>/stat, keyed by pid. Processes that exit during
 * the scan are skipped.
 *
 * @example
 * ```ts
 * import { readAllProcStats } from "@nomadkit/server/stats";
 * const zombies = [...(await readAllProcStats()).values()].filter((p) => p.state === "Z");
 * ```
 */
export async function readAllProcStats(procRoot = "/proc"): Promise<Map<number, ProcStat>> {
  const out = new Map<number, ProcStat>();
  for (const [pid, t] of await readAllProcStatsTimed(procRoot)) out.set(pid, t.stat);
  return out;
}

/**
 * Reads at once. Every read holds a descriptor: all of a busy host's processes at once would hit
 * the open-files limit (EMFILE), and those reads would pass for processes that exited, the task's
 * own among them.
 */
const PROC_SCAN_CONCURRENCY = 64;

async function readAllProcStatsTimed(procRoot: string): Promise<Map<number, TimedProcStat>> {
  const pids = (await readdir(procRoot)).filter((n) => /^\d+$/.test(n)).map(Number);
  const stats: (TimedProcStat | undefined)[] = new Array(pids.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < pids.length) {
      const i = next++;
      stats[i] = await readProcStatTimed(pids[i]!, procRoot);
    }
  };
  await Promise.all(Array.from({ length: Math.min(PROC_SCAN_CONCURRENCY, pids.length) }, worker));
  // In /proc's order, as before.
  const out = new Map<number, TimedProcStat>();
  for (const s of stats) if (s) out.set(s.stat.pid, s);
  return out;
}

/**
 * The process tree rooted at `rootPid`: the root first, then every descendant (children,
 * grandchildren, ...), found through the ppid links of /proc/<pid>/stat. Empty when the root is gone.
 *
 * @example
 * ```ts
 * import { processTree } from "@nomadkit/server/stats";
 * const tree = await processTree(task.pid);
 * console.log(tree.map((p) => `${p.pid} ${p.comm}`));
 * ```
 */
export async function processTree(rootPid: number, procRoot = "/proc"): Promise<ProcStat[]> {
  return (await processTreeTimed(rootPid, procRoot)).map((t) => t.stat);
}

/** {@link processTree}, each process with the time its stat was read. */
export async function processTreeTimed(rootPid: number, procRoot = "/proc"): Promise<TimedProcStat[]> {
  const all = await readAllProcStatsTimed(procRoot);
  const root = all.get(rootPid);
  if (!root) return [];
  const children = new Map<number, TimedProcStat[]>();
  for (const t of all.values()) {
    if (t.stat.pid === rootPid) continue;
    let list = children.get(t.stat.ppid);
    if (!list) children.set(t.stat.ppid, (list = []));
    list.push(t);
  }
  const out: TimedProcStat[] = [root];
  for (let i = 0; i < out.length; i++) {
    for (const c of children.get(out[i]!.stat.pid) ?? []) out.push(c);
  }
  return out;
}

/**
 * Seconds since boot, from /proc/uptime (the clock of `ProcStat.starttime`).
 *
 * @example
 * ```ts
 * import { clockTicksPerSecond, readProcStat, readUptimeSeconds } from "@nomadkit/server/stats";
 * const age = (await readUptimeSeconds()) - (await readProcStat(pid))!.starttime / clockTicksPerSecond();
 * ```
 */
export async function readUptimeSeconds(procRoot = "/proc"): Promise<number> {
  const text = await readFile(`${procRoot}/uptime`, "utf8");
  return Number.parseFloat(text);
}
