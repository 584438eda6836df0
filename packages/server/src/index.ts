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
