// One running task: its executor connection, the pending Wait, and its stats feed. The task process
// belongs to the executor, not to this plugin, so everything here can be rebuilt after a restart
// from the reattach info kept in the task handle.
import { readFileSync } from "node:fs";
import { ExecutorStatsFeed, TaskCgroups, isProcessAlive, type ExecutorHandle } from "@nomadkit/server/executor";
import { parseProcStat } from "@nomadkit/server/stats";
import type { TaskExit } from "@nomadkit/server";

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
  /**
   * The host's boot (`/proc/sys/kernel/random/boot_id`) the task was started in: a start time counts
   * from boot, so only within the same boot do pid and start time name one process. Absent in
   * states from before it was recorded.
   */
  bootId?: string;
  /**
   * The task's cgroups as its executor was asked to find them: what ends the task's processes
   * outside its process group (exec'd commands, children in sessions of their own) when the
   * executor, which would have, is gone. Absent when the task has none, and in states from
   * before they were recorded.
   */
  cgroups?: RawExecCgroups;
}

/** Where a task's cgroups are, as its LaunchRequest and environment named them. */
export interface RawExecCgroups {
  cgroupV2Override?: string;
  cgroupV1Override?: Record<string, string>;
  /** `resources.linux_resources.cpuset_cgroup`: the cgroup Nomad's client made. */
  cpusetCgroup?: string;
  /** The task's `NOMAD_TASK_NAME` (on cgroup v1 its freezer, cpu and memory cgroups are named by it). */
  taskName?: string;
}

/**
 * The driver's part of a `driver_state`, checked field by field (for `decodeExecutorState`), in
 * every shape a build of this driver wrote: `pidStart` absent (before it was recorded), a string of
 * digits (the builds that first recorded it), or a number. Anything else is refused through
 * `invalid`, naming the field. Unknown fields are ignored (a later build may add some).
 *
 * @example
 * ```ts
 * const { executor, driver } = decodeExecutorState(driverState, parseRawExecState);
 * ```
 */
export function parseRawExecState(value: unknown, invalid: (field: string, problem: string) => never): RawExecState {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return invalid("", `must be an object, not ${JSON.stringify(value)}`);
  const v = value as Record<string, unknown>;
  if (typeof v.startedAt !== "string" || Number.isNaN(Date.parse(v.startedAt))) invalid("startedAt", `must be a time (ISO 8601), not ${JSON.stringify(v.startedAt)}`);
  if (!Number.isSafeInteger(v.pid) || (v.pid as number) < 0) invalid("pid", `must be a process id (an integer >= 0), not ${JSON.stringify(v.pid)}`);
  const state: RawExecState = { startedAt: v.startedAt as string, pid: v.pid as number };
  const start = v.pidStart;
  if (start !== undefined) {
    const n = typeof start === "string" && /^\d+$/.test(start) ? Number(start) : start;
    if (!Number.isSafeInteger(n) || (n as number) < 0) invalid("pidStart", `must be a process start time (clock ticks, an integer >= 0), not ${JSON.stringify(start)}`);
    state.pidStart = n as number;
  }
  if (v.bootId !== undefined) {
    if (typeof v.bootId !== "string" || v.bootId === "") invalid("bootId", `must be a boot id (a non-empty string), not ${JSON.stringify(v.bootId)}`);
    state.bootId = v.bootId as string;
  }
  if (v.cgroups !== undefined) state.cgroups = parseCgroups(v.cgroups, invalid);
  return state;
}

function parseCgroups(value: unknown, invalid: (field: string, problem: string) => never): RawExecCgroups {
  const isMap = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);
  if (!isMap(value)) return invalid("cgroups", `must be an object, not ${JSON.stringify(value)}`);
  const out: RawExecCgroups = {};
  for (const k of ["cgroupV2Override", "cpusetCgroup", "taskName"] as const) {
    const x = value[k];
    if (x === undefined) continue;
    if (typeof x !== "string") invalid(`cgroups.${k}`, `must be a string, not ${JSON.stringify(x)}`);
    out[k] = x as string;
  }
  const v1 = value.cgroupV1Override;
  if (v1 !== undefined) {
    if (!isMap(v1) || !Object.values(v1).every((x) => typeof x === "string")) invalid("cgroups.cgroupV1Override", `must map controllers to directories, not ${JSON.stringify(v1)}`);
    out.cgroupV1Override = v1 as Record<string, string>;
  }
  return out;
}

let thisBoot: { id: string | undefined } | undefined;

/** This boot of the host (`/proc/sys/kernel/random/boot_id`); undefined where it cannot be read. Read once. */
export function bootId(): string | undefined {
  if (!thisBoot) {
    try {
      thisBoot = { id: readFileSync("/proc/sys/kernel/random/boot_id", "latin1").trim() || undefined };
    } catch {
      thisBoot = { id: undefined };
    }
  }
  return thisBoot.id;
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
 * still the task: the pid's start time is the one recorded at launch, in this boot of the host.
 * A reused pid, a sibling task's process included, is left alone, and so is any pid of a state
 * without a start time (Nomad's raw_exec kills nothing here). Not the task's environment: a task
 * may clear it (`env -i`) or write over it (setproctitle, as nginx, PostgreSQL or Ruby do). Only a
 * state from before the boot was recorded, which cannot tell another boot's process from the
 * task, also needs the environment to name the task's allocation. Returns whether it was killed.
 *
 * @example
 * ```ts
 * if (!isProcessAlive(exe.pid)) killOrphanedTask(state, task.allocId);
 * ```
 */
export function killOrphanedTask(state: Pick<RawExecState, "pid" | "pidStart" | "bootId">, allocId: string): boolean {
  const { pid } = state;
  if (pid <= 0 || allocId === "" || state.pidStart === undefined) return false;
  if (state.bootId !== undefined && state.bootId !== bootId()) return false;
  if (processStart(pid) !== state.pidStart) return false;
  if (state.bootId === undefined && !environNames(pid, `NOMAD_ALLOC_ID=${allocId}`)) return false;
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
 * SIGKILLs everything in the task's cgroups when its executor is gone, as the executor's Shutdown
 * would have: exec'd commands and children that left the task's process group, which
 * {@link killOrphanedTask} cannot reach, would otherwise run on unsupervised. Only in the boot the
 * task was started in; nothing for a state without cgroups or cgroups that are gone (Nomad
 * removed them). Resolves whether any process was killed.
 *
 * @example
 * ```ts
 * if (!isProcessAlive(exe.pid)) await killTaskCgroups(state, task.allocId);
 * ```
 */
export async function killTaskCgroups(state: Pick<RawExecState, "cgroups" | "bootId">, allocId: string): Promise<boolean> {
  const c = state.cgroups;
  if (c === undefined || (state.bootId !== undefined && state.bootId !== bootId())) return false;
  try {
    const cgroups = TaskCgroups.resolve({ ...c, allocId });
    if (cgroups === undefined || cgroups.pids().length === 0) return false;
    await cgroups.killAll();
    return true;
  } catch {
    return false; // removed, or no longer a cgroup of the task's (Wait's exit must still be reported)
  }
}

/** Whether the process's environment (as it was exec'd) holds the `KEY=value` entry; false when it cannot be read. */
function environNames(pid: number, entry: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").includes(entry);
  } catch {
    return false; // gone, or not ours to read
  }
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

/** A task supervised by an executor process. */
export class RawExecTask {
  /** Set once the executor reported the exit. */
  exit: (TaskExit & { at: Date }) | undefined;
  /** Resolves with the exit (never rejects). */
  readonly exited: Promise<TaskExit>;
  /** Its executor's Stats streams, shared by the task's TaskStats streams; closed at the exit. */
  readonly stats: ExecutorStatsFeed;
  /** When the task started (from its state, so also after a recover); parsed once, InspectTask reads it. */
  readonly startedAt: Date;

  constructor(
    readonly id: string,
    readonly exe: ExecutorHandle,
    readonly state: RawExecState,
    /** The task's allocation: how its process is told from a reused pid (see killOrphanedTask). */
    readonly allocId: string,
  ) {
    this.stats = new ExecutorStatsFeed(exe);
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
      async (err: unknown) => {
        // We let go of the executor (plugin shutdown, destroy): the task runs on, or its end was
        // already reported. There is no exit to report; the next plugin waits again.
        if (this.detached) return new Promise<never>(() => {});
        // An executor that died leaves its task running: end it, so the exit reported is true, and
        // what else the executor would have ended with it (what runs in the task's cgroups).
        const gone = !isProcessAlive(exe.pid);
        const killed = gone && killOrphanedTask(state, allocId);
        if (gone) await killTaskCgroups(state, allocId);
        const exit: TaskExit = {
          // Not an exit status of the task: Nomad's raw_exec reports an executor failure as -1 (since 1.10, #25453).
          exitCode: -1,
          err: `executor: error waiting on process: ${(err as Error).message}${killed ? ` (the executor is gone; its task, pid ${state.pid}, was killed)` : ""}`,
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
