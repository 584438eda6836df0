/**
 * The cgroup Nomad's client (>= 1.7) makes for every task before StartTask and names in
 * `resources.linux_resources.cpuset_cgroup`, for tools and tests that start tasks themselves: a
 * driver (or its executor) joins it, so it must exist and accept processes.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { checkCpuNumbers, formatCpuList, parseCpuList } from "./cpu-list.js";

/** A parent cgroup for each cgroup mode. */
export interface CgroupParents {
  /** On cgroup v1: the directory below each controller's hierarchy. */
  readonly v1: string;
  /** On cgroup v2: a slice, as systemd names them. */
  readonly v2: string;
}

/** The default parents: nomadkit's own, apart from a Nomad agent's (`nomad.slice`, `nomad`) on the same host. */
export const DEFAULT_CGROUP_PARENTS: CgroupParents = Object.freeze({ v1: "nomadkit", v2: "nomadkit.slice" });

/** Inputs of {@link createTaskCgroup}. */
export interface TaskCgroupOptions {
  /** The allocation's id (TaskConfig.alloc_id). */
  allocId: string;
  /** The task's name. */
  task: string;
  /**
   * The parent cgroup, relative to the hierarchy (Nomad's `cgroup_parent`: a leading `/`, as in its
   * v1 default `/nomad`, is ignored); default {@link DEFAULT_CGROUP_PARENTS}: `nomadkit.slice` on
   * cgroup v2, `nomadkit` on v1. On v2 the controllers Nomad uses are enabled below it (and below
   * the root), as Nomad's client does for its own parent, also when the parent existed before.
   */
  parent?: string;
  /** Where cgroupfs is mounted (the v2 mount, or the directory of the v1 controllers' mounts); default `/sys/fs/cgroup`. */
  root?: string;
  /**
   * The CPUs the task reserves (the job's `resources { cores = N }`, as the scheduler picked them);
   * default none. The task then gets Nomad's layout for reserved cores: its own cpuset cgroup
   * `<parent>/reserve.slice/<allocId>.<task>.scope` on v2, `cpuset/<parent>/reserve/<allocId>.<task>`
   * on v1, with these CPUs in its `cpuset.cpus`; the `reserve` level holds every reserved CPU and
   * the `share` level (of the tasks without reserved cores) loses them until the last task holding
   * them is destroyed, as Nomad's client partitions them. Each must be among the parent's CPUs.
   * Pass the same list to `nomadTaskConfig` as `cores`.
   *
   * Nomad's client leaves the task's own `cpuset.cpus` to the driver's executor, which writes
   * `linux_resources.cpuset_cpus` there; this writes it already (the same value), so that a process
   * put in the cgroup directly runs, and so that the reservations can be read back from the
   * hierarchy by every process. A driver must still write it itself to work under Nomad. Where the
   * v2 hierarchy offers no cpuset controller, the layout is made but no CPUs are partitioned.
   *
   * @example
   * ```ts
   * const cgroup = createTaskCgroup({ allocId, task: "db", cores: [2, 3] });
   * const task = nomadTaskConfig({ ...o, cpusetCgroup: cgroup.path, cores: cgroup.cores });
   * ```
   */
  cores?: readonly number[];
}

/** A task's cgroup as {@link createTaskCgroup} made it. */
export interface TaskCgroup {
  /**
   * The value for `resources.linux_resources.cpuset_cgroup`: the v2 scope, or on v1 the cpuset
   * cgroup, which (as in Nomad) is `cpuset/<parent>/share`, shared by every task without reserved
   * cores (see {@link shared}), or the task's own `cpuset/<parent>/reserve/<allocId>.<task>` with them.
   */
  readonly path: string;
  /**
   * Whether {@link path} is shared with other tasks, as Nomad's v1 `share` cpuset cgroup is: a
   * driver joins it but must not kill through it, limit it or read a task's statistics from it;
   * the task's own cgroups are the other {@link paths} (`<controller>/<parent>/<alloc>.<task>`).
   * {@link destroy} kills and removes only those. False on cgroup v2 and for a task with reserved
   * cores, where `path` is the task's own.
   *
   * @example
   * ```ts
   * const own = cgroup.shared ? cgroup.paths.filter((p) => p !== cgroup.path) : cgroup.paths;
   * ```
   */
  readonly shared: boolean;
  /** The host's cgroup mode. */
  readonly version: 1 | 2;
  /** The CPUs the task reserves, ascending ([] for none): see {@link TaskCgroupOptions.cores}. */
  readonly cores: readonly number[];
  /**
   * The parent as given (or the default), what Nomad's client puts in the task's
   * `NOMAD_PARENT_CGROUP` (its `cgroup_parent`): pass it to `nomadTaskConfig` as `cgroupParent`.
   */
  readonly parent: string;
  /**
   * Every directory the task joins (on v1 one per controller: cpuset, then freezer, cpu, memory
   * where mounted; the cpuset one is shared, see {@link shared}).
   */
  readonly paths: readonly string[];
  /** The processes in the task's own cgroups and their sub-cgroups (not the rest of a shared one; none once destroyed). */
  pids(): number[];
  /**
   * Kills what is left in the task's own cgroups (v2 `cgroup.kill`; v1 freeze, SIGKILL, thaw) and
   * removes them, with their sub-cgroups, retrying while the kernel still lists dying processes;
   * then the parent levels left empty, when they are nomadkit's default parent's or this process
   * made them (a parent you name that existed before is kept: it may be a Nomad agent's). A shared
   * v1 cpuset cgroup is such a level: never killed through, removed only once empty. Idempotent;
   * rejects naming what could not be removed (within 10 s), and may then be called again.
   */
  destroy(): Promise<void>;
  /**
   * {@link destroy}, synchronously, within `timeoutMs`: for where nothing can be awaited, such as a
   * process's "exit" listener or a handler of the signal that is about to end it (vitest sends
   * SIGKILL 500 ms after SIGTERM). The same kill rounds, removals and parent levels; it blocks the
   * thread where destroy waits. Throws naming what could not be removed in time, and may then be
   * called again.
   *
   * @example
   * ```ts
   * process.once("exit", () => {
   *   try {
   *     cgroup.destroySync({ timeoutMs: 200 });
   *   } catch (err) {
   *     console.error(String(err)); // a process that would not die in time
   *   }
   * });
   * ```
   */
  destroySync(options?: TaskCgroupDestroySyncOptions): void;
}

/** Inputs of {@link TaskCgroup.destroySync}. */
export interface TaskCgroupDestroySyncOptions {
  /**
   * How long it may block, in milliseconds: the killed processes leaving, a v1 freezer freezing;
   * default 1000. One round (kill, then removal) runs whatever the bound, even 0.
   */
  timeoutMs?: number;
}

const unavailableBrand = Symbol.for("@nomadkit/client/TaskCgroupUnavailableError");

/**
 * This host does not let this process create a task's cgroup: no cgroup filesystem (or no cpuset
 * controller on cgroup v1), not root, a read-only mount. Callers that can do without proceed
 * without `cpuset_cgroup`, as on a host where Nomad runs without cgroups.
 *
 * @example
 * ```ts
 * try {
 *   cgroup = createTaskCgroup({ allocId, task: "web" });
 * } catch (err) {
 *   if (!(err instanceof TaskCgroupUnavailableError)) throw err;
 *   console.warn(`no task cgroup: ${err.reason}`);
 * }
 * ```
 */
export class TaskCgroupUnavailableError extends Error {
  /** Why, for a log line: "not root: mkdir /sys/fs/cgroup/...: EACCES", say. */
  readonly reason: string;

  constructor(reason: string, options?: { cause?: unknown }) {
    super(`cannot create the task's cgroup: ${reason}`, options);
    this.name = "TaskCgroupUnavailableError";
    this.reason = reason;
    Object.defineProperty(this, unavailableBrand, { value: true });
  }

  /** True for instances from either build (ESM or CommonJS) of this package. */
  static override [Symbol.hasInstance](v: unknown): boolean {
    if (this !== TaskCgroupUnavailableError) return Function.prototype[Symbol.hasInstance].call(this, v);
    return typeof v === "object" && v !== null && (v as Record<symbol, unknown>)[unavailableBrand] === true;
  }
}

/** v2 controllers Nomad's client enables down to its tasks (client/lib/cgroupslib/init.go). */
const V2_CONTROLLERS = ["cpuset", "cpu", "io", "memory", "pids"];
/** v1 controllers Nomad gives every task a cgroup in besides the cpuset one (freezer first: it stops the task to kill it). */
const V1_CONTROLLERS = ["freezer", "cpu", "memory"];
/** How long {@link TaskCgroup.destroy} keeps killing and retrying rmdir before it gives up. */
const DESTROY_MS = 10_000;
/** destroySync's default bound: it blocks the thread, so much less than destroy's. */
const DESTROY_SYNC_MS = 1_000;
/** How long a v1 freezer may stay FREEZING before the kill goes ahead. */
const FREEZE_MS = 1_000;

/**
 * Does for a task what Nomad's client does before StartTask (cgroupslib's Lifecycle.Setup), in the
 * host's cgroup mode (v2 when `<root>/cgroup.controllers` exists):
 *
 * - v2: `<root>/<parent>/share.slice/<allocId>.<task>.scope`, with the controllers Nomad uses
 *   (cpuset, cpu, io, memory, pids) enabled down to it where the kernel offers them;
 * - v1: `<root>/cpuset/<parent>/share`, the cpuset cgroup Nomad gives every task without reserved
 *   cores (client/lib/cgroupslib: LinuxResourcesPath), shared by them all (each level gets its
 *   parent's cpuset.cpus and cpuset.mems, without which it refuses processes); it is `path`, and
 *   `shared` is true. The task's own are `<root>/<c>/<parent>/<allocId>.<task>` for c in freezer,
 *   cpu, memory where mounted.
 *
 * With reserved cores (`cores`), Nomad's other partition: `reserve.slice` (v2) or `reserve` (v1)
 * in place of `share`, the task's own cpuset cgroup below it, and the cores taken from `share`
 * until the task is destroyed (see {@link TaskCgroupOptions.cores}).
 *
 * Existing directories are reused. Throws {@link TaskCgroupUnavailableError} (after removing what
 * it made) when the host does not allow it, an Error for an id or name that is not one directory
 * name, and a RangeError for cores that are not CPU numbers or not among the parent's CPUs.
 *
 * @example
 * ```ts
 * const cgroup = createTaskCgroup({ allocId: task.allocId, task: "web" });
 * const config = nomadTaskConfig({ name: "web", dirs, allocId, msgpackDriverConfig, stdoutPath, stderrPath, cpusetCgroup: cgroup.path });
 * try {
 *   await plugin.driver.startTask({ task: config });
 *   // ... WaitTask, DestroyTask
 * } finally {
 *   await cgroup.destroy();
 * }
 * ```
 */
export function createTaskCgroup(o: TaskCgroupOptions): TaskCgroup {
  for (const [what, v] of [["allocId", o.allocId], ["task", o.task]] as const) {
    if (v === "" || v === "." || v === ".." || v.includes("/") || v.includes("\0")) {
      throw new Error(`${what} ${JSON.stringify(v)} cannot name a cgroup directory`);
    }
  }
  const cores = checkCores(o.cores);
  const root = o.root ?? "/sys/fs/cgroup";
  const v2 = existsSync(join(root, "cgroup.controllers"));
  const parent = o.parent ?? (v2 ? DEFAULT_CGROUP_PARENTS.v2 : DEFAULT_CGROUP_PARENTS.v1);
  const parentLevels = parent.split("/").filter((s) => s !== "" && s !== ".");
  if (parentLevels.length === 0 || parentLevels.includes("..") || parent.includes("\0")) {
    throw new Error(`parent ${JSON.stringify(parent)}: must name a cgroup below the root, without ".."`);
  }
  // Parent levels are removed with the task's only when nobody else may rely on them.
  const ownParent = o.parent === undefined;
  const reserving = cores.length > 0;
  const made: string[] = [];
  const setup = new CgroupSetup(made);
  // Set once the partition gave this task's cores to reserve: a set-up failing after that gives them back.
  let partitioned: CpuPartition | undefined;
  try {
    if (v2) {
      if (!existsSync(join(root, "cgroup.procs"))) throw unavailable(`${root} is not a cgroup v2 mount`);
      // Nomad's partitions (cgroupslib's GetPartitionFromBool): tasks with reserved cores in reserve.slice.
      const levels = [...parentLevels, reserving ? "reserve.slice" : "share.slice"];
      const path = join(root, ...levels, `${o.allocId}.${o.task}.scope`);
      const partition = new CpuPartition(join(root, ...parentLevels), 2);
      setup.run(() => {
        enableControllers(root);
        for (let i = 1; i <= levels.length; i++) {
          const dir = join(root, ...levels.slice(0, i));
          setup.mkdir(dir);
          enableControllers(dir);
        }
        if (partition.available()) {
          // The scope joins with its CPUs written: share loses them first, reserve gets them.
          if (reserving || existsSync(partition.reserve)) partition.write(cores);
          if (reserving) partitioned = partition;
          setup.mkdir(path);
          if (reserving) writeFileSync(join(path, "cpuset.cpus"), cores.join(","));
        } else {
          setup.mkdir(path);
        }
      });
      return new Cgroup(2, parent, path, [path], undefined, parentLevelsOf(root, levels, made, ownParent), cores, reserving ? partition : undefined);
    }
    const cpusetRoot = join(root, "cpuset");
    if (!existsSync(join(cpusetRoot, "cgroup.procs"))) {
      throw unavailable(existsSync(root) ? `no cgroup v1 cpuset controller is mounted at ${cpusetRoot}` : `no cgroup filesystem at ${root}`);
    }
    const leaf = `${o.allocId}.${o.task}`;
    // Nomad puts every task without reserved cores in one cpuset cgroup, `share`, and
    // gives each its own cgroup only in the other controllers (cgroupslib's lifeCG1.paths);
    // a task with reserved cores gets its own cpuset cgroup too, `reserve/<alloc>.<task>`.
    const cpusetLevels = [...parentLevels, reserving ? "reserve" : "share"];
    const path = reserving ? join(cpusetRoot, ...cpusetLevels, leaf) : join(cpusetRoot, ...cpusetLevels);
    const partition = new CpuPartition(join(cpusetRoot, ...parentLevels), 1);
    const others = V1_CONTROLLERS.filter((c) => existsSync(join(root, c, "cgroup.procs")));
    setup.run(() => {
      // The task's own directories first: from then on they tell another process's destroy that
      // the shared level is in use (see shareInUse), so it is not removed under this task.
      for (const c of others) {
        for (let i = 1; i <= parentLevels.length; i++) setup.mkdir(join(root, c, ...parentLevels.slice(0, i)));
        setup.mkdir(join(root, c, ...parentLevels, leaf));
      }
      for (let i = 1; i <= cpusetLevels.length; i++) {
        const dir = join(cpusetRoot, ...cpusetLevels.slice(0, i));
        setup.mkdir(dir);
        inheritCpuset(dir);
      }
      // The reserved CPUs leave share before reserve (and then the task's cgroup, a subset of it) holds them.
      if (reserving || existsSync(partition.reserve)) partition.write(cores);
      if (reserving) {
        partitioned = partition;
        setup.mkdir(path);
        // Nomad's lifeCG1.Setup gives it its parent's memory nodes; the CPUs are the task's.
        writeFileSync(join(path, "cpuset.mems"), readFileSync(join(partition.reserve, "cpuset.mems"), "utf8").trim());
        writeFileSync(join(path, "cpuset.cpus"), cores.join(","));
      }
    });
    const paths = [path, ...others.map((c) => join(root, c, ...parentLevels, leaf))];
    const parents = [
      ...parentLevelsOf(cpusetRoot, cpusetLevels, made, ownParent),
      ...others.flatMap((c) => parentLevelsOf(join(root, c), parentLevels, made, ownParent)),
    ];
    const freezer = others.includes("freezer") ? join(root, "freezer", ...parentLevels, leaf) : undefined;
    if (reserving) return new Cgroup(1, parent, path, paths, undefined, parents, cores, partition, freezer);
    const share: SharedCpuset = { path, neighbours: others.map((c) => join(root, c, ...parentLevels)) };
    shareUsers.set(path, (shareUsers.get(path) ?? 0) + 1);
    return new Cgroup(1, parent, path, paths, share, parents, cores, undefined, freezer);
  } catch (err) {
    for (const d of made.reverse()) tryRmdir(d);
    try {
      partitioned?.write([]);
    } catch {
      // the set-up's own error is the one to report
    }
    if (err instanceof TaskCgroupUnavailableError || err instanceof RangeError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    const hint = code === "EACCES" || code === "EPERM" ? (process.getuid?.() === 0 ? "not permitted: " : "not root: ") : code === "EROFS" ? "read-only: " : "";
    throw unavailable(`${hint}${(err as Error).message}`, err);
  }
}

/** The reserved cores as given: whole CPU numbers, sorted, without repeats. */
function checkCores(cores: readonly number[] | undefined): number[] {
  if (cores === undefined) return [];
  checkCpuNumbers(cores);
  return [...new Set(cores)].sort((a, b) => a - b);
}

/**
 * Nomad's cpuset partition (cgroupslib's partition) under one parent: `share` holds the parent's
 * CPUs that no task reserves, `reserve` those that tasks do. What is reserved is read back from
 * the hierarchy, the `cpuset.cpus` of the task cgroups in `reserve`, so that tasks of several
 * processes add up and a CPU two tasks reserve stays reserved until both are gone.
 */
class CpuPartition {
  readonly share: string;
  readonly reserve: string;

  constructor(
    /** The parent cgroup, whose CPUs are partitioned. */
    readonly parent: string,
    private readonly version: 1 | 2,
  ) {
    this.share = join(parent, version === 2 ? "share.slice" : "share");
    this.reserve = join(parent, version === 2 ? "reserve.slice" : "reserve");
  }

  /** Whether the parent is there with a cpuset controller (on v1 always; on v2 where enabled for it). */
  available(): boolean {
    return existsSync(join(this.parent, this.version === 2 ? "cpuset.cpus.effective" : "cpuset.cpus"));
  }

  /**
   * Writes share and reserve (those that exist) for the tasks in reserve plus `adding`, which must
   * be among the parent's CPUs. Share is written first, as in Nomad: on v1 its CPUs may overlap
   * reserve's, but a task cgroup's must be within reserve's.
   */
  write(adding: readonly number[]): void {
    // Gone with the last task's destroy, in another process (or no cpuset controller): nothing to give back.
    if (adding.length === 0 && !this.available()) return;
    // On v2 the parent's own cpuset.cpus may be empty (all of its parent's): take the effective ones.
    const usable = new Set(parseCpuList(readFileSync(join(this.parent, this.version === 2 ? "cpuset.cpus.effective" : "cpuset.cpus"), "utf8")));
    const missing = adding.filter((c) => !usable.has(c));
    if (missing.length > 0) {
      throw new RangeError(`cores ${formatCpuList(missing)}: not among the CPUs of ${this.parent} (${formatCpuList([...usable]) || "none"})`);
    }
    const reserved = new Set(adding);
    for (const dir of subdirs(this.reserve)) {
      for (const c of parseCpuList(tryRead(join(dir, "cpuset.cpus")))) if (usable.has(c)) reserved.add(c);
    }
    writeCpus(this.share, [...usable].filter((c) => !reserved.has(c)));
    writeCpus(this.reserve, [...reserved]);
  }
}

/** The cgroups right below `dir` (none when it is gone). */
function subdirs(dir: string): string[] {
  try {
    return readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => join(dir, e.name));
  } catch {
    return [];
  }
}

/**
 * Sets a partition's CPUs, where it exists. As Nomad's writeCpuset: the kernel refuses to empty the
 * CPUs of a cgroup with processes in it (ENOSPC), and then the previous ones stay.
 */
function writeCpus(dir: string, cpus: number[]): void {
  if (!existsSync(dir)) return;
  try {
    // An empty list clears them (a write of nothing would not reach the kernel).
    writeFileSync(join(dir, "cpuset.cpus"), formatCpuList(cpus) || "\n");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT" && !existsSync(dir)) return; // removed meanwhile by another process's destroy
    if (!(cpus.length === 0 && code === "ENOSPC")) throw err;
  }
}

/** Makes directories, remembering the ones it made; retries a set-up that lost a race with another process's destroy. */
class CgroupSetup {
  constructor(private readonly made: string[]) {}

  mkdir(dir: string): void {
    try {
      mkdirSync(dir, 0o755);
      this.made.push(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
  }

  run(steps: () => void): void {
    // Another process's destroy may remove an empty parent level between our mkdir and the next one.
    for (let attempt = 0; ; attempt++) {
      try {
        return steps();
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT" || attempt >= 5) throw err;
      }
    }
  }
}

/** A v1 `share` cpuset cgroup, and where the tasks that use it have their own cgroups. */
interface SharedCpuset {
  readonly path: string;
  /** `<root>/<controller>/<parent>` for the other controllers: each task using `path` has a directory there. */
  readonly neighbours: readonly string[];
}

/** This process's tasks not destroyed yet, per shared cpuset cgroup: on a host with no other controller to tell. */
const shareUsers = new Map<string, number>();

/**
 * Whether a shared cpuset cgroup may still be joined by a task: one (of any process) that has its
 * own directory beside it in another controller, or, with no other controller mounted, one of
 * this process's not destroyed yet. An empty `share` has no sub-cgroups to keep it busy, so rmdir
 * alone would remove it from under a task not started yet. A task with reserved cores, whose own
 * cpuset cgroup is in `reserve`, never joins it: counted, it would keep `share` for ever once the
 * other tasks were gone first.
 */
function shareInUse(s: SharedCpuset): boolean {
  if (s.neighbours.length === 0) return (shareUsers.get(s.path) ?? 0) > 0;
  const reserve = join(dirname(s.path), "reserve");
  return s.neighbours.some((dir) => {
    try {
      return readdirSync(dir, { withFileTypes: true }).some((e) => e.isDirectory() && !existsSync(join(reserve, e.name)));
    } catch {
      return false;
    }
  });
}

/** Parent levels made by this process's calls, which its destroys may remove (whichever task goes last). */
const madeParents = new Set<string>();

/** The parent levels below `base`, deepest first, that destroy may remove when empty. */
function parentLevelsOf(base: string, levels: readonly string[], made: readonly string[], own: boolean): string[] {
  const out: string[] = [];
  for (let i = levels.length; i >= 1; i--) {
    const dir = join(base, ...levels.slice(0, i));
    if (made.includes(dir)) madeParents.add(dir);
    if (own || madeParents.has(dir)) out.push(dir);
  }
  return out;
}

/**
 * A new v1 cpuset cgroup has no CPUs and no memory nodes and refuses every process: give it its
 * parent's, as Nomad's partition code and inheritMems do (a level another process is still setting
 * up is filled too).
 */
function inheritCpuset(dir: string): void {
  for (const file of ["cpuset.cpus", "cpuset.mems"]) {
    if (readFileSync(join(dir, file), "utf8").trim() !== "") continue;
    writeFileSync(join(dir, file), readFileSync(join(dirname(dir), file), "utf8").trim());
  }
}

/** Enables Nomad's controllers for the children of `dir`, those the kernel offers; a refusal leaves them off. */
function enableControllers(dir: string): void {
  const words = (file: string) => readFileSync(join(dir, file), "utf8").trim().split(/\s+/);
  const available = words("cgroup.controllers");
  const enabled = words("cgroup.subtree_control");
  for (const c of V2_CONTROLLERS) {
    if (!available.includes(c) || enabled.includes(c)) continue;
    try {
      writeFileSync(join(dir, "cgroup.subtree_control"), `+${c}`);
    } catch {
      // in use elsewhere in the hierarchy, or not delegated: the task goes without it
    }
  }
}

class Cgroup implements TaskCgroup {
  private destroying: Promise<void> | undefined;
  /** The task's own directories: what is killed through and removed (a shared cpuset cgroup is a parent level). */
  private readonly own: readonly string[];
  /** Whether this task still counts among its shared cpuset cgroup's users (until its own directories are gone). */
  private usesShare: boolean;

  constructor(
    readonly version: 1 | 2,
    readonly parent: string,
    readonly path: string,
    readonly paths: readonly string[],
    /** The v1 cpuset cgroup `path` when it is shared with other tasks. */
    private readonly share: SharedCpuset | undefined,
    /** Parent levels to remove when empty, deepest first. */
    private readonly parents: readonly string[],
    readonly cores: readonly number[],
    /** Where the task's reserved cores are partitioned, to give them back once it is gone. */
    private readonly partition: CpuPartition | undefined,
    /** The v1 freezer cgroup, to stop the task before killing it. */
    private readonly freezer?: string,
  ) {
    this.own = share ? paths.filter((p) => p !== path) : paths;
    this.usesShare = share !== undefined;
  }

  get shared(): boolean {
    return this.share !== undefined;
  }

  destroy(): Promise<void> {
    // A failed teardown (a process that would not die in time) may be retried.
    return (this.destroying ??= runAsync(this.teardown(DESTROY_MS)).catch((err: unknown) => {
      this.destroying = undefined;
      throw err;
    }));
  }

  destroySync(options: TaskCgroupDestroySyncOptions = {}): void {
    const ms = options.timeoutMs ?? DESTROY_SYNC_MS;
    if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
      throw new RangeError(`destroySync: timeoutMs ${String(ms)} is not a number of milliseconds >= 0`);
    }
    runSync(this.teardown(ms));
  }

  /**
   * The teardown of destroy and destroySync: it yields how long to wait before its next step (the
   * kernel still lists killed processes, a v1 freezer is still freezing), and each waits its way.
   */
  private *teardown(ms: number): Generator<number, void, void> {
    const until = Date.now() + ms;
    const left: string[] = [];
    for (let round = 0; ; round++) {
      yield* this.kill(until);
      left.length = 0;
      // Deepest first: sub-cgroups the task made, then the task's own.
      for (const dir of this.own.flatMap((p) => subtree(p).reverse())) {
        const err = tryRmdir(dir);
        if (err) left.push(`${dir}: ${err}`);
      }
      const now = Date.now();
      if (left.length === 0 || now >= until) break;
      // A killed process stays listed until the kernel is done with it.
      yield Math.min(100, 5 * 2 ** round, until - now);
    }
    if (left.length > 0) throw new Error(`cannot remove the task's cgroups: ${left.join("; ")}`);
    // Its cores go back to share (those no other task holds), as Nomad's partition Release does.
    let released: unknown;
    try {
      this.partition?.write([]);
    } catch (err) {
      released = err;
    }
    if (this.usesShare) {
      this.usesShare = false;
      const n = shareUsers.get(this.share!.path)! - 1;
      if (n > 0) shareUsers.set(this.share!.path, n);
      else shareUsers.delete(this.share!.path);
    }
    // Busy (other tasks') or gone levels stay as they are; a shared cpuset cgroup also while a task may still join it.
    for (const dir of this.parents) {
      if (dir === this.share?.path && shareInUse(this.share)) continue;
      if (tryRmdir(dir) === undefined) madeParents.delete(dir);
    }
    if (released !== undefined) {
      throw new Error(`cannot give the task's reserved cores back to ${this.partition!.share}: ${(released as Error).message}`, { cause: released });
    }
  }

  pids(): number[] {
    const out = new Set<number>();
    for (const dir of this.own.flatMap(subtree)) {
      let text = "";
      try {
        text = readFileSync(join(dir, "cgroup.procs"), "utf8");
      } catch {
        continue;
      }
      for (const line of text.split("\n")) if (/^\d+$/.test(line)) out.add(Number(line));
    }
    out.delete(process.pid);
    return [...out];
  }

  /**
   * One kill round, as Nomad's Lifecycle.Kill: the kernel's cgroup.kill on v2, freeze-kill-thaw on
   * v1. A freeze not done by `until` (or within FREEZE_MS) does not hold the kill back.
   */
  private *kill(until: number): Generator<number, void, void> {
    const pids = this.pids();
    if (pids.length === 0) return;
    if (this.version === 2 && tryWrite(join(this.path, "cgroup.kill"), "1")) return;
    // A frozen task cannot fork between the listing and the kill; it dies once thawed.
    const state = this.version === 2 ? join(this.path, "cgroup.freeze") : this.freezer && join(this.freezer, "freezer.state");
    const frozen = state !== undefined && tryWrite(state, this.version === 2 ? "1" : "FROZEN");
    if (frozen) {
      // Freezing completes asynchronously: v1 reports FROZEN in freezer.state, v2 "frozen 1" in cgroup.events.
      const done = this.version === 2 ? () => /^frozen 1$/m.test(tryRead(join(this.path, "cgroup.events"))) : () => /^FROZEN$/m.test(tryRead(state!));
      const end = Math.min(Date.now() + FREEZE_MS, until);
      while (Date.now() < end && !done()) yield Math.min(5, end - Date.now());
    }
    for (const pid of frozen ? this.pids() : pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone
      }
    }
    if (frozen) tryWrite(state!, this.version === 2 ? "0" : "THAWED");
  }
}

/** Runs a teardown, waiting with timers. */
async function runAsync(steps: Generator<number, void, void>): Promise<void> {
  for (let step = steps.next(); !step.done; step = steps.next()) await delay(step.value);
}

/** Runs a teardown, blocking the thread while it waits. */
function runSync(steps: Generator<number, void, void>): void {
  for (let step = steps.next(); !step.done; step = steps.next()) sleepSync(step.value);
}

/** Blocks for `ms` milliseconds without spinning: a wait on memory nobody will change. */
function sleepSync(ms: number): void {
  if (ms > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** `dir` and every cgroup below it, parents before children. */
function subtree(dir: string): string[] {
  const out = [dir];
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) if (e.isDirectory()) out.push(...subtree(join(dir, e.name)));
  return out;
}

function unavailable(reason: string, cause?: unknown): TaskCgroupUnavailableError {
  return new TaskCgroupUnavailableError(reason, cause === undefined ? undefined : { cause });
}

/** rmdir; undefined when removed or already gone, else the error code. */
function tryRmdir(dir: string): string | undefined {
  try {
    rmdirSync(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== "ENOENT") return code ?? (err as Error).message;
  }
  return undefined;
}

function tryWrite(path: string, text: string): boolean {
  try {
    writeFileSync(path, text);
    return true;
  } catch {
    return false;
  }
}

function tryRead(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}
