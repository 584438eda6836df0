// A bundled plugin whose load launch's fast path has handed over to the plugin's own code, and that
// code never takes the transport over (its entry throws, or ends without calling servePlugin), or
// the host stops it meanwhile: the host's calls must end with a status naming why, and the process
// must exit (go-plugin notices an exited plugin; one that keeps its socket open hangs every call).
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  launchPlugin,
  PluginShutdownError,
  type PluginClient,
} from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { until } from "./processes.js";

const bin = fileURLToPath(new URL("../bin/nomadkit.js", import.meta.url));
const root = fileURLToPath(new URL("../../../", import.meta.url));

// Inside the repo, so the driver's imports resolve from the workspace's node_modules.
let work: string;
const launched: PluginClient[] = [];

// Serves as usual (so `nomadkit bundle` records its load launch), unless LOAD_MODE says otherwise.
const driver = `import { existsSync } from "node:fs";
import { defineDriver, serveDriver } from "@nomadkit/server";
const driver = defineDriver({ name: "loadfail", version: "0.0.1", async startTask() {}, waitTask: () => new Promise(() => {}), stopTask() {}, destroyTask() {} });
const mode = process.env.LOAD_MODE;
if (mode === "throw") throw new Error("driver configuration missing: LOADFAIL_HOME");
if (mode === "throw-long") throw new Error("LOADFAIL_".repeat(20_000));
if (mode === "throw-when-released") {
  // Blocks the event loop, as loading a big bundle does, while the host's calls come in.
  process.stderr.write("LOADFAIL blocked\\n");
  const cell = new Int32Array(new SharedArrayBuffer(4));
  while (!existsSync(process.env.LOADFAIL_RELEASE)) Atomics.wait(cell, 0, 0, 10);
  throw new Error("driver configuration missing: LOADFAIL_HOME");
}
if (mode === "reject") Promise.reject(new Error("cannot reach the daemon: LOADFAIL_SOCKET"));
if (mode === "wait") setTimeout(() => void serveDriver(driver), 600_000);
if (mode === "serve-on-sigterm") {
  // Code that has started (its own work under way) and reaches servePlugin only once SIGTERM came.
  const busy = setInterval(() => {}, 60_000);
  process.once("SIGTERM", () => {
    clearInterval(busy);
    void serveDriver(driver, { onShutdown: () => void process.stderr.write("LOADFAIL onShutdown ran\\n") });
  });
  process.stderr.write("LOADFAIL waiting for SIGTERM\\n");
}
if (mode === undefined) void serveDriver(driver);
`;

/** `nomadkit bundle` of `source` into `out/<name>`, with its load recording. */
function bundle(name: string, source: string) {
  writeFileSync(join(work, `${name}.mjs`), source);
  const r = spawnSync(
    process.execPath,
    [bin, "bundle", `${name}.mjs`, "--out", "out", "--name", name],
    {
      cwd: work,
      encoding: "utf8",
      timeout: 120_000,
    },
  );
  // (An entry with top-level await gets a warning about the code cache it cannot have.)
  expect(r.status, r.stderr).toBe(0);
  expect(existsSync(join(work, `out/${name}.load.json`))).toBe(true);
}

beforeAll(() => {
  work = mkdtempSync(join(root, "packages/cli/test/.bundle-load-"));
  bundle("loadfail", driver);
  // Top-level await: bundled as an ES module, which the launcher imports.
  bundle(
    "loadfail-tla",
    driver.replace(
      "if (mode === undefined) void serveDriver(driver);",
      "if (mode === undefined) await serveDriver(driver);",
    ),
  );
}, 240_000);
afterAll(async () => {
  await Promise.all(launched.map((p) => p.kill().catch(() => undefined)));
  rmSync(work, { recursive: true, force: true });
});

/** The bundled driver launched as Nomad does, in `mode`; a file of ours in its socket directory. */
async function launch(
  mode: string,
  name = "loadfail",
  env: Record<string, string> = {},
) {
  const log: string[] = [];
  const plugin = await launchPlugin(
    process.execPath,
    [join(work, `out/${name}`)],
    {
      env: { LOAD_MODE: mode, NOMADKIT_CODE_CACHE: "report", ...env },
      logger: (e) => log.push(e.message),
    },
  );
  launched.push(plugin);
  // The host removes a socket directory its plugin left with only the socket in it: with another
  // file there, only the plugin's own clean-up removes it.
  const socketDir = dirname(plugin.address);
  writeFileSync(join(socketDir, "marker"), "");
  // Nomad's load launch, answered by the fast path without loading the driver.
  expect((await plugin.basePlugin.pluginInfo({})).name).toBe("loadfail");
  expect(log).toContain(`${name}: load recording used`);
  return { plugin, log, socketDir };
}

/**
 * How a call ended: the plugin's gRPC code and message (under the PluginShutdownError the client
 * makes of a transport failure when the plugin then exits, as Nomad's ErrPluginShutdown).
 */
async function failure(
  call: Promise<unknown>,
): Promise<{ code: Code; message: string }> {
  try {
    await call;
  } catch (err) {
    const e = ConnectError.from(
      err instanceof PluginShutdownError ? err.cause : err,
    );
    return { code: e.code, message: e.rawMessage };
  }
  throw new Error("the call succeeded");
}

/** A unary call by @grpc/grpc-js (an independent client) with an empty request: its status. */
function grpcJsCall(
  client: grpc.Client,
  path: string,
): Promise<{ code: number; message: string }> {
  return new Promise((resolve) =>
    client.makeUnaryRequest(
      path,
      (b: Buffer) => b,
      (b: Buffer) => b,
      Buffer.alloc(0),
      (err) =>
        resolve(
          err
            ? { code: err.code, message: err.details }
            : { code: 0, message: "" },
        ),
    ),
  );
}

describe("a bundled plugin whose code does not take over from the load launch's fast path", () => {
  it("answers the calls waiting for it Unavailable with the error its entry threw, and exits 1", async () => {
    const { plugin, socketDir } = await launch("throw");
    const caps = await failure(plugin.driver.capabilities({}));
    expect(caps.code).toBe(Code.Unavailable);
    expect(caps.message).toContain(
      "the plugin failed to load: driver configuration missing: LOADFAIL_HOME",
    );
    expect(await plugin.exited).toEqual({ code: 1, signal: null });
    expect(existsSync(socketDir)).toBe(false);
  });

  it("answers the calls that came in while its entry ran (and threw) Unavailable with the error, to @nomadkit/client and grpc-js", async () => {
    const release = join(work, "release-throw-when-released");
    const { plugin, log } = await launch("throw-when-released", "loadfail", {
      LOADFAIL_RELEASE: release,
    });
    // grpc-js on a connection of its own, already open (the fast path answers PluginInfo).
    const other = new grpc.Client(
      `unix:${plugin.address}`,
      grpc.credentials.createInsecure(),
    );
    try {
      const info = "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo";
      expect((await grpcJsCall(other, info)).code).toBe(0);
      const caps = "/hashicorp.nomad.plugins.drivers.proto.Driver/Capabilities";
      const first = failure(plugin.driver.capabilities({}));
      await until(() => log.includes("LOADFAIL blocked"));
      // Sent while the plugin's event loop is blocked in its entry: they wait in its socket.
      const calls = [
        failure(plugin.driver.capabilities({})),
        failure(plugin.driver.taskConfigSchema({})),
        grpcJsCall(other, caps),
        grpcJsCall(other, caps),
      ];
      // Only this process's work: the clients write their requests.
      await new Promise((r) => setTimeout(r, 200));
      writeFileSync(release, "");
      const reason =
        "the plugin failed to load: driver configuration missing: LOADFAIL_HOME";
      expect(await first).toEqual({ code: Code.Unavailable, message: reason });
      for (const call of calls)
        expect(await call).toEqual({ code: Code.Unavailable, message: reason });
      expect(await plugin.exited).toEqual({ code: 1, signal: null });
    } finally {
      other.close();
    }
  });

  it("sends a long error's first 4096 characters, which trailers can carry", async () => {
    const { plugin } = await launch("throw-long");
    const caps = await failure(plugin.driver.capabilities({}));
    expect(caps.code).toBe(Code.Unavailable);
    expect(caps.message).toBe(
      `${"the plugin failed to load: LOADFAIL_".concat("LOADFAIL_".repeat(20_000)).slice(0, 4096)}…`,
    );
    expect(await plugin.exited).toEqual({ code: 1, signal: null });
  });

  it("does the same for an ES module entry (top-level await) that throws", async () => {
    const { plugin, log, socketDir } = await launch("throw", "loadfail-tla");
    const caps = await failure(plugin.driver.capabilities({}));
    expect(caps.code).toBe(Code.Unavailable);
    expect(caps.message).toContain(
      "the plugin failed to load: driver configuration missing: LOADFAIL_HOME",
    );
    expect(log).toContain("loadfail-tla: code cache none (ES module bundle)");
    expect(await plugin.exited).toEqual({ code: 1, signal: null });
    expect(existsSync(socketDir)).toBe(false);
  });

  it("does the same for an error its entry leaves unhandled", async () => {
    const { plugin, socketDir } = await launch("reject");
    const caps = await failure(plugin.driver.capabilities({}));
    expect(caps.code).toBe(Code.Unavailable);
    expect(caps.message).toContain(
      "the plugin failed to load: cannot reach the daemon: LOADFAIL_SOCKET",
    );
    expect(await plugin.exited).toEqual({ code: 1, signal: null });
    expect(existsSync(socketDir)).toBe(false);
  });

  it("answers Unavailable and exits 1 when its entry ends without calling servePlugin, instead of hanging", async () => {
    const { plugin, socketDir } = await launch("return");
    const caps = await failure(plugin.driver.capabilities({}));
    expect(caps.code).toBe(Code.Unavailable);
    expect(caps.message).toContain(
      "the plugin's code ended without calling servePlugin",
    );
    expect(await plugin.exited).toEqual({ code: 1, signal: null });
    expect(existsSync(socketDir)).toBe(false);
  });

  it("shuts down on SIGTERM while loading: the waiting calls get Unavailable, the socket directory goes, exit 0; SIGINT is ignored", async () => {
    const { plugin, log, socketDir } = await launch("wait");
    const caps = failure(plugin.driver.capabilities({}));
    await until(() =>
      log.includes(
        "loading the plugin for a call the load recording does not answer",
      ),
    );
    process.kill(plugin.pid, "SIGINT");
    await until(() =>
      log.includes("ignoring SIGINT; shutdown comes from the host"),
    );
    process.kill(plugin.pid, "SIGTERM");
    expect(await caps).toEqual({
      code: Code.Unavailable,
      message: "plugin shutting down",
    });
    expect(await plugin.exited).toEqual({ code: 0, signal: null });
    expect(existsSync(socketDir)).toBe(false);
    // Its code never reached servePlugin: the shutdown waited for it a bounded time, and says so
    // (stderr may still be on its way after the exit).
    await until(() =>
      log.includes(
        "the plugin's code did not call servePlugin in time: shutting down without its onShutdown",
      ),
    );
  });

  it("a SIGTERM while its code loads waits for its servePlugin: onShutdown runs once, the socket directory goes, exit 0", async () => {
    const { plugin, log, socketDir } = await launch("serve-on-sigterm");
    const caps = plugin.driver.capabilities({}).catch(() => undefined);
    await until(() => log.includes("LOADFAIL waiting for SIGTERM"));
    process.kill(plugin.pid, "SIGTERM");
    expect(await plugin.exited).toEqual({ code: 0, signal: null });
    await caps;
    expect(existsSync(socketDir)).toBe(false);
    // stderr may still be on its way after the exit.
    await until(() => log.includes("LOADFAIL onShutdown ran"));
    expect(log.filter((m) => m === "LOADFAIL onShutdown ran")).toHaveLength(1);
  });
});
