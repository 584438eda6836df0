export { createRawExecDriver, pluginConfigSchema, taskConfigSchema, PLUGIN_NAME, PLUGIN_VERSION } from "./driver.js";
export type { PluginConfig, TaskConfig, RawExecDriverOptions } from "./driver.js";
export type { RawExecState } from "./task.js";
