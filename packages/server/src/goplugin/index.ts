/**
 * The plugin side of hashicorp/go-plugin: {@link servePlugin}.
 * @module
 */
export { servePlugin } from "./serve.js";
export type {
  PluginContext,
  ServePluginOptions,
  ServedPlugin,
} from "./serve.js";
export {
  NOMAD_HANDSHAKE,
  CORE_PROTOCOL_VERSION,
  PluginEnvironmentError,
} from "./env.js";
export type { HandshakeConfig } from "./env.js";
