/**
 * The TaskConfig Nomad's task runner sends with StartTask, for tools and tests that start tasks
 * themselves: the ids and names, the NOMAD_* environment, the task's directories, resources and
 * output paths, so a driver sees what it will see under Nomad.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { cpus, hostname } from "node:os";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { NetworkIsolationSpecSchema, TaskConfig, TaskConfigSchema, TaskHandle } from "@nomadkit/protocol/driver";
import { nodeTotalComputeMhz } from "./agent-config.js";
import { checkCpuNumbers, formatCpuList } from "./cpu-list.js";
import type { TaskDirs } from "./task-dirs.js";

/** A StartTask `task` in init form, as {@link nomadTaskConfig} builds it: a plain object whose `id` is set. */
export type NomadTaskConfig = Exclude<MessageInitShape<typeof TaskConfigSchema>, TaskConfig> & TaskId;

/** The part of {@link NomadTaskConfig} that is always set. */
export interface TaskId {
  /** `<alloc id>/<task name>/<invocation>`, as Nomad makes task ids. */
  id: string;
}

/** Inputs of {@link nomadTaskConfig}. */
export interface NomadTaskConfigOptions {
  /** The task's name; its directories must have been made for it ({@link TaskDirs}). */
  name: string;
  /** The task's directories, from `createTaskDirs`. */
  dirs: TaskDirs;
  /** The task's `config` block, msgpack-encoded (e.g. with `encodeConfig` of `@nomadkit/conformance`). */
  msgpackDriverConfig: Uint8Array;
  /** Where the driver writes the task's stdout and stderr (Nomad: FIFOs in `alloc/logs`). */
  stdoutPath: string;
  /** See `stdoutPath`. */
  stderrPath: string;
  /** The allocation's id; default a random UUID. */
  allocId?: string;
  /** The job's name and id; default `"nomadkit"`. */
  jobName?: string;
  /** The task group's name; default the task's name. */
  groupName?: string;
  /** The job's namespace; default `"default"`. */
  namespace?: string;
  /** The allocation's index in its group (NOMAD_ALLOC_INDEX, and NOMAD_ALLOC_NAME `<job>.<group>[<index>]`); default 0. */
  allocIndex?: number;
  /** The client's region (NOMAD_REGION); default `"global"`, Nomad's. */
  region?: string;
  /** The node's datacenter (NOMAD_DC); default `"dc1"`, Nomad's. */
  datacenter?: string;
  /** The task's `user`; default none. */
  user?: string;
  /**
   * CPU in MHz (cpu_shares); default 100, Nomad's default task resources, or with `cores` what
   * Nomad's scheduler gives a task that reserves them: the node's compute per core times their number.
   */
  cpuMhz?: number;
  /**
   * The CPUs the task reserves (`resources { cores = N }`, as the scheduler picked them); default
   * none. As Nomad's task runner: `linux_resources.cpuset_cpus` lists them (comma-separated, in the
   * order given) for the driver to write into the task's cpuset cgroup, and NOMAD_CPU_CORES names
   * them as a cpuset list ("0-2,5"). Give the task's cgroup from `createTaskCgroup` with the same
   * `cores` as `cpusetCgroup`.
   *
   * @example
   * ```ts
   * const cgroup = createTaskCgroup({ allocId, task: "db", cores: [2, 3] });
   * const task = nomadTaskConfig({ name: "db", dirs, allocId, msgpackDriverConfig, stdoutPath, stderrPath, cpusetCgroup: cgroup.path, cores: cgroup.cores });
   * ```
   */
  cores?: readonly number[];
  /** Memory in MB; default {@link DEFAULT_TASK_MEMORY_MB}, Nomad's default task resources. */
  memoryMb?: number;
  /**
   * The task's `memory_max` in MB (memory oversubscription); default none. As in Nomad's task
   * runner, the larger of it and `memoryMb` is the hard limit (`memory_limit_bytes`), `memoryMb` stays
   * the reservation, and NOMAD_MEMORY_MAX_LIMIT is set.
   */
  memoryMaxMb?: number;
  /** The node's total compute in MHz, PercentTicks' divisor; default this machine's ({@link nodeTotalComputeMhz}). */
  totalComputeMhz?: number;
  /**
   * The driver's filesystem isolation (its Capabilities' `fs_isolation`); default `"none"`. With
   * `"chroot"` or `"image"` the NOMAD_*_DIR variables are the paths inside the task (`/alloc`,
   * `/local`, `/secrets`); with `"image"` the task gets none of the host's environment.
   */
  fsIsolation?: "none" | "chroot" | "image" | "unveil";
  /** The host's environment, passed on (minus {@link NOMAD_ENV_DENYLIST}) unless `fsIsolation` is `"image"`; default this process's. */
  hostEnv?: Readonly<Record<string, string | undefined>>;
  /** Variables over the ones Nomad sets (the host's, NOMAD_*). */
  env?: Record<string, string>;
  /** The allocation's network namespace, when the driver created one. */
  networkIsolation?: MessageInitShape<typeof NetworkIsolationSpecSchema>;
  /**
   * The task's cgroup, `resources.linux_resources.cpuset_cgroup` (from `createTaskCgroup`); Nomad's
   * client (>= 1.7) makes one for every task. Default none: the driver then uses cgroups of its own.
   */
  cpusetCgroup?: string;
  /**
   * The client's `cgroup_parent`, set as `NOMAD_PARENT_CGROUP` (Nomad's raw_exec reads it to find
   * the task's cgroup under a custom parent): the `parent` of the `createTaskCgroup` result. Default none.
   */
  cgroupParent?: string;
}

/** Host variables Nomad never passes to a task (its client's default `env.denylist`). */
export const NOMAD_ENV_DENYLIST: readonly string[] = Object.freeze([
  "CONSUL_TOKEN",
  "CONSUL_HTTP_TOKEN",
  "VAULT_TOKEN",
  "NOMAD_LICENSE",
  "AWS_ACCESS_KEY_ID",
  "AWS_SECRET_ACCESS_KEY",
  "AWS_SESSION_TOKEN",
  "GOOGLE_APPLICATION_CREDENTIALS",
]);

/** The environment Nomad's task dir hook starts a task's from: the host's, unless its driver runs images. */
function hostVariables(o: NomadTaskConfigOptions): Record<string, string> {
  if (o.fsIsolation === "image") return {};
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(o.hostEnv ?? process.env)) if (v !== undefined && !NOMAD_ENV_DENYLIST.includes(k)) out[k] = v;
  out.PATH ??= "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  return out;
}

/**
 * A task's memory in MB when its job gives none (Nomad's default task resources): what
 * {@link nomadTaskConfig} uses without `memoryMb`.
 *
 * @example
 * ```ts
 * nomadTaskConfig({ ...o, memoryMaxMb: DEFAULT_TASK_MEMORY_MB * 2 });
 * ```
 */
export const DEFAULT_TASK_MEMORY_MB = 300;

/**
 * A StartTask `task` the way Nomad builds it: `<alloc>/<task>/<invocation>` id, job, group,
 * namespace and node names, the host's environment (for drivers that do not run images, minus
 * Nomad's denylist), the NOMAD_* variables Nomad always sets (alloc id, short id, name and index,
 * task, job and group names, namespace, region, datacenter, limits, the directories as the task
 * sees them), allocated and Linux resources (with the task's cgroup when given), and the given config
 * and output paths.
 *
 * @example
 * ```ts
 * const dirs = createTaskDirs(allocDir, "web");
 * const cgroup = createTaskCgroup({ allocId, task: "web" }); // as root; see TaskCgroupUnavailableError
 * const task = nomadTaskConfig({ name: "web", dirs, allocId, msgpackDriverConfig, stdoutPath, stderrPath, cpusetCgroup: cgroup.path });
 * await plugin.driver.startTask({ task });
 * ```
 */
export function nomadTaskConfig(o: NomadTaskConfigOptions): NomadTaskConfig {
  const allocId = o.allocId ?? randomUUID();
  const jobName = o.jobName ?? "nomadkit";
  const groupName = o.groupName ?? o.name;
  const namespace = o.namespace ?? "default";
  const allocIndex = o.allocIndex ?? 0;
  if (!Number.isSafeInteger(allocIndex) || allocIndex < 0) throw new Error(`allocIndex ${allocIndex}: must be a non-negative integer`);
  const cores = o.cores ?? [];
  checkCpuNumbers(cores);
  // The scheduler's SharesPerCore times the cores: what a task that reserves them is charged.
  const cpuShares = BigInt(o.cpuMhz ?? (cores.length > 0 ? Math.floor((o.totalComputeMhz ?? nodeTotalComputeMhz()) / cpus().length) * new Set(cores).size : 100));
  const memoryMb = BigInt(o.memoryMb ?? DEFAULT_TASK_MEMORY_MB);
  const memoryMaxMb = BigInt(o.memoryMaxMb ?? 0);
  const memoryLimitMb = memoryMaxMb > memoryMb ? memoryMaxMb : memoryMb;
  return {
    id: `${allocId}/${o.name}/${randomBytes(4).toString("hex")}`,
    name: o.name,
    jobName,
    jobId: jobName,
    taskGroupName: groupName,
    namespace,
    allocId,
    nodeName: hostname(),
    nodeId: "00000000-0000-4000-8000-000000000000",
    env: {
      ...hostVariables(o),
      NOMAD_ALLOC_ID: allocId,
      NOMAD_SHORT_ALLOC_ID: allocId.slice(0, 8),
      // structs.AllocName: the job's id, the group, the index.
      NOMAD_ALLOC_NAME: `${jobName}.${groupName}[${allocIndex}]`,
      NOMAD_ALLOC_INDEX: String(allocIndex),
      NOMAD_TASK_NAME: o.name,
      NOMAD_JOB_NAME: jobName,
      NOMAD_JOB_ID: jobName,
      NOMAD_GROUP_NAME: groupName,
      NOMAD_NAMESPACE: namespace,
      NOMAD_REGION: o.region ?? "global",
      NOMAD_DC: o.datacenter ?? "dc1",
      ...(o.cgroupParent !== undefined && { NOMAD_PARENT_CGROUP: o.cgroupParent }),
      NOMAD_CPU_LIMIT: String(cpuShares),
      ...(cores.length > 0 && { NOMAD_CPU_CORES: formatCpuList(cores) }),
      NOMAD_MEMORY_LIMIT: String(memoryMb),
      ...(memoryMaxMb > 0n && { NOMAD_MEMORY_MAX_LIMIT: String(memoryMaxMb) }),
      // Isolated tasks see the directories where the driver mounts them (Nomad's task dir hook).
      ...(o.fsIsolation === "chroot" || o.fsIsolation === "image"
        ? { NOMAD_ALLOC_DIR: "/alloc", NOMAD_TASK_DIR: "/local", NOMAD_SECRETS_DIR: "/secrets" }
        : o.dirs.env),
      ...o.env,
    },
    resources: {
      allocatedResources: { cpu: { cpuShares }, memory: { memoryMb, memoryMaxMb } },
      // PercentTicks: the task's share of the node's compute, as Nomad's task runner computes it.
      linuxResources: {
        cpuShares,
        memoryLimitBytes: memoryLimitMb * 1024n * 1024n,
        PercentTicks: Number(cpuShares) / (o.totalComputeMhz ?? nodeTotalComputeMhz()),
        ...(cores.length > 0 && { cpusetCpus: cores.join(",") }),
        ...(o.cpusetCgroup !== undefined && { cpusetCgroup: o.cpusetCgroup }),
      },
    },
    user: o.user ?? "",
    allocDir: o.dirs.allocDir,
    stdoutPath: o.stdoutPath,
    stderrPath: o.stderrPath,
    msgpackDriverConfig: o.msgpackDriverConfig,
    networkIsolationSpec: o.networkIsolation,
  };
}

/**
 * The task handle as Nomad's client hands it to RecoverTask after an agent restart: read back from
 * its state database, which does not keep the task's `config` block (Go's
 * `TaskConfig.rawDriverConfig` is unexported, so the msgpack codec skips it). A driver must
 * re-attach from its `driver_state`; a RecoverTask with this handle tests that it does. (After a
 * restart of the plugin alone Nomad sends the handle it holds in memory, config included.)
 *
 * @example
 * ```ts
 * const { handle } = await first.driver.startTask({ task });
 * // ... the agent restarts, and with it the plugin ...
 * await second.driver.recoverTask({ taskId: task.id, handle: restoredTaskHandle(handle!) });
 * ```
 */
export function restoredTaskHandle<H extends TaskHandle | undefined>(handle: H): H {
  if (handle?.config === undefined) return handle;
  return { ...handle, config: { ...handle.config, msgpackDriverConfig: new Uint8Array() } };
}
