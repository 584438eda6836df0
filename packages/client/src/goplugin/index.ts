/**
 * The host side of hashicorp/go-plugin: launch or reattach plugins, parse their handshake and logs.
 * @module
 */
export {
  launchPlugin,
  reattachPlugin,
  NOMAD_PLUGIN_COOKIE,
  DEFAULT_START_TIMEOUT_MS,
  DEFAULT_KILL_TIMEOUT_MS,
} from "./launch.js";
export type {
  LaunchPluginOptions,
  ReattachPluginOptions,
  PluginConnectOptions,
  PluginClient,
  PluginExit,
  ReattachConfig,
} from "./launch.js";
export { parseHandshake, PluginLaunchError } from "./handshake.js";
export { removePluginSocketDir } from "./socket-dir.js";
export type { Handshake } from "./handshake.js";
export { LineReader, parseLogLine } from "./hclog.js";
export type { PluginLogEntry, PluginLogger, PluginLogLevel } from "./hclog.js";
export {
  generateSelfSignedCertificate,
  certDerToHandshakeField,
} from "./certificate.js";
export type { SelfSignedCertificate } from "./certificate.js";
