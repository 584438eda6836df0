// Entry point of the nomadkit-rawexec plugin binary (bin/nomadkit-rawexec loads the built copy).
//
// This is serveDriver(driver) spelled out, for one reason: Capabilities must follow the agent's
// plugin config (create_network → must_create_network), which only arrives with SetConfig, while
// the SDK's adapter builds its Capabilities answer once, at start-up. So the handler asks the
// driver again on every call.
import { createDriverHandlers, createLogger, registerBasePlugin, registerDriver, servePlugin } from "@nomadkit/server";
import { createRawExecDriver } from "./driver.js";

const driver = createRawExecDriver();
const logger = createLogger({ name: driver.name });
const host = createDriverHandlers(driver, { logger });
const sdkCapabilities = host.driver.capabilities!;
host.driver.capabilities = async (req, ctx) => {
  const res = await sdkCapabilities(req, ctx);
  return { capabilities: { ...res.capabilities, ...driver.capabilities } };
};

void servePlugin({
  logger,
  register(router, ctx) {
    ctx.signal.addEventListener("abort", () => void host.close().catch(() => undefined), { once: true });
    registerBasePlugin(router, host.base, ctx.runtime);
    registerDriver(router, host.driver, ctx.runtime);
  },
  onShutdown: () => host.close(),
});
