// One running task: its executor connection, the pending Wait, and a stats feed. The task process
// belongs to the executor, not to this plugin, so everything here can be rebuilt after a restart
// from the reattach info kept in the task handle.
import { readFileSync } from "node:fs";
import { isProcessAlive, type ExecutorHandle } from "@nomadkit/server/executor";
import { parseProcStat } from "@nomadkit/server/stats";
import type { TaskExit } from "@nomadkit/server";

type StatsResponse = ReturnType<ExecutorHandle["client"]["stats"]> extends AsyncIterable<infer R> ? R : never;
/** A TaskStats message as the executor sends it (total_ticks included). */
type ExecutorStats = NonNullable<StatsResponse["stats"]>;

/** What the plugin keeps in `TaskHandle.driver_state` next to the executor's reattach info. */
export interface RawExecState {
  /** When the task was started (ISO 8601); survives restarts so InspectTask keeps reporting it. */
  startedAt: string;
  /** The task process id. */
  pid: number;
  /**
   * When the kernel started that process (`/proc/<pid>/stat` starttime, clock ticks since boot):
   * with the pid, what tells the task from a later process that got the same pid. Absent in
   * states from before it was recorded.
   */
  pidStart?: number;
}

/** A process's start time as `/proc/<pid>/stat` has it (starttime); undefined when it is gone. */
export function processStart(pid: number): number | undefined {
  if (pid <= 0) return undefined;
  try {
    return parseProcStat(readFileSync(`/proc/${pid}/stat`, "latin1"))?.starttime;
  } catch {
    return undefined;
  }
}

/**
 * SIGKILLs the task process and its process group when its executor is gone (the task would
 * otherwise run on, unsupervised, while Nomad starts it again elsewhere), provided the process is
 * still the task: the pid's start time is the one recorded at launch, and its environment names
 * the task's allocation. A reused pid, a sibling task's process included, is left alone, and so
 * is any pid of a state without a start time (Nomad's raw_exec kills nothing here). Returns
 * whether it was killed.
 *
 * @example
 * ```ts
 * if (!isProcessAlive(exe.pid)) killOrphanedTask(state, task.allocId);
 * ```
 */
export function killOrphanedTask(state: Pick<RawExecState, "pid" | "pidStart">, allocId: string): boolean {
  const { pid } = state;
  if (pid <= 0 || allocId === "" || state.pidStart === undefined) return false;
  if (processStart(pid) !== state.pidStart) return false;
  let environ: string;
  try {
    environ = readFileSync(`/proc/${pid}/environ`, "latin1");
  } catch {
    return false; // gone, or not ours to read
  }
  if (!environ.split("\0").includes(`NOMAD_ALLOC_ID=${allocId}`)) return false;
  try {
    process.kill(-pid, "SIGKILL"); // the executor starts each task as a process group leader
  } catch {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      return false;
    }
  }
  return true;
}

/**
 * SIGKILLs a task's executor that runs on but cannot be reached (its socket removed, hung) when a
 * recovery gave up on it: it would otherwise stay, serving nothing, for as long as the host runs,
 * whether its task still runs or not. Only the process whose command line is the executor this
 * driver launched for the task: its config names the task's own `logFile`. Returns whether it was killed.
 *
 * @example
 * ```ts
 * killUnreachableExecutor(executor.pid, join(task.allocDir, task.name, "executor.out"));
 * ```
 */
export function killUnreachableExecutor(pid: number, logFile: string): boolean {
  if (pid <= 1) return false;
  let config: { logFile?: unknown } | undefined;
  try {
    const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
    config = JSON.parse(args[args.length - 1] ?? "") as { logFile?: unknown };
  } catch {
    return false; // gone, or not a process of ours
  }
  if (config?.logFile !== logFile) return false;
  try {
    process.kill(pid, "SIGKILL");
    return true;
  } catch {
    return false;
  }
}

/**
 * One executor Stats stream, opened with one `collection_interval` (the executor averages CPU over
 * it, as Nomad's raw_exec passes its interval to executor.Stats), shared by the TaskStats streams
 * with that interval: a stream (told apart by its call's signal) gets the newest sample it has not
 * seen, or waits for the next.
 */
class StatsFeed {
  private latest: ExecutorStats | undefined;
  /** Number of the latest sample; 0 before the first. */
  private seq = 0;
  /** The number of the last sample each stream got. */
  private readonly seen = new WeakMap<AbortSignal, number>();
  /** The streams reading this feed; it closes when the last one ends. */
  readonly readers = new Set<AbortSignal>();
  private error: unknown;
  private running = false;
  private wakeups: (() => void)[] = [];
  private stop = new AbortController();

  constructor(
    private readonly exe: ExecutorHandle,
    readonly intervalMs: number,
  ) {}

  private wake(): void {
    const w = this.wakeups;
    this.wakeups = [];
    for (const fn of w) fn();
  }

  private start(): void {
    if (this.running || this.stop.signal.aborted) return;
    this.running = true;
    this.error = undefined;
    void (async () => {
      try {
        const req = { interval: BigInt(Math.round(this.intervalMs * 1e6)) };
        for await (const r of this.exe.client.stats(req, { signal: this.stop.signal })) {
          if (!r.stats) continue;
          this.latest = r.stats;
          this.seq++;
          this.wake();
        }
      } catch (err) {
        if (!this.stop.signal.aborted) this.error = err;
      } finally {
        this.running = false;
        this.wake();
      }
    })();
  }

  /**
   * The next sample for the stream whose call `signal` belongs to, undefined once the task has
   * exited; rejects when the executor cannot deliver one or `signal` aborts.
   */
  async next(signal: AbortSignal): Promise<ExecutorStats | undefined> {
    for (;;) {
      if (this.latest !== undefined && (this.seen.get(signal) ?? 0) < this.seq) {
        this.seen.set(signal, this.seq);
        return this.latest;
      }
      if (this.error !== undefined) {
        const err = this.error;
        this.error = undefined;
        throw err;
      }
      if (this.stop.signal.aborted) return undefined; // the task exited: the stream ends
      this.start();
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => reject(signal.reason);
        if (signal.aborted) return onAbort();
        signal.addEventListener("abort", onAbort, { once: true });
        this.wakeups.push(() => {
          signal.removeEventListener("abort", onAbort);
          resolve();
        });
      });
    }
  }

  close(): void {
    this.stop.abort();
    this.wake();
  }
}

/**
 * The task's stats feeds, one per `collection_interval` in use. A feed's executor stream is closed
 * when the last TaskStats stream reading it ends, so an interval nobody asks for any more is not
 * sampled on.
 */
class TaskStatsFeeds {
  private readonly feeds = new Map<number, StatsFeed>();
  private closed = false;

  constructor(private readonly exe: ExecutorHandle) {}

  /**
   * The next sample for the TaskStats stream of `signal`, from the executor stream with `intervalMs`;
   * undefined once the task has exited (Nomad's drivers end the stream then: their executor is gone).
   */
  next(intervalMs: number, signal: AbortSignal): Promise<ExecutorStats | undefined> {
    if (this.closed) return Promise.resolve(undefined);
    let feed = this.feeds.get(intervalMs);
    if (feed === undefined) this.feeds.set(intervalMs, (feed = new StatsFeed(this.exe, intervalMs)));
    if (!feed.readers.has(signal) && !signal.aborted) {
      const f = feed;
      f.readers.add(signal);
      signal.addEventListener(
        "abort",
        () => {
          f.readers.delete(signal);
          if (f.readers.size > 0 || this.feeds.get(intervalMs) !== f) return;
          this.feeds.delete(intervalMs);
          f.close();
        },
        { once: true },
      );
    }
    return feed.next(signal);
  }

  close(): void {
    this.closed = true;
    for (const f of this.feeds.values()) f.close();
    this.feeds.clear();
  }
}

/** A task supervised by an executor process. */
export class RawExecTask {
  /** Set once the executor reported the exit. */
  exit: (TaskExit & { at: Date }) | undefined;
  /** Resolves with the exit (never rejects). */
  readonly exited: Promise<TaskExit>;
  readonly stats: TaskStatsFeeds;
  /** When the task started (from its state, so also after a recover); parsed once, InspectTask reads it. */
  readonly startedAt: Date;

  constructor(
    readonly id: string,
    readonly exe: ExecutorHandle,
    readonly state: RawExecState,
    /** The task's allocation: how its process is told from a reused pid (see killOrphanedTask). */
    readonly allocId: string,
  ) {
    this.stats = new TaskStatsFeeds(exe);
    this.startedAt = new Date(state.startedAt);
    // One long Wait per task: the executor answers it when the process ends, so the result is
    // captured while the executor is still there to tell it.
    const ended = exe.client.wait({}).then(
      (r) => {
        const exit: TaskExit = { exitCode: r.process?.exitCode ?? 0, signal: r.process?.signal ?? 0, oomKilled: r.process?.oomKilled ?? false };
        // When the process exited as the executor saw it (Nomad: ProcessState.Time), not when this
        // plugin heard of it, which after a restart is the re-attach.
        const t = r.process?.time;
        return { exit, at: t ? new Date(Number(t.seconds) * 1000 + t.nanos / 1e6) : new Date() };
      },
      (err: unknown) => {
        // We let go of the executor (plugin shutdown, destroy): the task runs on, or its end was
        // already reported. There is no exit to report; the next plugin waits again.
        if (this.detached) return new Promise<never>(() => {});
        // An executor that died leaves its task running: end it, so the exit reported is true.
        const killed = !isProcessAlive(exe.pid) && killOrphanedTask(state, allocId);
        const exit: TaskExit = {
          exitCode: 1,
          err: `executor: error waiting on the task process: ${(err as Error).message}${killed ? ` (the executor is gone; its task, pid ${state.pid}, was killed)` : ""}`,
        };
        return { exit, at: new Date() };
      },
    );
    this.exited = ended.then((e) => e.exit);
    void ended.then((e) => {
      this.exit = { ...e.exit, at: e.at };
      this.stats.close();
    });
  }

  /** Set by detach(): a Wait that fails after it is our own doing, not the task's end. */
  private detached = false;

  /** Drops the connection to the executor; the executor and the task keep running. */
  detach(): void {
    this.detached = true;
    this.stats.close();
    this.exe.close();
  }
}
