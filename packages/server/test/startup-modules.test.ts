// What a starting driver plugin loads. Nomad starts and kills a driver several times while an agent
// boots, each time for little more than PluginInfo and the config schemas, so the Node built-ins
// only later calls need stay unloaded until then: connect-node's transports (they bring zlib and
// https) load only for a call the direct path does not serve, node:v8 only when an exec session
// holds the young generation, perf_hooks (the `performance` global) never. Seen from inside the
// plugin: a preload records Node's list of loaded built-ins as the process exits.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { launchFixture } from "./fixtures/driver/harness.js";

const dir = mkdtempSync(join(tmpdir(), "nk-startup-modules-"));
const preload = join(dir, "record-builtins.cjs");
writeFileSync(
  preload,
  `process.once("exit", () => require("node:fs").writeFileSync(process.env.NK_BUILTINS_OUT, process.moduleLoadList.join("\\n")));\n`,
);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Built-in modules (`NativeModule x` entries) loaded by a plugin that served `calls` and shut down. */
async function builtinsAfter(calls: (plugin: Awaited<ReturnType<typeof launchFixture>>) => Promise<unknown>): Promise<string[]> {
  const out = join(dir, `builtins-${Math.random().toString(36).slice(2)}.txt`);
  const plugin = await launchFixture("minimal-driver", { env: { NODE_OPTIONS: `--require ${preload}`, NK_BUILTINS_OUT: out } });
  try {
    await calls(plugin);
  } finally {
    await plugin.kill();
  }
  return readFileSync(out, "utf8")
    .split("\n")
    .filter((l) => l.startsWith("NativeModule "))
    .map((l) => l.slice("NativeModule ".length));
}

describe("a starting driver plugin", () => {
  it("serves the handshake, PluginInfo and the config schemas without connect-node's transports, node:v8 or perf_hooks", async () => {
    const builtins = await builtinsAfter(async (plugin) => {
      expect((await plugin.basePlugin.pluginInfo({})).name).toBe("minimal");
      await plugin.basePlugin.configSchema({});
      await plugin.driver.taskConfigSchema({});
    });
    // The record is real: the plugin's own HTTP/2 server is in it.
    expect(builtins).toContain("http2");
    expect(builtins).not.toContain("zlib");
    expect(builtins).not.toContain("https");
    expect(builtins).not.toContain("v8");
    expect(builtins).not.toContain("perf_hooks");
  });
});
