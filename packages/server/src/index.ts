/**
 * Write Nomad task-driver plugins: describe the driver with {@link defineDriver} (config schemas
 * built with {@link spec}), and {@link serveDriver} serves it as an ordinary go-plugin plugin that
 * Nomad launches from its `plugin_dir`. {@link servePlugin} is the layer below, for any set of
 * go-plugin services registered with the generated `registerX` helpers. Executor, network
 * namespaces and stats readers are in the `/executor`, `/network` and `/stats` entry points.
 *
 * @example
 * ```ts
 * #!/usr/bin/env node
 * import { defineDriver, serveDriver, spec, type TaskExit } from "@nomadkit/server";
 *
 * const exits = new Map<string, { exit: Promise<TaskExit>; end: (exit: TaskExit) => void }>();
 * void serveDriver(
 *   defineDriver({
 *     name: "hello",
 *     version: "0.1.0",
 *     taskConfigSchema: spec.object({ message: spec.attr("string", { required: true }) }),
 *     startTask(task, ctx) {
 *       ctx.logger.info("starting", { message: task.driverConfig.message });
 *       let end!: (exit: TaskExit) => void;
 *       exits.set(task.id, { exit: new Promise<TaskExit>((resolve) => (end = resolve)), end });
 *     },
 *     waitTask: (taskId) => exits.get(taskId)!.exit, // every WaitTask gets the same exit
 *     stopTask(taskId) { exits.get(taskId)?.end({ exitCode: 0 }); },
 *     destroyTask(taskId) { exits.delete(taskId); },
 *   }),
 * );
 * ```
 * @module
 */
export * from "./goplugin/index.js";
export { createLogger } from "./log/index.js";
export type { Logger, LoggerOptions, LogLevel, LogFields, LogMethod } from "./log/index.js";
export {
  ServerRuntime,
  defaultServerRuntime,
  serverRuntime,
  noopLogger,
  pluginAdapterDefaults,
  createPluginHandler,
  useNodeTextEncoding,
  fixYoungGenerationSize,
  RecoverableError,
  PluginShutdownError,
  isCancellation,
  cancellationError,
  type ServerRuntimeOptions,
  type HandlerContext,
  type MaybePromise,
  type Logger as RuntimeLogger,
  type LogFn,
} from "./runtime.js";
export * from "./gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js";
export * from "./gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
export * from "./gen/hashicorp/nomad/plugins/executor/proto/executor_nomadkit.js";
export * from "./gen/hashicorp/nomad/plugins/device/device_nomadkit.js";
export * from "./gen/plugin/grpc_controller_nomadkit.js";
export * from "./gen/plugin/grpc_stdio_nomadkit.js";
export * from "./gen/plugin/grpc_broker_nomadkit.js";
export * from "./gen/grpc/health/v1/health_nomadkit.js";
export * from "./driver/index.js";
export * from "./config/index.js";
export * from "./exec/index.js";
