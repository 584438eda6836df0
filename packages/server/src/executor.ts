/**
 * The nomadkit executor: a detached per-task supervisor process serving Nomad's
 * `hashicorp.nomad.plugins.executor.proto.Executor` over go-plugin, so tasks outlive driver
 * restarts; plus the driver-side handle (launch, reattach from `driver_state`, exec forwarding,
 * shared stats streams).
 *
 * @example
 * ```ts
 * import { launchExecutor, reattachExecutor } from "@nomadkit/server/executor";
 * const exe = await launchExecutor();
 * await exe.client.launch({ cmd: "/bin/sleep", args: ["60"], env: ["PATH=/bin:/usr/bin"] });
 * const state = exe.driverState(); // store in TaskHandle.driver_state
 * // after a driver restart:
 * const again = await reattachExecutor(exe.reattach);
 * const { process } = await again.client.wait({});
 * ```
 * @module
 */
export { runExecutorMain, parseExecutorArgs } from "./executor/main.js";
export type { ExecutorConfig, RunExecutorOptions } from "./executor/main.js";
export { ExecutorService, EXECUTOR_VERSION } from "./executor/service.js";
export type { ExecutorServiceOptions, ExecutorLogger, ExecStreamingHandler } from "./executor/service.js";
export { TaskProcess, DEFAULT_SHUTDOWN_SIGNAL } from "./executor/process.js";
export { TaskCgroups } from "./executor/cgroups.js";
export type { TaskCgroupsRequest, CgroupRoots, TaskLimits } from "./executor/cgroups.js";
export type { TaskExit, TaskLaunchOptions } from "./executor/process.js";
export { prepareTaskContext, spawnInContext, commandInContext, lookPath } from "./executor/context.js";
export { findTaskBinary } from "./exec/find-executable.js";
export type { TaskContext, TaskContextOptions } from "./executor/context.js";
export { execInContext, DEFAULT_EXEC_OUTPUT_LIMIT } from "./executor/exec.js";
export type { ExecOptions, BufferedExecResult } from "./executor/exec.js";
export { resolveUser, userCommand } from "./executor/user.js";
export type { ResolvedUser } from "./executor/user.js";
export { signalNumber, signalName } from "./executor/signals.js";
export {
  ExecutorHandle,
  launchExecutor,
  reattachExecutor,
  executorBinPath,
  encodeExecutorState,
  decodeExecutorState,
} from "./executor/launch.js";
export { isProcessAlive } from "./executor/pids.js";
export type { DriverStateParser, ExecutorReattach, LaunchExecutorOptions, ReattachExecutorOptions } from "./executor/launch.js";
export { execStreamingInTask } from "./executor/exec-streaming.js";
export { forwardExecStream } from "./executor/forward.js";
export { ExecutorStatsFeed } from "./executor/stats-feed.js";
export type { ExecutorStatsCall, ExecutorStatsSample } from "./executor/stats-feed.js";
export { OUTPUT_HANDOFF_HEADER, openHandedOutputs, closeHandedOutputs } from "./exec/handoff.js";
export type { HandedOutputs } from "./exec/handoff.js";
