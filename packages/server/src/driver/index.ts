/**
 * The driver authoring API: the {@link Driver} interface, {@link serveDriver}, and the adapter that
 * turns a driver into BasePlugin/Driver gRPC handlers.
 * @module
 */
export {
  defineDriver,
  type Driver,
  type DriverTask,
  type StartTaskResult,
  type RecoveredTask,
  type TaskExit,
  type TaskStateName,
  type TaskInspection,
  type ResourceUsageInput,
  type TaskStatsInput,
  type AttributeValue,
  type HealthName,
  type Fingerprint,
  type TaskEventInput,
  type TaskEventEmitter,
  type FingerprintControl,
  type TaskInfo,
  type DriverContext,
  type CallContext,
  type TaskStatsContext,
  type StopTaskOptions,
  type DestroyTaskOptions,
  type ExecTaskOptions,
  type ExecTaskResult,
  type CreateNetworkResult,
  type Capabilities,
} from "./types.js";
export { createDriverHandlers, DRIVER_PLUGIN_API_VERSION, type DriverHandlerOptions, type DriverHost } from "./adapter.js";
export { serveDriver, type ServeDriverOptions, type ServedDriver } from "./serve.js";
export { RecoverableError, recoverable, unrecoverable, taskNotFound, invalidArgument, failedPrecondition } from "./errors.js";
export { normalizeTaskStats, computeFromTopology, statsIntervalMs, DEFAULT_STATS_INTERVAL_MS } from "./stats.js";
export { toFingerprintResponse, toAttribute, DEFAULT_FINGERPRINT_INTERVAL_MS } from "./fingerprint.js";
// The enums a driver's `capabilities` use, so a driver needs no direct dependency on
// @nomadkit/protocol (with npm's linked install strategy it could not import it). The adapter loads
// their module anyway: re-exporting them adds nothing to a plugin's start-up.
export {
  DriverCapabilities_FSIsolation,
  DriverCapabilities_MountConfigs,
  NetworkIsolationSpec_NetworkIsolationMode,
  type NetworkIsolationSpec,
} from "@nomadkit/protocol/driver";
