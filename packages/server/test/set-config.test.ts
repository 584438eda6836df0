// SetConfig the driver refuses does not take effect: the config, Nomad's agent config and what
// capabilities derive from it stay as the last accepted SetConfig left them.
import { encode } from "@msgpack/msgpack";
import { BasePluginClient, DriverClient, createUnixSocketTransport } from "@nomadkit/client";
import { DriverCapabilities_MountConfigs } from "@nomadkit/protocol/driver";
import { afterAll, beforeAll, expect, it } from "vitest";
import { spec } from "../src/config/index.js";
import { createDriverHandlers, defineDriver, type DriverHost } from "../src/driver/index.js";
import { registerBasePlugin } from "../src/gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js";
import { registerDriver } from "../src/gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { ServerRuntime } from "../src/runtime/server-runtime.js";
import { startServer, type TestServer } from "./runtime-helpers.js";

let server: TestServer;
let host: DriverHost;
let base: BasePluginClient;
let driver: DriverClient;

beforeAll(async () => {
  host = createDriverHandlers(
    defineDriver({
      name: "set-config",
      version: "0.0.1",
      configSchema: spec.object({ level: spec.attr("string", { required: true }), network: spec.attr("bool") }),
      setConfig: (cfg) => {
        if (cfg.level === "bad") throw new Error("level: must not be bad");
      },
      capabilities: (cfg) => ({
        mustCreateNetwork: cfg?.network === true,
        ...(cfg?.level === "mounts" ? { mountConfigs: DriverCapabilities_MountConfigs.ANY_MOUNTS } : {}),
      }),
      fingerprint: () => ({ health: "healthy" }),
      startTask: () => {},
      waitTask: () => ({ exitCode: 0 }),
      stopTask: () => {},
      destroyTask: () => {},
    }),
  );
  const drop = () => {};
  server = await startServer((router) => {
    const runtime = new ServerRuntime({ logger: { trace: drop, debug: drop, info: drop, warn: drop, error: drop } });
    registerBasePlugin(router, host.base, runtime);
    registerDriver(router, host.driver, runtime);
  });
  const transport = createUnixSocketTransport(server.socketPath);
  base = new BasePluginClient(transport);
  driver = new DriverClient(transport);
});

afterAll(async () => {
  await host?.close();
  await server?.close();
});

it("keeps the last accepted plugin config when the driver refuses a new one", async () => {
  await base.setConfig({ msgpackConfig: encode({ level: "good", network: false }) });
  const refused = await base.setConfig({ msgpackConfig: encode({ level: "bad", network: true }) }).catch((e: unknown) => e);
  expect(String(refused)).toContain("level: must not be bad");
  expect(host.context.config).toEqual({ level: "good", network: false });
  expect((await driver.capabilities({})).capabilities?.mustCreateNetwork).toBe(false);
});

it("says NO_MOUNTS unless the driver says it makes mounts (the wire's 0 means ANY_MOUNTS)", async () => {
  await base.setConfig({ msgpackConfig: encode({ level: "good", network: false }) });
  expect((await driver.capabilities({})).capabilities?.mountConfigs).toBe(DriverCapabilities_MountConfigs.NO_MOUNTS);
  await base.setConfig({ msgpackConfig: encode({ level: "mounts", network: false }) });
  expect((await driver.capabilities({})).capabilities?.mountConfigs).toBe(DriverCapabilities_MountConfigs.ANY_MOUNTS);
});
