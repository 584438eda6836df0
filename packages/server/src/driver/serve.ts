/** `serveDriver`: a Driver served as a go-plugin plugin binary, the way Nomad launches drivers. */
import type { ConnectRouter } from "@connectrpc/connect";
import { registerBasePlugin } from "../gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js";
import { registerDriver } from "../gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { servePlugin, type PluginContext, type ServePluginOptions, type ServedPlugin } from "../goplugin/serve.js";
import { createLogger } from "../log/index.js";
import { createDriverHandlers, type DriverHandlerOptions } from "./adapter.js";
import type { Driver, DriverContext } from "./types.js";

/** Options of {@link serveDriver}: servePlugin's plus the driver adapter's. */
export interface ServeDriverOptions extends Omit<ServePluginOptions, "register" | "logger">, Omit<DriverHandlerOptions, "logger"> {
  /** The plugin logger (hclog JSON on stderr). Default: `createLogger({ name: driver.name })`. */
  logger?: ServePluginOptions["logger"];
  /** Register additional services next to BasePlugin and Driver. */
  register?(router: ConnectRouter, ctx: PluginContext): void;
  /**
   * Called once when shutdown starts, after the driver's streams ended and `driver.shutdown` ran,
   * while the server still answers. Bounded by `shutdownTimeoutMs` together with `driver.shutdown`.
   */
  onShutdown?(): void | Promise<void>;
}

/** A running driver plugin. */
export interface ServedDriver<PC = unknown, TC = unknown> extends ServedPlugin {
  /** The context the driver's methods receive (events, fingerprint, config, tasks). */
  readonly context: DriverContext<PC, TC>;
}

/**
 * Serve `driver` as a Nomad task-driver plugin: go-plugin handshake and services (servePlugin),
 * BasePlugin (PluginInfo with API version v0.1.0, ConfigSchema, SetConfig) and Driver. Call it from
 * the plugin binary's entry point. On shutdown, the long-lived streams end and `driver.shutdown`
 * runs once.
 *
 * @example
 * ```ts
 * #!/usr/bin/env node
 * import { defineDriver, serveDriver, spec } from "@nomadkit/server";
 * const driver = defineDriver({ name: "hello", version: "0.1.0", ... });
 * void serveDriver(driver); // not top-level await: `nomadkit bundle` could then only make an ES module, without a code cache
 * ```
 */
export async function serveDriver<PC, TC>(driver: Driver<PC, TC>, options: ServeDriverOptions = {}): Promise<ServedDriver<PC, TC>> {
  const logger = options.logger ?? createLogger({ name: driver.name });
  // Built before listening, so an invalid driver (bad version, broken schema) fails at start-up.
  const host = createDriverHandlers(driver, { ...options, logger });
  const { register, onShutdown } = options;
  const served = await servePlugin({
    ...options,
    logger,
    register(router, ctx) {
      ctx.signal.addEventListener("abort", () => void host.close().catch(() => {}), { once: true });
      registerBasePlugin(router, host.base, ctx.runtime);
      registerDriver(router, host.driver, ctx.runtime);
      register?.(router, ctx);
    },
    async onShutdown() {
      try {
        await host.close();
      } catch (err) {
        logger.error("driver shutdown failed", { error: err as Error });
      }
      await onShutdown?.();
    },
  });
  return Object.assign(served, { context: host.context });
}
