// The load launch's fast path (goplugin/prelude.ts) in a real process, in front of the fixture test
// driver: it serves the go-plugin transport with the recording's options, answers exactly the
// recorded calls itself, ends the process on Shutdown, and on any other call hands the transport
// (socket, connection, the streams it held) to the driver's own servePlugin. The recording here is
// made by hand so that who answered is visible (its PluginInfo is not the driver's); `nomadkit
// bundle` records real ones (tested in @nomadkit/cli, byte for byte against the plugin).
import * as http2 from "node:http2";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join, sep } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { launchPlugin, PluginShutdownError, type PluginClient } from "@nomadkit/client";
import { PluginInfoResponseSchema, PluginType } from "@nomadkit/protocol/base";
import { afterAll, describe, expect, it } from "vitest";
import { recordableTransportOptions, type LoadRecording } from "../src/goplugin/prelude.js";
import { fixture, LogCollector } from "./goplugin-helpers.js";

const dir = mkdtempSync(join(tmpdir(), "nk-prelude-"));
const launched: PluginClient[] = [];
afterAll(async () => {
  await Promise.all(launched.map((p) => p.kill().catch(() => undefined)));
  rmSync(dir, { recursive: true, force: true });
});

const envelope = (message: Uint8Array) => {
  const b = Buffer.alloc(5 + message.length);
  b.writeUInt32BE(message.length, 1);
  b.set(message, 5);
  return b.toString("base64");
};
const OK = { headers: { "content-type": "application/grpc+proto" }, trailers: { "grpc-status": "0" } };
const recordedInfo = toBinary(
  PluginInfoResponseSchema,
  create(PluginInfoResponseSchema, { type: PluginType.DRIVER, name: "from-the-recording", pluginApiVersions: ["v0.1.0"], pluginVersion: "9.9.9" }),
);

function recording(transport: LoadRecording["transport"] = {}, build = ""): string {
  const r: LoadRecording = {
    version: 3,
    bundleSize: 0,
    preludeSha256: "not checked by startPrelude (the launcher does)",
    // The package's own builds are not stamped (nomadkit bundle stamps the bundle and fast path).
    build,
    transport,
    calls: [
      { path: "/grpc.health.v1.Health/Check", request: envelope(Buffer.from("0a06706c7567696e", "hex")), body: envelope(Buffer.from("0801", "hex")), ...OK },
      { path: "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo", request: envelope(new Uint8Array(0)), body: envelope(recordedInfo), ...OK },
      { path: "/plugin.GRPCController/Shutdown", request: envelope(new Uint8Array(0)), body: envelope(new Uint8Array(0)), ...OK },
    ],
  };
  const file = join(dir, `recording-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(file, JSON.stringify(r));
  return file;
}

async function launch(recordingFile: string, mode = "", env: Record<string, string> = {}) {
  const logs = new LogCollector();
  const stdout: string[] = [];
  const plugin = await launchPlugin(process.execPath, [fixture("prelude-launcher.cjs")], {
    env: { TEST_RECORDING: recordingFile, TEST_PLUGIN_MODE: mode, ...env },
    logger: logs.logger,
    onStdout: (d) => stdout.push(Buffer.from(d).toString()),
  });
  launched.push(plugin);
  return { plugin, logs, stdout };
}

/**
 * A raw call on a connection of its own: `status` resolves with its grpc-status (trailers or
 * trailers-only); `received` once the server has seen the request (an HTTP/2 PING sent after it
 * was answered: the server handles a connection's frames in order). `end: false` leaves the
 * request open, as a host leaves GRPCStdio's.
 */
function rawCall(plugin: PluginClient, path: string, body: Buffer, end = true) {
  const session = http2.connect("http://localhost", { createConnection: () => connect(plugin.address) });
  const stream = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" });
  const status = new Promise<string | undefined>((resolve, reject) => {
    session.on("error", reject);
    let s: string | undefined;
    stream.on("response", (h) => (s = h["grpc-status"] as string | undefined));
    stream.on("trailers", (t) => (s = t["grpc-status"] as string | undefined));
    stream.on("error", reject);
    stream.resume();
    stream.on("end", () => {
      session.close();
      resolve(s);
    });
  });
  stream.write(body);
  if (end) stream.end();
  const received = new Promise<void>((resolve, reject) =>
    session.once("connect", () => session.ping((err) => (err ? reject(err) : resolve()))),
  );
  return { status, received };
}

// A preload that lists, as the process exits, the files it loaded with require (pino is CommonJS).
const modulesPreload = join(dir, "record-modules.cjs");
writeFileSync(
  modulesPreload,
  `process.once("exit", () => require("node:fs").writeFileSync(process.env.NK_MODULES_OUT, Object.keys(require.cache).join("\\n")));\n`,
);
/** launch()'s env to record the modules the process loaded into `out`. */
const recordModules = (out: string) => ({ NODE_OPTIONS: `--require ${modulesPreload}`, NK_MODULES_OUT: out });
const loadedPino = (out: string) => readFileSync(out, "utf8").split("\n").some((f) => f.includes(`${sep}node_modules${sep}pino${sep}`));

const loaded = (logs: LogCollector) => logs.entries.some((e) => e.message.includes("loading the test driver"));

describe("the load launch's fast path (startPrelude)", () => {
  it("answers the recorded calls itself; Shutdown ends the process, streams it held get Unavailable", async () => {
    const modules = join(dir, "modules-fast.txt");
    const { plugin, logs } = await launch(recording(), "", recordModules(modules));
    expect(await plugin.health.check({ service: "plugin" })).toMatchObject({ status: 1 });
    expect(await plugin.basePlugin.pluginInfo({})).toMatchObject({ name: "from-the-recording", pluginVersion: "9.9.9" });
    // GRPCStdio as a host opens it: held, never answered, until the process shuts down.
    const stdio = rawCall(plugin, "/plugin.GRPCStdio/StreamStdio", Buffer.from(envelope(new Uint8Array(0)), "base64"), false);
    await stdio.received;
    expect(await plugin.kill()).toEqual({ code: 0, signal: null });
    expect(await stdio.status).toBe("14");
    expect(loaded(logs)).toBe(false);
    // Its own lines, parsed by the host as hclog JSON, written without loading pino.
    expect(logs.entries.map((e) => e.message)).toEqual(expect.arrayContaining(["plugin started", "plugin shutting down"]));
    expect(logs.entries.find((e) => e.message === "plugin started")).toMatchObject({ level: "debug", fields: { network: "unix", address: plugin.address } });
    expect(readFileSync(modules, "utf8")).toContain("prelude.js");
    expect(loadedPino(modules)).toBe(false);
  });

  it("hands its transport to the driver's servePlugin on the first other call: same socket, held streams, the driver's logger", async () => {
    const modules = join(dir, "modules-handed-over.txt");
    const { plugin, logs, stdout } = await launch(recording(), "console", recordModules(modules));
    expect((await plugin.basePlugin.pluginInfo({})).name).toBe("from-the-recording");
    // Not recorded: the driver loads and answers this call.
    expect(await plugin.driver.capabilities({})).toMatchObject({ capabilities: { sendSignals: true, exec: true } });
    expect(loaded(logs)).toBe(true);
    // Its servePlugin adopted the socket the host is connected to (no second handshake).
    const ready = await logs.waitFor((e) => e.message === "test driver ready");
    expect(ready.fields.address).toBe(plugin.address);
    expect(ready.module).toBe("test-driver");
    // The host's GRPCStdio stream, opened before the driver loaded, carries what it prints.
    await expect.poll(() => stdout.join(""), { timeout: 10_000 }).toContain("hello from console.log");
    // Recorded calls are the driver's now.
    expect((await plugin.basePlugin.pluginInfo({})).name).toBe("test-driver");
    // Its PluginInfo is not the recording's (made up here), and it says so once it has asked itself.
    const differs = await logs.waitFor((e) => e.message.startsWith("the load recording's answer differs from this plugin's"));
    expect(differs).toMatchObject({ level: "warn", fields: { method: "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo" } });
    // Its options (all defaults here) are those the recording was served with ({}): no other warning.
    expect(logs.entries.filter((e) => e.level === "warn")).toEqual([differs]);
    expect(await plugin.kill()).toEqual({ code: 0, signal: null });
    // The record shows pino once the driver's own code has loaded (so the first test's "not loaded" means something).
    expect(loadedPino(modules)).toBe(true);
  });

  it("answers a recorded request only once it has ended: a second message, even in a later frame, goes to the driver", async () => {
    const { plugin, logs } = await launch(recording());
    const session = http2.connect("http://localhost", { createConnection: () => connect(plugin.address) });
    const stream = session.request({ ":method": "POST", ":path": "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo", "content-type": "application/grpc", te: "trailers" });
    let status: string | undefined;
    stream.on("response", (h) => (status = h["grpc-status"] as string | undefined));
    stream.on("trailers", (t) => (status = t["grpc-status"] as string | undefined));
    const ended = new Promise((r) => stream.on("end", r));
    stream.resume();
    const empty = Buffer.from(envelope(new Uint8Array(0)), "base64");
    // The recorded request, then (once the plugin has surely read it) another message.
    stream.write(empty);
    await new Promise<void>((resolve, reject) => session.once("connect", () => session.ping((err) => (err ? reject(err) : resolve()))));
    stream.end(empty);
    await ended;
    session.close();
    // The driver's own refusal of a unary call with two messages (InvalidArgument or Unimplemented-like codes, never OK).
    expect(status).toBeDefined();
    expect(status).not.toBe("0");
    expect(loaded(logs)).toBe(true);
    expect(await plugin.kill()).toEqual({ code: 0, signal: null });
  });

  it("a recorded call still arriving when the driver takes over is given to the driver, and answered", async () => {
    const { plugin, logs } = await launch(recording());
    const session = http2.connect("http://localhost", { createConnection: () => connect(plugin.address) });
    const stream = session.request({ ":method": "POST", ":path": "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo", "content-type": "application/grpc", te: "trailers" });
    let status: string | undefined;
    stream.on("response", (h) => (status ??= h["grpc-status"] as string | undefined));
    stream.on("trailers", (t) => (status = t["grpc-status"] as string | undefined));
    const ended = new Promise((r) => stream.on("close", r));
    stream.resume();
    // Three bytes of the recorded request: it could still match.
    stream.write(Buffer.from("000000", "hex"));
    await new Promise<void>((resolve, reject) => session.once("connect", () => session.ping((err) => (err ? reject(err) : resolve()))));
    // Another call makes the driver load and take over.
    expect(await plugin.driver.capabilities({})).toMatchObject({ capabilities: { exec: true } });
    expect(loaded(logs)).toBe(true);
    // The rest does not match the recording (a 4-byte request): the driver answers it, with an error.
    stream.end(Buffer.from("00", "hex"));
    await ended;
    session.close();
    expect(status).toBeDefined();
    expect(status).not.toBe("0");
    expect(await plugin.kill()).toEqual({ code: 0, signal: null });
  });

  it("survives a host resetting a stream it holds or reads with an error code, and a GOAWAY with an error", async () => {
    const { plugin } = await launch(recording());
    const reset = (path: string, body: string) =>
      new Promise<void>((resolve, reject) => {
        const session = http2.connect("http://localhost", { createConnection: () => connect(plugin.address) });
        session.on("error", () => {});
        const s = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" });
        s.on("error", () => {});
        s.write(Buffer.from(body, "hex"));
        session.once("connect", () =>
          session.ping((err) => {
            if (err) return reject(err);
            s.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
            session.ping(() => {
              session.destroy();
              resolve();
            });
          }),
        );
      });
    await reset("/plugin.GRPCStdio/StreamStdio", "0000000000"); // held
    await reset("/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo", "000000"); // being read
    // The whole recorded request, then a reset with NO_ERROR (Node's close() default): the stream is
    // closed but not destroyed, and answering it threw, uncaught (the process exited 1).
    await new Promise<void>((resolve) => {
      const session = http2.connect("http://localhost", { createConnection: () => connect(plugin.address) });
      session.on("error", () => {});
      const s = session.request({ ":method": "POST", ":path": "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo", "content-type": "application/grpc", te: "trailers" });
      s.on("error", () => {});
      // In one flush: the fast path reads the request and finds the stream reset at once.
      s.write(Buffer.alloc(5));
      s.close(http2.constants.NGHTTP2_NO_ERROR);
      session.once("connect", () => session.ping(() => session.ping(() => {
        session.destroy();
        resolve();
      })));
    });
    await new Promise<void>((resolve) => {
      const session = http2.connect("http://localhost", { createConnection: () => connect(plugin.address) });
      session.on("error", () => {});
      const s = session.request({ ":method": "POST", ":path": "/plugin.GRPCStdio/StreamStdio", "content-type": "application/grpc", te: "trailers" });
      s.on("error", () => {});
      s.write(Buffer.alloc(5));
      session.once("connect", () => session.ping(() => {
        session.goaway(http2.constants.NGHTTP2_INTERNAL_ERROR);
        setTimeout(() => { session.destroy(); resolve(); }, 100);
      }));
    });
    // Still serving, from the recording.
    expect(await plugin.health.check({ service: "plugin" })).toMatchObject({ status: 1 });
    expect(plugin.exitSignal.aborted).toBe(false);
    expect(await plugin.kill()).toEqual({ code: 0, signal: null });
  });

  it("a Shutdown reset with NO_ERROR still ends the process cleanly", async () => {
    const { plugin } = await launch(recording());
    const session = http2.connect("http://localhost", { createConnection: () => connect(plugin.address) });
    session.on("error", () => {});
    const s = session.request({ ":method": "POST", ":path": "/plugin.GRPCController/Shutdown", "content-type": "application/grpc", te: "trailers" });
    s.on("error", () => {});
    // In one flush, as above.
    s.write(Buffer.alloc(5));
    s.close(http2.constants.NGHTTP2_NO_ERROR);
    expect(await plugin.exited).toEqual({ code: 0, signal: null });
    session.destroy();
  });

  it("a Shutdown that arrives while the driver loads is the driver's: its onShutdown runs", async () => {
    const { plugin, logs } = await launch(recording());
    // Both requests in one write on one connection: the Shutdown reaches the fast path in the same
    // read as the call that starts the load, long before the driver's modules have loaded.
    const session = http2.connect("http://localhost", { createConnection: () => connect(plugin.address) });
    session.on("error", () => {});
    const call = (path: string) => {
      const st = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" });
      st.on("error", () => {});
      st.resume();
      st.end(Buffer.alloc(5));
    };
    call("/hashicorp.nomad.plugins.drivers.proto.Driver/Capabilities");
    call("/plugin.GRPCController/Shutdown");
    expect(await plugin.exited).toEqual({ code: 0, signal: null });
    session.destroy();
    expect(loaded(logs)).toBe(true);
    // stderr may still be on its way after the exit.
    await expect.poll(() => logs.entries.map((e) => e.message), { timeout: 10_000 }).toContain("onShutdown called");
  });

  it("answers Unavailable and exits 1 when the plugin's code, busy, has not called servePlugin within go-plugin's start timeout", async () => {
    // Nomad's SetConfig, the usual first call the fast path hands over, has no deadline: without
    // this, a plugin whose code never serves (retrying forever, say) holds it for good.
    const { plugin, logs } = await launch(recording(), "", { TEST_NEVER_SERVE: "1", TEST_ADOPT_TIMEOUT_MS: "300" });
    const caps = await plugin.driver.capabilities({}).then(
      () => undefined,
      (err: unknown) => ConnectError.from(err instanceof PluginShutdownError ? err.cause : err),
    );
    expect(caps?.code).toBe(Code.Unavailable);
    expect(caps?.rawMessage).toBe(
      "the plugin's code did not call servePlugin within 300 ms of loading (go-plugin's start timeout): it serves no call",
    );
    expect(await plugin.exited).toEqual({ code: 1, signal: null });
    expect(loaded(logs)).toBe(true);
  });

  it("listens as the recorded transport options say, and the driver says when its own differ", async () => {
    const { plugin, logs } = await launch(recording({ network: "tcp" }));
    expect(plugin.network).toBe("tcp");
    expect(plugin.address).toMatch(/^127\.0\.0\.1:\d+$/);
    expect((await plugin.basePlugin.pluginInfo({})).name).toBe("from-the-recording");
    // The test driver asks for a unix socket: it keeps serving on the recorded TCP one, and warns.
    expect(await plugin.driver.capabilities({})).toMatchObject({ capabilities: { exec: true } });
    const warning = await logs.waitFor((e) => e.message.startsWith("servePlugin options differ from the load recording"));
    expect(warning.level).toBe("warn");
    expect(JSON.parse(warning.fields.options as string)).toMatchObject({ network: "unix" });
    expect(JSON.parse(warning.fields.recorded as string)).toMatchObject({ network: "tcp" });
    expect(await plugin.kill()).toEqual({ code: 0, signal: null });
  });

  it("is not served with a recording of another build: the driver loads at once and answers everything", async () => {
    const { plugin, logs } = await launch(recording({}, "another build"));
    expect(loaded(logs)).toBe(true);
    expect((await plugin.basePlugin.pluginInfo({})).name).toBe("test-driver");
    expect(await plugin.kill()).toEqual({ code: 0, signal: null });
  });

  it("the driver refuses a transport of another build with a message naming the files, instead of failing on what it lacks", async () => {
    // As a fast path bundled before the build stamp hands over (no `build`, no `options`).
    const { plugin, logs } = await launch(recording(), "", { TEST_FOREIGN_TRANSPORT: "1" });
    expect((await plugin.basePlugin.pluginInfo({})).name).toBe("from-the-recording");
    await expect(plugin.driver.capabilities({})).rejects.toThrow();
    expect(await plugin.kill()).toMatchObject({ code: 1 });
    const log = () => logs.entries.map((e) => `${e.level} ${e.message}`).join("\n");
    await expect.poll(log, { timeout: 10_000 }).toContain("error the load launch's fast path that started this process (");
    expect(log()).toContain("-load.cjs) is from another build than this plugin");
    expect(log()).toContain("install the whole bundle directory");
    expect(log()).not.toContain("TypeError");
  });

  it("records only the options a launcher can replay", () => {
    expect(recordableTransportOptions({})).toEqual({});
    expect(
      recordableTransportOptions({ network: "tcp", protocolVersions: [2, 3], exitOnHostDisconnect: 500, maxSessionMemoryMiB: 64, handshake: { cookieKey: "K", cookieValue: "V" } }),
    ).toEqual({ network: "tcp", protocolVersions: [2, 3], exitOnHostDisconnect: 500, maxSessionMemoryMiB: 64, handshake: { cookieKey: "K", cookieValue: "V" } });
    // A launcher has neither this process's own environment object nor a way to keep it alive.
    expect(recordableTransportOptions({ env: {} })).toBeUndefined();
    expect(recordableTransportOptions({ exitProcess: false })).toBeUndefined();
  });
});
