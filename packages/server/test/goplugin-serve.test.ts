// servePlugin as Nomad sees it: a real fixture plugin process launched by launchPlugin.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { statSync, existsSync } from "node:fs";
import * as http2 from "node:http2";
import { connect } from "node:net";
import { dirname } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  BasePluginClient,
  createUnixSocketTransport,
  PluginLaunchError,
  PluginShutdownError,
  reattachPlugin,
  type PluginClient,
  type ReattachConfig,
} from "@nomadkit/client";
import { HealthCheckResponse_ServingStatus as ServingStatus } from "@nomadkit/protocol/health";
import {
  NOMAD_COOKIE,
  fixture,
  launchTestDriver,
  spawnRaw,
  testDriver,
} from "./goplugin-helpers.js";

const cleanups: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function launch(mode = "", options = {}) {
  const r = await launchTestDriver(mode, options);
  cleanups.push(() => r.plugin.kill());
  return r;
}

describe("servePlugin", () => {
  it("handshakes, serves BasePlugin/Driver/health and exits 0 on kill", async () => {
    const { plugin } = await launch();
    expect(plugin.handshake).toMatchObject({
      coreVersion: 1,
      protocolVersion: 2,
      network: "unix",
      protocol: "grpc",
      serverCert: "",
    });
    const info = await plugin.basePlugin.pluginInfo({});
    expect(info.name).toBe("test-driver");
    expect(info.pluginApiVersions).toContain("v0.1.0");
    expect((await plugin.health.check({ service: "plugin" })).status).toBe(
      ServingStatus.SERVING,
    );
    expect((await plugin.health.check({ service: "" })).status).toBe(
      ServingStatus.SERVING,
    );
    const caps = await plugin.driver.capabilities({});
    expect(caps.capabilities?.exec).toBe(true);

    const exit = await plugin.kill();
    expect(exit).toEqual({ code: 0, signal: null });
    expect(existsSync(dirname(plugin.address))).toBe(false);
  });

  it("a request over the plugin's message limit is ResourceExhausted, also when larger than Node's default session memory", async () => {
    const { plugin } = await launch();
    const transport = createUnixSocketTransport(plugin.address);
    for (const mib of [5, 12]) {
      const big = new Uint8Array(mib << 20);
      for (const base of [plugin.basePlugin, new BasePluginClient(transport)]) {
        const err = await base.setConfig({ msgpackConfig: big }).catch((e: unknown) => ConnectError.from(e));
        expect([mib, (err as ConnectError).code, (err as ConnectError).rawMessage]).toEqual([mib, Code.ResourceExhausted, expect.stringContaining("readMaxBytes")]);
      }
    }
  });

  it("listens in a private directory: dir 0700, socket 0600", async () => {
    const { plugin } = await launch();
    const dir = statSync(dirname(plugin.address));
    const sock = statSync(plugin.address);
    expect(sock.isSocket()).toBe(true);
    expect(dir.mode & 0o777).toBe(0o700);
    expect(sock.mode & 0o777).toBe(0o600);
  });

  it("honours PLUGIN_UNIX_SOCKET_DIR and PLUGIN_UNIX_SOCKET_GROUP (gid)", async () => {
    const { mkdtempSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const base = mkdtempSync(join(tmpdir(), "nk-sockdir-"));
    cleanups.push(() => rmSync(base, { recursive: true, force: true }));
    const gid = process.getgid!();
    const { plugin } = await launch("", {
      unixSocketDir: base,
      unixSocketGroup: String(gid),
    });
    expect(dirname(dirname(plugin.address))).toBe(base);
    const dir = statSync(dirname(plugin.address));
    const sock = statSync(plugin.address);
    expect(sock.gid).toBe(gid);
    expect(dir.mode & 0o777).toBe(0o750);
    expect(sock.mode & 0o777).toBe(0o660);
  });

  /**
   * A PLUGIN_UNIX_SOCKET_DIR that puts the socket at exactly `bytes` bytes: mkdtemp's
   * "plugin-XXXXXX" and "/plugin.sock" take 26 bytes after it.
   */
  async function socketDirFor(bytes: number): Promise<string> {
    const { mkdirSync, mkdtempSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const top = mkdtempSync(join(tmpdir(), "nk-long-"));
    cleanups.push(() => rmSync(top, { recursive: true, force: true }));
    const dir = `${top}/${"d".repeat(bytes - 26 - top.length - 1)}`;
    mkdirSync(dir);
    return dir;
  }

  it.runIf(process.platform === "linux")(
    "a socket path of up to 107 bytes (what Linux's sun_path holds with its NUL, and go-plugin accepts) is served",
    async () => {
      const dir = await socketDirFor(107);
      const { plugin } = await launch("", { unixSocketDir: dir });
      expect(Buffer.byteLength(plugin.address)).toBe(107);
      expect(statSync(plugin.address).isSocket()).toBe(true);
      expect((await plugin.basePlugin.pluginInfo({})).name).toBe("test-driver");
    },
  );

  it("a socket path too long for a unix socket address fails the start, naming the path and its length, and advertises nothing", async () => {
    // 108 bytes: Node would bind it (and truncate anything longer), but Go cannot dial it.
    const dir = await socketDirFor(108);
    const raw = spawnRaw(testDriver, {
      ...NOMAD_COOKIE,
      PLUGIN_PROTOCOL_VERSIONS: "2",
      PLUGIN_UNIX_SOCKET_DIR: dir,
    });
    const { code } = await raw.exit;
    expect(code).toBe(1);
    expect(raw.stdout()).toBe("");
    expect(raw.stderr()).toMatch(
      new RegExp(
        `unix socket path ${dir.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}/plugin-\\w{6}/plugin\\.sock is 108 bytes long, over the ${process.platform === "linux" ? 107 : 103} bytes a unix socket address holds: set PLUGIN_UNIX_SOCKET_DIR or TMPDIR to a shorter directory`,
      ),
    );
    // Nothing left behind in the socket directory either.
    const { readdirSync } = await import("node:fs");
    expect(readdirSync(dir)).toEqual([]);
  });

  it("listens on TCP 127.0.0.1 within PLUGIN_MIN_PORT..PLUGIN_MAX_PORT when asked", async () => {
    const { plugin } = await launch("tcp", { minPort: 0, maxPort: 0 });
    expect(plugin.handshake.network).toBe("tcp");
    expect(plugin.address).toMatch(/^127\.0\.0\.1:\d+$/);
    expect((await plugin.basePlugin.pluginInfo({})).name).toBe("test-driver");
  });

  it("keeps stdout clean after the handshake: console.log goes to the log and GRPCStdio", async () => {
    const raw = spawnRaw(testDriver, {
      ...NOMAD_COOKIE,
      PLUGIN_PROTOCOL_VERSIONS: "2",
      TEST_PLUGIN_MODE: "console",
    });
    const line = await raw.firstLine;
    await raw.stderrContains("test driver ready");
    const [, , network, address] = line.split("|");
    const plugin = await reattachPlugin({
      pid: raw.child.pid!,
      network: network as "unix",
      address: address!,
    });
    expect((await plugin.kill()).code).toBe(null); // reattached: no exit status
    const exit = await raw.exit;
    expect(exit.code).toBe(0);
    expect(raw.stdout()).toBe(line + "\n");
    expect(line).toMatch(/^1\|2\|unix\|\/.+\|grpc\|$/);
    // What console.log printed became an hclog line on stderr.
    const logged = raw
      .stderr()
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(logged).toContainEqual(
      expect.objectContaining({
        "@module": "test-driver.stdout",
        "@message": "hello from console.log",
      }),
    );
    // A partial line is flushed at shutdown.
    expect(logged).toContainEqual(
      expect.objectContaining({ "@message": "partial write without newline" }),
    );
    expect(raw.stderr()).toContain("hello from console.error\n");
  });

  it("writes hclog JSON lines with microsecond timestamps of the wall clock", async () => {
    const before = Date.now();
    const { plugin, logs } = await launch();
    const ready = await logs.waitFor((e) => e.message === "test driver ready");
    const after = Date.now();
    expect(ready.structured).toBe(true);
    expect(ready.level).toBe("info");
    expect(ready.module).toBe("test-driver");
    expect(ready.fields.address).toBe(plugin.address);
    expect(ready.timestamp).toMatch(
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$/,
    );
    // Local time with its offset: the same instant as this process's clock (to the millisecond).
    const at = Date.parse(ready.timestamp);
    expect(at).toBeGreaterThanOrEqual(before);
    expect(at).toBeLessThanOrEqual(after);
  });

  it("carries what the plugin prints over GRPCStdio", async () => {
    let out = "";
    let err = "";
    let resolveBoth!: () => void;
    const both = new Promise<void>((r) => (resolveBoth = r));
    const check = () => {
      if (
        out.includes("hello from console.log\n") &&
        out.includes("partial write") &&
        err.includes("hello from console.error\n")
      )
        resolveBoth();
    };
    await launch("console", {
      onStdout: (d: Uint8Array) => {
        out += Buffer.from(d).toString();
        check();
      },
      onStderr: (d: Uint8Array) => {
        err += Buffer.from(d).toString();
        check();
      },
    });
    await both;
    expect(out).toBe("hello from console.log\npartial write without newline");
    expect(err).toBe("hello from console.error\n");
  });

  it("ignores SIGINT", async () => {
    const { plugin, logs } = await launch();
    process.kill(plugin.pid, "SIGINT");
    await logs.waitFor((e) => e.message.includes("ignoring SIGINT"));
    expect((await plugin.health.check({ service: "plugin" })).status).toBe(
      ServingStatus.SERVING,
    );
    expect(plugin.exitSignal.aborted).toBe(false);
  });

  it("shuts down gracefully on SIGTERM and removes its socket directory", async () => {
    const { plugin, logs } = await launch();
    process.kill(plugin.pid, "SIGTERM");
    expect(await plugin.exited).toEqual({ code: 0, signal: null });
    expect(logs.entries.some((e) => e.message === "onShutdown called")).toBe(
      true,
    );
    expect(existsSync(dirname(plugin.address))).toBe(false);
  });

  it("with exitOnHostDisconnect, exits 0 when the host closes its connection without Shutdown", async () => {
    const { plugin, logs } = await launch("exit-on-disconnect");
    expect((await plugin.basePlugin.pluginInfo({})).name).toBe("test-driver");
    plugin.close();
    expect(await plugin.exited).toEqual({ code: 0, signal: null });
    expect(logs.entries.some((e) => e.message === "plugin shutting down" && e.fields.reason === "host disconnected")).toBe(true);
    expect(existsSync(dirname(plugin.address))).toBe(false);
  });

  it("refuses to start with an invalid maxSessionMemoryMiB, naming the option", async () => {
    for (const bad of ["0", "-5", '"64"']) {
      const err = await launchTestDriver("", { env: { TEST_MAX_SESSION_MEMORY: bad } }).then(
        (r) => {
          cleanups.push(() => r.plugin.kill());
          return undefined;
        },
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(PluginLaunchError);
      expect(String((err as PluginLaunchError).message) + (err as PluginLaunchError).stderr).toContain(
        `maxSessionMemoryMiB must be a number of MiB >= 1, got ${bad}`,
      );
    }
  });

  it("reports NOT_SERVING while shutting down", async () => {
    const { mkdtempSync, writeFileSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const dir = mkdtempSync(join(tmpdir(), "nk-release-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const release = join(dir, "release");
    const { plugin, logs } = await launch("slow-shutdown", {
      env: { TEST_RELEASE_FILE: release },
    });
    await plugin.controller.shutdown({});
    await logs.waitFor((e) => e.message === "onShutdown called");
    expect((await plugin.health.check({ service: "plugin" })).status).toBe(
      ServingStatus.NOT_SERVING,
    );
    writeFileSync(release, "");
    expect(await plugin.exited).toEqual({ code: 0, signal: null });
  });

  it("fails calls after the plugin exited with PluginShutdownError", async () => {
    const { plugin } = await launch();
    process.kill(plugin.pid, "SIGKILL");
    await plugin.exited;
    await expect(plugin.basePlugin.pluginInfo({})).rejects.toBeInstanceOf(
      PluginShutdownError,
    );
    // It could not remove its socket directory; the host did, once it saw the exit.
    expect(existsSync(dirname(plugin.address))).toBe(false);
  });

  it("answers unknown methods with Unimplemented", async () => {
    const { plugin } = await launch();
    const { Code, ConnectError } = await import("@connectrpc/connect");
    // ExecTask is not implemented by the fixture: the generated runtime answers Unimplemented.
    const err = await plugin.driver
      .execTask({ taskId: "x", command: ["true"] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as InstanceType<typeof ConnectError>).code).toBe(
      Code.Unimplemented,
    );
    // A method no service has: trailers-only Unimplemented, its path readable by a client that
    // decodes grpc-message with decodeURI (grpc-js), i.e. '/' not escaped.
    const session = http2.connect("http://localhost", { createConnection: () => connect(plugin.address) });
    cleanups.push(() => void session.destroy());
    session.on("error", () => {});
    const req = session.request({ ":method": "POST", ":path": "/pkg.Svc/M", "content-type": "application/grpc" });
    req.end();
    const [headers] = (await once(req, "response")) as [http2.IncomingHttpHeaders];
    expect([headers["grpc-status"], headers["grpc-message"]]).toEqual(["12", "unknown%20method%20/pkg.Svc/M"]);
  });

  it("drops its shutdown listener when a GRPCBroker or Health.Watch stream is cancelled", async () => {
    const { plugin, logs } = await launch("abort-listeners");
    const listeners = async () => {
      const seen = new Set(logs.entries);
      await plugin.basePlugin.setConfig({});
      const entry = await logs.waitFor((e) => e.message === "shutdown signal listeners" && !seen.has(e));
      return entry.fields.count;
    };
    const before = await listeners();
    expect(before).toEqual(expect.any(Number));
    const session = http2.connect("http://localhost", { createConnection: () => connect(plugin.address) });
    cleanups.push(() => void session.destroy());
    session.on("error", () => {});
    await once(session, "connect"); // a ping sent earlier is cancelled
    const ping = () => new Promise<void>((resolve, reject) => session.ping((err) => (err ? reject(err) : resolve())));
    const call = (path: string) => {
      const stream = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" });
      stream.on("error", () => {});
      return stream;
    };
    // More than Node's default limit of 10: leaked listeners would also print MaxListenersExceededWarning.
    for (let i = 0; i < 12; i++) {
      // Held open and never answered, as Nomad's go-plugin client holds one per connection. The
      // ping's answer says the plugin has seen it: it handles a connection's frames in order.
      const broker = call("/plugin.GRPCBroker/StartStream");
      await ping();
      broker.close(http2.constants.NGHTTP2_CANCEL);
      const watch = call("/grpc.health.v1.Health/Watch");
      watch.end(Buffer.from("00000000080a06706c7567696e", "hex")); // service "plugin"
      await once(watch, "response"); // with the first status: the handler now waits for a change
      watch.close(http2.constants.NGHTTP2_CANCEL);
    }
    await ping();
    expect(await listeners()).toBe(before);
    expect(logs.entries.filter((e) => e.message.includes("MaxListenersExceededWarning"))).toEqual([]);
    expect(await plugin.kill()).toEqual({ code: 0, signal: null });
  });
});

describe("a plugin whose host left", () => {
  it("outlives a host that closed its client, serves on when its stderr writes fail, and is reattached", async () => {
    const host = spawn(process.execPath, [fixture("closing-host.mjs"), testDriver, "stderr-on-config"], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    host.stdout.on("data", (d: Buffer) => (out += d.toString()));
    let reattached = false;
    cleanups.push(() => {
      // A failed run: neither the host nor the plugin it started may outlive the test.
      if (host.exitCode === null && host.signalCode === null) host.kill("SIGKILL");
      if (reattached) return;
      try {
        process.kill((JSON.parse(out) as ReattachConfig).pid, "SIGKILL");
      } catch {
        // no reattach config printed, or the plugin is gone
      }
    });
    // close() leaves nothing holding the host's event loop: it exits by itself.
    expect(await once(host, "exit")).toEqual([0, null]);
    const config = JSON.parse(out) as ReattachConfig;
    const plugin = await reattachPlugin(config);
    reattached = true;
    cleanups.push(() => plugin.kill());
    // Nobody reads its stderr any more: console.error fails with EPIPE, which must not end it.
    await plugin.basePlugin.setConfig({});
    await plugin.basePlugin.setConfig({});
    expect((await plugin.health.check({ service: "plugin" })).status).toBe(ServingStatus.SERVING);
    await plugin.kill();
    expect(existsSync(dirname(config.address))).toBe(false);
  });
});

describe("kill sequence", () => {
  it("SIGKILLs a plugin that answers Shutdown but does not exit, after about 2 s", async () => {
    const { plugin, logs } = await launch("ignore-shutdown");
    await logs.waitFor((e) => e.message === "test driver ready");
    const started = Date.now();
    const exit = await plugin.kill();
    const elapsed = Date.now() - started;
    expect(exit).toEqual({ code: null, signal: "SIGKILL" });
    expect(logs.entries.some((e) => e.message === "onShutdown called")).toBe(
      true,
    );
    // Generous bounds: the host waits 2 s after Shutdown (plus at most 2 s for the RPC itself).
    expect(elapsed).toBeGreaterThanOrEqual(1900);
    expect(elapsed).toBeLessThan(15_000);
  });
});

void ({} as PluginClient);
