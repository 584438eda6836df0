// Start-up failures on both sides of the handshake, with real processes.
import { afterEach, describe, expect, it } from "vitest";
import { PluginLaunchError, launchPlugin } from "@nomadkit/client";
import { negotiateProtocolVersion } from "../src/goplugin/env.js";
import {
  NOMAD_COOKIE,
  fixture,
  launchTestDriver,
  spawnRaw,
  testDriver,
} from "./goplugin-helpers.js";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("plugin side of the handshake", () => {
  it("without the magic cookie: a human message on stderr, exit 1, nothing on stdout", async () => {
    const env = { ...process.env };
    delete env.NOMAD_PLUGIN_MAGIC_COOKIE;
    const raw = spawnRaw(testDriver, { ...env, NOMAD_PLUGIN_MAGIC_COOKIE: "" });
    const exit = await raw.exit;
    expect(exit.code).toBe(1);
    expect(raw.stdout()).toBe("");
    expect(raw.stderr()).toContain("This binary is a plugin");
    expect(raw.stderr()).toContain("NOMAD_PLUGIN_MAGIC_COOKIE");
  });

  it("with a wrong cookie value: exit 1", async () => {
    const raw = spawnRaw(testDriver, { NOMAD_PLUGIN_MAGIC_COOKIE: "nope" });
    expect((await raw.exit).code).toBe(1);
    expect(raw.stdout()).toBe("");
  });

  it("when the host offers no protocol version we speak: a clear error and exit 1", async () => {
    const raw = spawnRaw(testDriver, {
      ...NOMAD_COOKIE,
      PLUGIN_PROTOCOL_VERSIONS: "3,4",
    });
    expect((await raw.exit).code).toBe(1);
    expect(raw.stdout()).toBe("");
    expect(raw.stderr()).toContain("3, 4");
    expect(raw.stderr()).toContain("this plugin speaks 2");
  });

  it("picks the highest version both speak, and the plugin's lowest for a host that offers none (go-plugin)", () => {
    expect(negotiateProtocolVersion({ PLUGIN_PROTOCOL_VERSIONS: "1,2,3" }, [1, 2])).toBe(2);
    expect(negotiateProtocolVersion({ PLUGIN_PROTOCOL_VERSIONS: "1" }, [2, 1])).toBe(1);
    expect(negotiateProtocolVersion({}, [2, 1, 3])).toBe(1);
  });

  it("accepts a list of offered versions that includes 2", async () => {
    const raw = spawnRaw(testDriver, {
      ...NOMAD_COOKIE,
      PLUGIN_PROTOCOL_VERSIONS: "1,2",
    });
    cleanups.push(() => raw.child.kill("SIGKILL"));
    expect(await raw.firstLine).toMatch(/^1\|2\|unix\|/);
  });

  it("rejects a bad PLUGIN_MIN_PORT naming the variable", async () => {
    const raw = spawnRaw(testDriver, {
      ...NOMAD_COOKIE,
      PLUGIN_PROTOCOL_VERSIONS: "2",
      TEST_PLUGIN_MODE: "tcp",
      PLUGIN_MIN_PORT: "lots",
    });
    expect((await raw.exit).code).toBe(1);
    expect(raw.stderr()).toContain("PLUGIN_MIN_PORT");
  });
});

describe("host side of the handshake", () => {
  it("garbage on stdout before the handshake fails with the offending line", async () => {
    const err = await launchTestDriver("print-before").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PluginLaunchError);
    expect((err as Error).message).toContain("hello before the handshake");
    expect((err as Error).message).toContain("not a go-plugin handshake");
  });

  it("a plugin that never handshakes times out, quoting its stderr", async () => {
    const err = await launchPlugin(
      process.execPath,
      [fixture("never-handshakes.mjs")],
      { startTimeoutMs: 1500 },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PluginLaunchError);
    expect((err as Error).message).toContain(
      "did not complete the go-plugin handshake within 1500 ms",
    );
    expect((err as PluginLaunchError).stderr).toContain(
      "waiting for a database that never comes",
    );
    expect((err as Error).message).toContain(
      "waiting for a database that never comes",
    );
  });

  it("a plugin started without the cookie reports its exit and stderr", async () => {
    const err = await launchPlugin(process.execPath, [testDriver], {
      cookie: { key: "SOME_OTHER_COOKIE", value: "x" },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PluginLaunchError);
    expect((err as Error).message).toContain(
      "exited with status 1 before completing the go-plugin handshake",
    );
    expect((err as Error).message).toContain("This binary is a plugin");
  });

  it("a missing binary is named in the error", async () => {
    const err = await launchPlugin("/nonexistent/nomad-driver-x").catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(PluginLaunchError);
    expect((err as Error).message).toContain("/nonexistent/nomad-driver-x");
  });
});
