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
} from "./runtime.js";
export { createUnixSocketTransport, type UnixSocketTransportOptions } from "./runtime/transport.js";
export * from "./gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js";
export * from "./gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
export * from "./gen/hashicorp/nomad/plugins/executor/proto/executor_nomadkit.js";
export * from "./gen/hashicorp/nomad/plugins/device/device_nomadkit.js";
export * from "./gen/plugin/grpc_controller_nomadkit.js";
export * from "./gen/plugin/grpc_stdio_nomadkit.js";
export * from "./gen/plugin/grpc_broker_nomadkit.js";
export * from "./gen/grpc/health/v1/health_nomadkit.js";
export * from "./goplugin/index.js";
