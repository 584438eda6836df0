// Small helpers shared by the benchmark: sizes, statistics, /proc memory, timing.
import { readFileSync } from "node:fs";

const UNITS = { "": 1, b: 1, k: 1e3, kb: 1e3, kib: 1024, m: 1e6, mb: 1e6, mib: 1024 ** 2, g: 1e9, gb: 1e9, gib: 1024 ** 3 };

/** Parses "1GiB", "4MiB", "512k", "1G" (G = GiB, as head -c reads it) or a plain byte count. */
export function parseSize(text, flag = "size") {
  const m = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(String(text).trim());
  let unit = m?.[2].toLowerCase();
  // head(1) style single letters are binary units.
  if (unit === "k" || unit === "m" || unit === "g") unit += "ib";
  const mult = unit === undefined ? undefined : UNITS[unit];
  if (!m || mult === undefined) throw new Error(`${flag} ${JSON.stringify(text)}: expected a size like 1GiB, 64MiB or 4096`);
  const n = Math.round(Number(m[1]) * mult);
  if (!(n > 0)) throw new Error(`${flag} ${JSON.stringify(text)}: must be positive`);
  return n;
}

export const MiB = 1024 * 1024;

/** "1.0 GiB", "64.0 MiB", "512 B". */
export function fmtBytes(n) {
  if (n >= 1024 ** 3) return `${(n / 1024 ** 3).toFixed(1)} GiB`;
  if (n >= MiB) return `${(n / MiB).toFixed(1)} MiB`;
  if (n >= 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${n} B`;
}

export function median(values) {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** VmRSS and VmHWM of a process in bytes, from /proc/<pid>/status; undefined once it is gone. */
export function procMemory(pid) {
  let text;
  try {
    text = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return undefined;
  }
  return { rss: kbField(text, "VmRSS"), hwm: kbField(text, "VmHWM") };
}

/** Private_Clean + Private_Dirty of a process in bytes (/proc/<pid>/smaps_rollup): what its exit gives back. */
export function privateMemory(pid) {
  const text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  return kbField(text, "Private_Clean") + kbField(text, "Private_Dirty");
}

/** A "<key>: <n> kB" line of a /proc file, in bytes. */
function kbField(text, key) {
  return Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? NaN) * 1024;
}

/** Sum of VmRSS over `pids` (gone processes count 0). */
export function rssOf(pids) {
  let sum = 0;
  for (const pid of pids) sum += procMemory(pid)?.rss ?? 0;
  return sum;
}

/**
 * Samples the summed RSS of `pids()` every `intervalMs` until stopped; `stop()` returns the peak
 * and the sample count.
 */
export function rssSampler(pids, intervalMs = 10) {
  let peak = 0;
  let samples = 0;
  /** Peak of each process on its own, by pid. */
  const peakByPid = {};
  const tick = () => {
    let v = 0;
    for (const pid of pids()) {
      const r = rssOf([pid]);
      v += r;
      if (r > (peakByPid[pid] ?? 0)) peakByPid[pid] = r;
    }
    samples++;
    if (v > peak) peak = v;
  };
  tick();
  const timer = setInterval(tick, intervalMs);
  return {
    stop() {
      clearInterval(timer);
      tick();
      return { peak, samples, peakByPid };
    },
  };
}

/** Wall time of `fn` in ms (high resolution). */
export async function timeMs(fn) {
  const t0 = process.hrtime.bigint();
  const value = await fn();
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, value };
}

/** CPU seconds (user + system) a process has used, from /proc/<pid>/stat (100 ticks/s). */
export function cpuSeconds(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return 0;
  }
}

/** Starts counting the CPU time of `pids`; the function returned gives the seconds since, in all and per process. */
export function cpuMeter(pids) {
  const start = pids.map(cpuSeconds);
  return () => {
    const byProcess = pids.map((p, i) => cpuSeconds(p) - start[i]);
    return { seconds: byProcess.reduce((a, b) => a + b, 0), byProcess };
  };
}
