/**
 * Launch and talk to Nomad plugins: {@link launchPlugin} starts a plugin binary the way Nomad does
 * (magic cookie, go-plugin handshake, unix socket or TCP, optional AutoMTLS) and returns typed
 * clients for its services; {@link reattachPlugin} connects to one that is already running. Every
 * generated client goes through one call layer ({@link ClientRuntime}), so errors mean the same
 * everywhere: {@link RecoverableError}, {@link PluginShutdownError}, {@link isCancellation}.
 *
 * @example
 * ```ts
 * import { launchPlugin, PluginShutdownError } from "@nomadkit/client";
 *
 * const plugin = await launchPlugin("/opt/nomad/plugins/nomad-driver-foo");
 * try {
 *   const caps = await plugin.driver.capabilities({}, { timeoutMs: 5_000 });
 *   console.log(caps.capabilities?.sendSignals);
 * } catch (err) {
 *   if (err instanceof PluginShutdownError) console.error("plugin exited:", await plugin.exited);
 *   else throw err;
 * } finally {
 *   await plugin.kill();
 * }
 * ```
 * @module
 */
export {
  RecoverableError,
  PluginShutdownError,
  isCancellation,
  cancellationError,
} from "./errors.js";
export {
  ClientRuntime,
  clientRuntime,
  DEFAULT_SHUTDOWN_GRACE_MS,
  type CallOptions,
  type ClientOptions,
  type PluginExitSignal,
  rawBidiStream,
  type RawFrame,
} from "./runtime.js";
export { RequestQueue, type RequestQueueOptions } from "./request-queue.js";
export { formatCpuList, MAX_CPU_NUMBER, parseCpuList } from "./cpu-list.js";
export { createTaskDirs, type TaskDirs, type TaskDirsEnv } from "./task-dirs.js";
export { makeDirectory } from "./make-directory.js";
export {
  createTaskCgroup,
  DEFAULT_CGROUP_PARENTS,
  TaskCgroupUnavailableError,
  type CgroupParents,
  type TaskCgroup,
  type TaskCgroupDestroySyncOptions,
  type TaskCgroupOptions,
} from "./task-cgroup.js";
export { openTaskLogs, type LateOutput, type TaskLogs, type TaskLogsOptions } from "./task-logs.js";
export { procInfo, processDescendants, type ProcInfo } from "./process-tree.js";
export { nomadAgentConfig, nodeTotalComputeMhz, type NomadAgentConfigOptions } from "./agent-config.js";
export { checkTaskResources, type TaskResources } from "./task-resources.js";
export { DEFAULT_TASK_MEMORY_MB, nomadTaskConfig, NOMAD_ENV_DENYLIST, restoredTaskHandle, type NomadTaskConfig, type NomadTaskConfigOptions, type TaskId } from "./task-config.js";
export { createUnixSocketTransport, type UnixSocketTransportOptions } from "./runtime/transport.js";
export { DEFAULT_CONNECT_TIMEOUT_MS } from "./runtime/h2-handshake.js";
export * from "./gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js";
export * from "./gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
export * from "./gen/hashicorp/nomad/plugins/executor/proto/executor_nomadkit.js";
export * from "./gen/hashicorp/nomad/plugins/device/device_nomadkit.js";
export * from "./gen/plugin/grpc_controller_nomadkit.js";
export * from "./gen/plugin/grpc_stdio_nomadkit.js";
export * from "./gen/plugin/grpc_broker_nomadkit.js";
export * from "./gen/grpc/health/v1/health_nomadkit.js";
export * from "./goplugin/index.js";
