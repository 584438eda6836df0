import { writeFileSync } from "node:fs";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { ExecTaskStreamingRequest, ExecTaskStreamingResponseSchema } from "@nomadkit/protocol/driver";
import type {
  ExecRequest,
  ExecResponseSchema,
  LaunchRequest,
  LaunchResponseSchema,
  ProcessStateSchema,
  ShutdownRequest,
  SignalRequest,
  StatsRequest,
  StatsResponseSchema,
  UpdateResourcesRequest,
  WaitResponseSchema,
} from "@nomadkit/protocol/executor";
import type { ExecutorHandlers } from "../gen/hashicorp/nomad/plugins/executor/proto/executor_nomadkit.js";
import type { HostCompute } from "../stats/host.js";
import { ProcessTreeSampler, pollTaskStats } from "../stats/sampler.js";
import { execInContext } from "./exec.js";
import { execStreamingInTask } from "./exec-streaming.js";
import { TaskCgroups } from "./cgroups.js";
import { TaskProcess, type TaskExit } from "./process.js";
import { anySignal } from "@nomadkit/client/runtime";
import { Aborted, untilAborted } from "../runtime/until-aborted.js";

/** Version string the executor reports (Nomad's ExecutorVersionLatest). */
export const EXECUTOR_VERSION = "2.0.0";

/** Minimal logger the executor uses (compatible with `@nomadkit/server`'s Logger). */
export interface ExecutorLogger {
  /** Log at debug (ignored UpdateResources calls). */
  debug(message: string, fields?: Record<string, unknown>): void;
  /** Log at info (task launched, exited, shut down). */
  info(message: string, fields?: Record<string, unknown>): void;
  /** Log at warn. */
  warn(message: string, fields?: Record<string, unknown>): void;
  /** Log at error. */
  error(message: string, fields?: Record<string, unknown>): void;
}

/** Handles an ExecStreaming call in the task's context (wired to the SDK's exec engine). */
export type ExecStreamingHandler = (
  task: TaskProcess,
  requests: AsyncIterable<ExecTaskStreamingRequest>,
  context: HandlerContext,
) => AsyncIterable<MessageInitShape<typeof ExecTaskStreamingResponseSchema>>;

/** Options for {@link ExecutorService}. */
export interface ExecutorServiceOptions {
  /** Host capacity for `total_ticks`; default detected. */
  host?: HostCompute;
  /** Where task lifecycle events are logged; default nowhere. */
  logger?: ExecutorLogger;
  /** Called after Shutdown has stopped the task and its reply is on its way (the executor exits there). */
  afterShutdown?: () => void;
  /** ExecStreaming implementation; default {@link execStreamingInTask} (pipes / node-pty in the task's context). */
  execStreaming?: ExecStreamingHandler;
  /** Output cap of buffered Exec, bytes. */
  execOutputLimit?: number;
}

/** Stats intervals whose sampler the executor keeps once no stream uses it (Nomad's client uses one). */
const MAX_KEPT_SAMPLERS = 4;

const noLog: ExecutorLogger = { debug() {}, info() {}, warn() {}, error() {} };

function processState(s: TaskExit | { pid: number; time: Date }): MessageInitShape<typeof ProcessStateSchema> {
  const e = s as Partial<TaskExit>;
  return {
    pid: s.pid,
    // Running: -1, as Nomad's Launch answers (0 would read as "exited, successfully").
    exitCode: e.exitCode ?? -1,
    signal: e.signal ?? 0,
    time: timestampFromDate(s.time),
    oomKilled: e.oomKilled ?? false,
  };
}

/** The value of `name` in a `KEY=VALUE` list, if set. */
function envValue(env: readonly string[], name: string): string | undefined {
  const entry = env.find((e) => e.startsWith(`${name}=`));
  return entry?.slice(name.length + 1) || undefined;
}

/** `oom_score_adj` for this executor and so its task; -1000..1000, else InvalidArgument naming it. */
function setOomScoreAdj(value: number, log: ExecutorLogger): void {
  if (!Number.isInteger(value) || value < -1000 || value > 1000) {
    throw new ConnectError(`oom_score_adj: ${value} is out of range (-1000 to 1000)`, Code.InvalidArgument);
  }
  try {
    writeFileSync("/proc/self/oom_score_adj", String(value));
  } catch (err) {
    // Lowering it takes CAP_SYS_RESOURCE: Nomad's executor goes on without it too.
    log.warn("cannot set oom_score_adj", { value, error: (err as Error).message });
  }
}

/** `p`, or the signal's reason once it fires; an abandoned call is not kept until `p` settles. */
function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  return untilAborted(p, signal).catch((e: unknown) => {
    throw e instanceof Aborted ? e.reason : e;
  });
}

/**
 * The Executor service for ONE task (`hashicorp.nomad.plugins.executor.proto.Executor`): Launch,
 * Wait, Shutdown, UpdateResources, Version, Signal, Exec, ExecStreaming and Stats. Register it with
 * the generated `registerExecutor(router, service)`; {@link runExecutorMain} does all of that.
 *
 * @example
 * ```ts
 * import { servePlugin } from "@nomadkit/server";
 * import { registerExecutor } from "@nomadkit/server/gen/hashicorp/nomad/plugins/executor/proto/executor_nomadkit.js";
 * import { ExecutorService } from "@nomadkit/server/executor";
 * const service = new ExecutorService();
 * await servePlugin({ register: (router) => registerExecutor(router, service) });
 * ```
 */
export class ExecutorService implements Partial<ExecutorHandlers> {
  private task: TaskProcess | undefined;
  private launching: Promise<TaskProcess> | undefined;
  private launchAbort: AbortController | undefined;
  // The Launch call under way (settles, never rejects, when it returns), whether one ever
  // succeeded, and whether Launch is refused for good (the executor is exiting unused).
  private launchCall: Promise<void> | undefined;
  private launchedOnce = false;
  private retired = false;
  private readonly log: ExecutorLogger;
  /** Stats samplers of the task by interval, kept across Stats streams (see takeSampler). */
  private readonly samplers = new WeakMap<TaskProcess, Map<number, { sampler: ProcessTreeSampler; inUse: boolean }>>();

  constructor(private readonly options: ExecutorServiceOptions = {}) {
    this.log = options.logger ?? noLog;
  }

  /** The launched task, if any. */
  get current(): TaskProcess | undefined {
    return this.task;
  }

  private requireTask(rpc: string): TaskProcess {
    if (!this.task) throw new ConnectError(`${rpc}: no task has been launched in this executor`, Code.FailedPrecondition);
    return this.task;
  }

  /**
   * Retires an executor that never ran a task: once no Launch is under way (one is waited for),
   * if none has succeeded and `stillUnused()` holds, Launch is refused from then on (Unavailable)
   * and the result is true. {@link runExecutorMain} asks when its host has gone (a driver killed
   * during StartTask), then exits: nobody else knows the executor's address. Once a Launch has
   * succeeded the answer is always false: the task's next driver reattaches.
   *
   * @example
   * ```ts
   * if (await service.retireIfUnused(() => hostConnections === 0)) await served.shutdown("host gone");
   * ```
   */
  async retireIfUnused(stillUnused: () => boolean = () => true): Promise<boolean> {
    while (this.launchCall !== undefined) await this.launchCall;
    if (this.retired) return true;
    if (this.launchedOnce || !stillUnused()) return false;
    this.retired = true;
    return true;
  }

  // Return types declared, not inferred: the inferred ones reach the .d.ts with `$typeName?: undefined`,
  // which a consumer's exactOptionalPropertyTypes refuses against the handlers interface.
  async launch(req: LaunchRequest, ctx?: Pick<HandlerContext, "signal">): Promise<MessageInitShape<typeof LaunchResponseSchema>> {
    if (this.retired) throw new ConnectError("launch: this executor is exiting: its host went away before any task was launched", Code.Unavailable);
    if (this.launching) throw new ConnectError("launch: this executor already runs a task (one task per executor)", Code.FailedPrecondition);
    let settle!: () => void;
    const call = new Promise<void>((resolve) => (settle = resolve));
    this.launchCall = call;
    try {
      const res = await this.launchTask(req, ctx);
      this.launchedOnce = true;
      return res;
    } finally {
      if (this.launchCall === call) this.launchCall = undefined;
      settle();
    }
  }

  private async launchTask(req: LaunchRequest, ctx?: Pick<HandlerContext, "signal">): Promise<MessageInitShape<typeof LaunchResponseSchema>> {
    const cgroups = TaskCgroups.resolve({
      cgroupV2Override: req.cgroupV2Override,
      cgroupV1Override: req.cgroupV1Override,
      cpusetCgroup: req.cpusetCgroup || req.resources?.linuxResources?.cpusetCgroup,
      cpusetField: req.cpusetCgroup ? "cpuset_cgroup" : "resources.linux_resources.cpuset_cgroup",
      // As Nomad's executor finds a task's v1 cgroups beside a shared cpuset: from its environment.
      allocId: envValue(req.env, "NOMAD_ALLOC_ID"),
      taskName: envValue(req.env, "NOMAD_TASK_NAME"),
    });
    // Nomad's universal executor: the limits go into the task's cgroups before it starts (drivers
    // that own resource management send no linux_resources), and oom_score_adj onto the executor,
    // which the task inherits. Refusals are logged and the task starts anyway, as in Nomad.
    const linux = req.resources?.linuxResources;
    if (cgroups !== undefined && linux !== undefined) {
      const memory = req.resources?.allocatedResources?.memory;
      const refused = cgroups.applyLimits({
        memoryMb: memory?.memoryMb ?? 0n,
        memoryMaxMb: memory?.memoryMaxMb ?? 0n,
        cpuShares: linux.cpuShares,
        cpusetCpus: linux.cpusetCpus,
      });
      for (const r of refused) this.log.warn("cannot set a resource limit of the task's cgroup", { write: r });
    }
    // 0 too: a task must not inherit the agent's own value (Nomad's unit runs it at -1000, so a task
    // could never be OOM-killed); Nomad's executor writes it every time for that reason.
    setOomScoreAdj(req.oomScoreAdj, this.log);
    // Shutdown gives up a launch still waiting for a reader of its log FIFOs, as does its caller.
    this.launchAbort = new AbortController();
    this.launching = TaskProcess.launch({
      cmd: req.cmd,
      args: req.args,
      env: req.env,
      user: req.user,
      taskDir: req.taskDir,
      workDir: req.workDir,
      stdoutPath: req.stdoutPath,
      stderrPath: req.stderrPath,
      network: req.networkIsolation,
      cgroups,
      signal: ctx ? anySignal([ctx.signal, this.launchAbort.signal]) : this.launchAbort.signal,
    });
    let task: TaskProcess;
    try {
      task = await this.launching;
    } catch (err) {
      this.launching = undefined;
      throw err;
    }
    this.task = task;
    if (ctx?.signal.aborted) {
      // The caller gave up (a cancelled StartTask): it has no handle to stop this task with, ever.
      await task.shutdown("SIGKILL", 0).catch(() => undefined);
      throw new ConnectError(`launch: cancelled by the caller; the task (pid ${task.pid}) was killed`, Code.Canceled);
    }
    this.log.info("task launched", { pid: task.pid, cmd: req.cmd, cgroups: cgroups?.paths.join(",") });
    void task.wait().then((s) => this.log.info("task exited", { pid: s.pid, exit_code: s.exitCode, signal: s.signal, oom_killed: s.oomKilled }));
    return {
      /** The started task: pid and start time. */
      process: processState({ pid: task.pid, time: task.startedAt }),
    };
  }

  async wait(_req: unknown, ctx: HandlerContext): Promise<MessageInitShape<typeof WaitResponseSchema>> {
    const task = this.requireTask("wait");
    const state = await abortable(task.wait(), ctx.signal);
    return {
      /** How the task ended: exit code, signal, time, OOM kill. */
      process: processState(state),
    };
  }

  async shutdown(req: ShutdownRequest) {
    // A launch still under way (the driver's StartTask failed or was cancelled meanwhile) is stopped
    // too: returning now would let the executor exit and the task start with nobody to stop it.
    this.launchAbort?.abort();
    const task = this.task ?? (await this.launching?.catch(() => undefined));
    if (task) {
      const graceMs = Number(req.gracePeriod / 1_000_000n);
      const state = await task.shutdown(req.signal || undefined, graceMs);
      this.log.info("task shut down", { pid: state.pid, exit_code: state.exitCode, signal: state.signal });
    }
    if (this.options.afterShutdown) setImmediate(this.options.afterShutdown);
    return {};
  }

  updateResources(_req: UpdateResourcesRequest) {
    // Limits need a resource-controlling cgroup; without one (the default) there is nothing to apply.
    this.log.debug("update resources: no resource controller, ignored");
    return {};
  }

  version() {
    return {
      /** {@link EXECUTOR_VERSION}. */
      version: EXECUTOR_VERSION,
    };
  }

  signal(req: SignalRequest) {
    this.requireTask("signal").signal(req.signal);
    return {};
  }

  async exec(req: ExecRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof ExecResponseSchema>> {
    const task = this.requireTask("exec");
    const opts: Parameters<typeof execInContext>[3] = { signal: ctx.signal };
    if (req.deadline) {
      // Go takes any time; a Date only ±8.64e15 ms. Beyond that the deadline is Invalid (NaN), which
      // killed the command at once: a deadline that far ahead is none, one that far back has passed.
      const at = timestampDate(req.deadline);
      if (!Number.isNaN(at.getTime())) opts.deadline = at;
      else if (req.deadline.seconds < 0n) opts.deadline = new Date(0);
    }
    if (this.options.execOutputLimit !== undefined) opts.outputLimit = this.options.execOutputLimit;
    const r = await execInContext(task.context, req.cmd, req.args, opts);
    return {
      /** stdout and stderr of the command, interleaved, up to the output limit. */
      output: r.output,
      /** Exit status; -1 when killed by a signal, as Nomad's executor (ExecScript). */
      exitCode: r.exitCode,
    };
  }

  async *stats(req: StatsRequest, ctx: HandlerContext): AsyncIterable<MessageInitShape<typeof StatsResponseSchema>> {
    const task = this.requireTask("stats");
    const intervalMs = req.interval > 0n ? Math.max(1, Number(req.interval / 1_000_000n)) : 1000;
    const sampler = this.takeSampler(task, intervalMs);
    try {
      for await (const stats of pollTaskStats(sampler, "", { intervalMs, signal: ctx.signal })) yield { stats };
    } finally {
      this.releaseSampler(task, intervalMs, sampler);
    }
  }

  /**
   * A sampler for one Stats stream of the task: the one the last stream at the same interval used,
   * as Nomad's executor keeps its CPU trackers for its whole life, so a stream opened again (by a
   * restarted plugin, or Nomad reopening TaskStats) reports the CPU used since the previous sample,
   * not 0 % as for processes seen for the first time. A sampler serves one stream at a time (two
   * streams advancing the same readings would each measure a sliver of their interval): while that
   * one is in use (a stream beside it, or one still ending as the next begins), a fork of it.
   */
  private takeSampler(task: TaskProcess, intervalMs: number): ProcessTreeSampler {
    let kept = this.samplers.get(task);
    if (kept === undefined) this.samplers.set(task, (kept = new Map()));
    const last = kept.get(intervalMs);
    const sampler = last === undefined ? this.newSampler(task) : last.inUse ? last.sampler.fork() : last.sampler;
    kept.delete(intervalMs);
    kept.set(intervalMs, { sampler, inUse: true }); // most recently used last
    for (const interval of kept.keys()) {
      if (kept.size <= MAX_KEPT_SAMPLERS) break;
      kept.delete(interval);
    }
    return sampler;
  }

  /** A stream's sampler is free again, unless a later stream at its interval has taken its place. */
  private releaseSampler(task: TaskProcess, intervalMs: number, sampler: ProcessTreeSampler): void {
    const last = this.samplers.get(task)?.get(intervalMs);
    if (last?.sampler === sampler) last.inUse = false;
  }

  private newSampler(task: TaskProcess): ProcessTreeSampler {
    const samplerOptions: ConstructorParameters<typeof ProcessTreeSampler>[1] = {};
    if (this.options.host) samplerOptions.host = this.options.host;
    const cgroupPath = task.context.cgroups?.v2Path;
    const cgroupV1 = task.context.cgroups?.v1Stats;
    if (cgroupPath) samplerOptions.cgroupPath = cgroupPath;
    else if (cgroupV1) samplerOptions.cgroupV1 = cgroupV1;
    const cgroups = task.context.cgroups;
    if (cgroups) {
      // The processes of the cgroup that holds only the task (a v1 memory cgroup may be shared);
      // none listed means it has no such cgroup, or it is empty: the sampler falls back.
      samplerOptions.listPids = () => {
        const pids = cgroups.pids();
        return pids.length > 0 ? pids : undefined;
      };
    }
    return new ProcessTreeSampler(task.pid, samplerOptions);
  }

  async *execStreaming(
    requests: AsyncIterable<ExecTaskStreamingRequest>,
    ctx: HandlerContext,
  ): AsyncIterable<MessageInitShape<typeof ExecTaskStreamingResponseSchema>> {
    const task = this.requireTask("exec_streaming");
    yield* (this.options.execStreaming ?? execStreamingInTask)(task, requests, ctx);
  }
}
