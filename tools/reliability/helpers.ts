// Shared helpers of the reliability suite (tools/test/reliability-*.test.ts): the fixture plugins,
// /proc inspection (children, zombies, CPU time), a seeded RNG, bounded polling, a concurrency pool
// and log collection. Synchronisation is by log lines, messages and /proc state, never by sleeping.
import { randomUUID } from "node:crypto";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { encode } from "@msgpack/msgpack";
import {
  createTaskCgroup,
  createTaskDirs,
  launchPlugin,
  nomadTaskConfig,
  TaskCgroupUnavailableError,
  type LaunchPluginOptions,
  type PluginClient,
  type PluginLogEntry,
  type TaskCgroup,
} from "@nomadkit/client";

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, "../..");
export const fixture = (name: string): string => join(here, "fixtures", name);
/** The reference driver's plugin binary. */
export const rawexecBin = join(repoRoot, "examples/rawexec-driver/bin/nomadkit-rawexec");

export const NOMAD_COOKIE = {
  NOMAD_PLUGIN_MAGIC_COOKIE: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
};

/** Deterministic 32-bit PRNG (mulberry32): every "random" choice in the suite comes from a seed. */
export function rng(seed: number): { next(): number; int(lo: number, hi: number): number; bytes(n: number): Buffer } {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    /** Integer in [lo, hi]. */
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    bytes(n) {
      const b = Buffer.allocUnsafe(n);
      let i = 0;
      for (; i + 4 <= n; i += 4) b.writeUInt32LE((next() * 4294967296) >>> 0, i);
      for (; i < n; i++) b[i] = (next() * 256) & 0xff;
      return b;
    },
  };
}

/** Fields of /proc/<pid>/stat we use; undefined when the process does not exist (any more). */
export interface ProcStat {
  pid: number;
  state: string;
  ppid: number;
  /** utime + stime, in clock ticks. */
  cpuTicks: number;
}

export function procStat(pid: number): ProcStat | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // comm may contain spaces and parentheses: split after the last ')'.
  const rest = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return { pid, state: rest[0]!, ppid: Number(rest[1]), cpuTicks: Number(rest[11]) + Number(rest[12]) };
}

/** Every process on the machine (pid, ppid, state). */
export function allProcs(): ProcStat[] {
  const out: ProcStat[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    const s = procStat(Number(e));
    if (s) out.push(s);
  }
  return out;
}

/** Direct children of `pid`. */
export function childrenOf(pid: number): ProcStat[] {
  return allProcs().filter((p) => p.ppid === pid);
}

/** All descendants of `pid` (children, grandchildren, ...). */
export function descendantsOf(pid: number): ProcStat[] {
  const procs = allProcs();
  const out: ProcStat[] = [];
  const frontier = [pid];
  while (frontier.length > 0) {
    const p = frontier.pop()!;
    for (const c of procs) {
      if (c.ppid === p) {
        out.push(c);
        frontier.push(c.pid);
      }
    }
  }
  return out;
}

/** Zombie children of this (the test) process. */
export function ownZombies(): ProcStat[] {
  return childrenOf(process.pid).filter((p) => p.state === "Z");
}

/**
 * Poll `cond` (every 20 ms) until it holds; throws naming `what` after `limitMs` (a generous bound
 * so a failure reports itself instead of hitting the test timeout). Not a timing assertion.
 */
export async function until(
  what: string,
  cond: () => boolean | Promise<boolean>,
  state?: () => unknown,
  limitMs = 60_000,
): Promise<void> {
  const started = Date.now();
  for (;;) {
    if (await cond()) return;
    if (Date.now() - started > limitMs) {
      const now = state === undefined ? "" : `; now: ${JSON.stringify(await state())}`;
      throw new Error(`still waiting after ${limitMs} ms: ${what}${now}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Run `fn` over `items` with at most `n` in flight; resolves with the results in order. */
export async function pool<T, R>(n: number, items: readonly T[], fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      results[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
  return results;
}

/** Collects a plugin's parsed hclog lines (launchPlugin's `logger`) and lets tests wait for one. */
export class LogSink {
  readonly entries: PluginLogEntry[] = [];
  #waiters: { match: (e: PluginLogEntry) => boolean; resolve: (e: PluginLogEntry) => void }[] = [];

  readonly logger = (e: PluginLogEntry): void => {
    this.entries.push(e);
    this.#waiters = this.#waiters.filter((w) => {
      if (!w.match(e)) return true;
      w.resolve(e);
      return false;
    });
  };

  waitFor(match: (e: PluginLogEntry) => boolean): Promise<PluginLogEntry> {
    const found = this.entries.find(match);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => this.#waiters.push({ match, resolve }));
  }

  /** Entries at error level (or worse), formatted for an assertion message. */
  errors(): string[] {
    return this.entries.filter((e) => e.level === "error").map((e) => `${e.module ?? ""} ${e.message} ${JSON.stringify(e.fields)}`);
  }
}

/** Launch the reliability fixture driver (`fixtures/rel-driver.mjs`) the way Nomad does. */
export async function launchRelDriver(
  env: Record<string, string> = {},
  options: LaunchPluginOptions = {},
): Promise<{ plugin: PluginClient; logs: LogSink }> {
  const logs = new LogSink();
  const plugin = await launchPlugin(process.execPath, [fixture("rel-driver.mjs")], {
    startTimeoutMs: 120_000,
    ...options,
    env: { NOMADKIT_LOG_LEVEL: "debug", ...env, ...options.env },
    logger: (e) => {
      logs.logger(e);
      options.logger?.(e);
    },
  });
  return { plugin, logs };
}

/** Counts of `process.getActiveResourcesInfo()` by kind. */
export function resourceCounts(list: readonly string[] = process.getActiveResourcesInfo()): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of list) out[r] = (out[r] ?? 0) + 1;
  return out;
}

/** Whether `now` has no more of any resource kind than `base`. */
export function withinBaseline(now: Record<string, number>, base: Record<string, number>): boolean {
  return Object.entries(now).every(([k, v]) => v <= (base[k] ?? 0));
}


/** Records unhandled rejections of this process while installed. */
export function recordUnhandledRejections(): { readonly seen: unknown[]; uninstall(): void } {
  const seen: unknown[] = [];
  const onRejection = (reason: unknown) => seen.push(reason);
  process.on("unhandledRejection", onRejection);
  return { seen, uninstall: () => process.off("unhandledRejection", onRejection) };
}

/** Whether this host can make task cgroups (root, a writable cgroupfs); probed once. */
let canMakeCgroups: boolean | undefined;

/** The task's cgroup as Nomad's client makes one for every task, where this host can make it. */
function taskCgroup(allocId: string, task: string): TaskCgroup | undefined {
  if (canMakeCgroups === false) return undefined;
  try {
    const cg = createTaskCgroup({ allocId, task, parent: `nomadkit-test-${process.pid}` });
    canMakeCgroups = true;
    return cg;
  } catch (err) {
    if (!(err instanceof TaskCgroupUnavailableError)) throw err;
    canMakeCgroups = false;
    return undefined;
  }
}

/**
 * A Nomad-like allocation/task layout for the reference driver, with the task's cgroup where the
 * host can make one (as Nomad's client does); `cleanup` removes both (whatever is left in the cgroup is killed).
 */
export function rawexecTask(
  driverConfig: { command: string; args?: string[] },
  extra: { user?: string; name?: string } = {},
): { config: ReturnType<typeof nomadTaskConfig>; id: string; allocDir: string; cgroup: TaskCgroup | undefined; cleanup(): Promise<void> } {
  const root = mkdtempSync(join(tmpdir(), "nk-rel-alloc-"));
  // A task user must be able to reach its task directory.
  chmodSync(root, 0o755);
  const name = extra.name ?? "task";
  const allocId = randomUUID();
  const dirs = createTaskDirs(join(root, allocId), name);
  const cgroup = taskCgroup(allocId, name);
  const config = nomadTaskConfig({
    name,
    dirs,
    allocId,
    cpusetCgroup: cgroup?.path,
    cgroupParent: cgroup?.parent,
    msgpackDriverConfig: encode({ args: [], ...driverConfig }),
    stdoutPath: join(dirs.logsDir, `${name}.stdout.0`),
    stderrPath: join(dirs.logsDir, `${name}.stderr.0`),
    user: extra.user ?? "",
  });
  return {
    config,
    id: config.id,
    allocDir: dirs.allocDir,
    cgroup,
    async cleanup() {
      try {
        await cgroup?.destroy();
      } finally {
        rmSync(root, { recursive: true, force: true });
      }
    },
  };
}

/** Launch the reference driver binary as Nomad does (launchPlugin, SetConfig, Init). */
export async function launchRawexec(): Promise<{ plugin: PluginClient; logs: LogSink }> {
  const logs = new LogSink();
  const plugin = await launchPlugin(rawexecBin, [], { logger: logs.logger, startTimeoutMs: 120_000 });
  await plugin.basePlugin.setConfig({ msgpackConfig: encode({ create_network: false }) });
  await plugin.driver.init({});
  return { plugin, logs };
}
