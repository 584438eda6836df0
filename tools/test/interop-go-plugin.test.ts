// Go interop, the host side: @nomadkit/client (launchPlugin, reattachPlugin, the typed clients) and
// the CLI drive a plugin written in Go on hashicorp/go-plugin + grpc-go (tools/interop-go-plugin),
// as they would drive a third-party Nomad driver: go-plugin's handshake line and unix socket, its
// own AutoMTLS certificate, its hclog JSON on stderr, its GRPCController.Shutdown. The plugin is
// built from Debian's Go packages (go-plugin 1.0.1, grpc-go 1.33): the first run installs them and
// builds, which takes minutes; later runs reuse node_modules/.cache/nomadkit-go.
import { X509Certificate } from "node:crypto";
import { existsSync, lstatSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  HealthClient,
  PluginLaunchError,
  createUnixSocketTransport,
  isCancellation,
  launchPlugin,
  reattachPlugin,
  type PluginClient,
  type PluginLogEntry,
} from "@nomadkit/client";
import { PluginType } from "@nomadkit/protocol/base";
import { DriverCapabilities_FSIsolation, DriverCapabilities_MountConfigs, FingerprintResponse_HealthState } from "@nomadkit/protocol/driver";
import { HealthCheckResponse_ServingStatus } from "@nomadkit/protocol/health";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runProcess } from "./run-process.js";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const cli = join(repo, "packages/cli/bin/nomadkit.js");
const skip =
  process.platform !== "linux" || !existsSync("/usr/bin/dpkg") ? "the Go plugin is built from Debian's Go packages (Linux with dpkg)" : undefined;

// What the plugin sends on GRPCStdio (tools/interop-go-plugin/main.go).
const STDOUT_LINE = "go-fake: hello on stdout\n";
const STDERR_LINE = "go-fake: hello on stderr\n";
// msgpack of {greeting: "hi"}, the agent config Nomad would send for `config { greeting = "hi" }`.
const CONFIG = Buffer.from("81a86772656574696e67a26869", "hex");
// Each test starts one or two plugin processes; on a busy 2-core machine that takes seconds each.
const TEST_TIMEOUT_MS = 3 * 60_000;

let bin: string;
let descriptors: string;
let work: string;

/** Runs a command to its end; throws with its stderr when it fails. */
async function mustRun(file: string, args: string[]): Promise<string> {
  const r = await runProcess(file, args, { cwd: repo });
  if (r.code !== 0) throw new Error(`${file} ${args.join(" ")}: exit ${r.code}\n${r.stderr}`);
  return r.stdout;
}

/** The launched plugin's stderr as the client's logger got it, with waits that end with the stream. */
class Logs {
  readonly entries: PluginLogEntry[] = [];
  private waiters: Array<() => void> = [];
  private ended = false;
  readonly add = (e: PluginLogEntry): void => {
    this.entries.push(e);
    for (const w of this.waiters.splice(0)) w();
  };

  /** Follows the end of `plugin`'s stderr: after it, every line has reached the logger. */
  watch(plugin: PluginClient): void {
    const stderr = plugin.process!.stderr!;
    // Registered after the client's own "end" listener, which flushes the last line first.
    const end = () => {
      this.ended = true;
      for (const w of this.waiters.splice(0)) w();
    };
    if (stderr.readableEnded) end();
    else stderr.once("end", end).once("close", end);
  }

  /** The first entry matching `pred`, once it has arrived; rejects if stderr ends without one. */
  waitFor(what: string, pred: (e: PluginLogEntry) => boolean): Promise<PluginLogEntry> {
    return new Promise((done, fail) => {
      const check = () => {
        const e = this.entries.find(pred);
        if (e) done(e);
        else if (this.ended) fail(new Error(`no log entry ${what}; got:\n${this.entries.map((x) => x.raw || x.message).join("\n")}`));
        else this.waiters.push(check);
      };
      check();
    });
  }

  /** Resolves once stderr has ended (the process exited and the pipe is drained). */
  end(): Promise<void> {
    return new Promise((done) => {
      const check = () => (this.ended ? done() : this.waiters.push(check));
      check();
    });
  }

  /** The lines read from stderr, leaving out what the client logs itself (no raw line). */
  stderrLines(): PluginLogEntry[] {
    return this.entries.filter((e) => e.raw !== "");
  }
}

/** Text a callback receives, with a wait for some of it that gives up when the plugin exits (a getter: the sink exists before the launch). */
function textSink(plugin: () => PluginClient | undefined) {
  let text = "";
  let wake: (() => void) | undefined;
  return {
    push: (d: Uint8Array) => {
      text += Buffer.from(d).toString("utf8");
      wake?.();
    },
    get text() {
      return text;
    },
    async waitFor(expected: string): Promise<void> {
      const p = plugin()!;
      while (!text.includes(expected)) {
        if (p.exitSignal.aborted) throw new Error(`plugin exited before sending ${JSON.stringify(expected)}; got ${JSON.stringify(text)}`);
        await new Promise<void>((r) => {
          wake = r;
          p.exitSignal.addEventListener("abort", () => r(), { once: true });
        });
      }
    },
  };
}

/** A fresh $TMPDIR for one plugin process: go-plugin puts its socket there, and must leave it empty. */
const freshTmp = () => mkdtempSync(join(work, "tmp-"));

function pluginEnv(tmp: string, extra: Record<string, string> = {}): Record<string, string> {
  return { NOMADKIT_GO_FAKE_DESCRIPTORS: descriptors, TMPDIR: tmp, ...extra };
}

/** The calls every connection gets: health, PluginInfo, Capabilities. */
async function basicCalls(p: PluginClient): Promise<void> {
  expect((await p.health.check({ service: "plugin" }, { timeoutMs: 30_000 })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
  expect(await p.basePlugin.pluginInfo({}, { timeoutMs: 30_000 })).toMatchObject({
    type: PluginType.DRIVER,
    pluginApiVersions: ["v0.1.0"],
    pluginVersion: "0.1.0",
    name: "go-fake",
  });
  const { capabilities } = await p.driver.capabilities({}, { timeoutMs: 30_000 });
  expect(capabilities).toMatchObject({
    sendSignals: true,
    exec: false,
    fsIsolation: DriverCapabilities_FSIsolation.CHROOT,
    mountConfigs: DriverCapabilities_MountConfigs.NO_MOUNTS,
  });
}

/** ConfigSchema, SetConfig, a refused SetConfig, and the first Fingerprint, which reports the config back. */
async function configureAndFingerprint(p: PluginClient): Promise<void> {
  const { spec } = await p.basePlugin.configSchema({}, { timeoutMs: 30_000 });
  expect(spec?.block.case).toBe("object");
  const greeting = spec?.block.case === "object" ? spec.block.value.attributes.greeting : undefined;
  expect(greeting?.block).toMatchObject({ case: "Attr", value: { name: "greeting", type: "string", required: false } });

  await p.basePlugin.setConfig({ msgpackConfig: CONFIG, pluginApiVersion: "v0.1.0" }, { timeoutMs: 30_000 });
  // grpc-go's status reaches the caller as the ConnectError it is, code and message intact.
  const refused = await p.basePlugin.setConfig({ msgpackConfig: CONFIG, pluginApiVersion: "v9.9.9" }, { timeoutMs: 30_000 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(refused).toBeInstanceOf(ConnectError);
  expect((refused as ConnectError).code).toBe(Code.InvalidArgument);
  expect((refused as ConnectError).rawMessage).toBe('go-fake speaks plugin API v0.1.0, not "v9.9.9"');

  const stop = new AbortController();
  const stream = p.driver.fingerprint({}, { signal: stop.signal })[Symbol.asyncIterator]();
  const first = await stream.next();
  expect(first.done).toBe(false);
  expect(first.value).toMatchObject({ health: FingerprintResponse_HealthState.HEALTHY, healthDescription: "go-fake is ready" });
  expect(first.value.attributes["driver.go-fake"]?.value).toEqual({ case: "boolVal", value: true });
  expect(first.value.attributes["driver.go-fake.config"]?.value).toEqual({ case: "stringVal", value: CONFIG.toString("hex") });
  // The plugin holds the stream open; giving it up is a cancellation, not a failure of the plugin.
  stop.abort();
  const after = await stream.next().then(
    (r) => r,
    (e: unknown) => e,
  );
  expect(isCancellation(after), String(after)).toBe(true);
}

/**
 * Every line the plugin wrote to stderr, read to its end after the exit: hclog JSON only, parsed with
 * level, module and fields; go-plugin's own lines (`first`, "plugin address"), then the plugin's.
 */
async function checkStderr(logs: Logs, plugin: PluginClient, first: string[]): Promise<void> {
  await logs.end();
  const lines = logs.stderrLines();
  expect(lines.filter((e) => !e.structured).map((e) => e.raw)).toEqual([]);
  expect(lines.map((e) => e.message)).toEqual([...first, "plugin address", "set config", "plugin server stopped"]);
  expect(lines.every((e) => e.module === "go-fake" && e.timestamp !== undefined)).toBe(true);
  const line = (message: string) => lines.find((e) => e.message === message);
  expect(line("plugin address")).toMatchObject({ level: "debug", fields: { network: "unix", address: plugin.address } });
  expect(line("set config")).toMatchObject({ level: "info", fields: { api_version: "v0.1.0", config_hex: CONFIG.toString("hex") } });
}

describe.skipIf(skip !== undefined)(`a Go go-plugin plugin driven by @nomadkit/client${skip ? ` [skipped: ${skip}]` : ""}`, () => {
  beforeAll(async () => {
    // First use on a fresh machine installs Debian's Go packages and builds: minutes.
    bin = (await mustRun("bash", [join(repo, "tools/go/build.sh"), join(repo, "tools/interop-go-plugin")])).trim();
    work = mkdtempSync(join(tmpdir(), "nk-go-plugin-"));
    descriptors = join(work, "proto.binpb");
    await mustRun(join(repo, "node_modules/.bin/buf"), ["build", "-o", descriptors]);
  }, 20 * 60_000);

  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("unix socket: handshake, health, typed calls, hclog, GRPCStdio; close, reattach, kill; nothing left behind", async () => {
    const tmp = freshTmp();
    const logs = new Logs();
    let plugin: PluginClient | undefined;
    const out = textSink(() => plugin);
    const err = textSink(() => plugin);
    plugin = await launchPlugin(bin, [], {
      env: pluginEnv(tmp),
      logger: logs.add,
      onStdout: out.push,
      onStderr: err.push,
      // Generous on a busy machine; the exit code below tells a clean exit from kill()'s SIGKILL.
      killTimeoutMs: 30_000,
    });
    logs.watch(plugin);
    let again: PluginClient | undefined;
    try {
      // go-plugin 1.0.1 listens on $TMPDIR/plugin<random> (no directory of its own).
      expect(plugin.handshake).toMatchObject({ coreVersion: 1, protocolVersion: 2, network: "unix", protocol: "grpc", serverCert: "" });
      expect(dirname(plugin.address)).toBe(tmp);
      expect(lstatSync(plugin.address).isSocket()).toBe(true);
      expect(plugin.reattachConfig).toEqual({ pid: plugin.pid, network: "unix", address: plugin.address, protocolVersion: 2 });

      await basicCalls(plugin);
      await configureAndFingerprint(plugin);
      // Sent when the host opened the stream; a plugin without GRPCStdio makes the client warn instead.
      const unimplemented = logs.waitFor("about GRPCStdio", (e) => /GRPCStdio/.test(e.message)).then((e) => {
        throw new Error(`client: ${e.message}`);
      });
      unimplemented.catch(() => {}); // only its warning matters, raced here
      await Promise.race([Promise.all([out.waitFor(STDOUT_LINE), err.waitFor(STDERR_LINE)]), unimplemented]);
      expect(out.text).toBe(STDOUT_LINE);
      expect(err.text).toBe(STDERR_LINE);

      // close() leaves the plugin running; a reattach reaches the same process.
      plugin.close();
      expect(plugin.exitSignal.aborted).toBe(false);
      again = await reattachPlugin(plugin.reattachConfig, { killTimeoutMs: 30_000 });
      expect(again.pid).toBe(plugin.pid);
      await basicCalls(again);

      // Reattached, the exit status is not observable; the launch's process handle still sees it.
      expect(await again.kill()).toEqual({ code: null, signal: null });
      expect(await plugin.exited).toEqual({ code: 0, signal: null });
      // "plugin server stopped" last: plugin.Serve returned after GRPCController.Shutdown.
      await checkStderr(logs, plugin, []);
      expect(logs.entries.filter((e) => e.level === "warn" || e.level === "error")).toEqual([]);
      expect(readdirSync(tmp)).toEqual([]);
    } finally {
      if (!plugin.exitSignal.aborted) process.kill(plugin.pid, "SIGKILL");
      again?.close();
    }
  }, TEST_TIMEOUT_MS);

  it("AutoMTLS with the Go plugin's own certificate; no GRPCStdio; a second connection; kill", async () => {
    const tmp = freshTmp();
    const logs = new Logs();
    let plugin: PluginClient | undefined;
    const out = textSink(() => plugin);
    // NOMADKIT_GO_FAKE_STDIO=off: GRPCStdio Unimplemented, as go-plugin < 1.3 (Debian's) answers.
    plugin = await launchPlugin(bin, [], {
      autoMTLS: true,
      env: pluginEnv(tmp, { NOMADKIT_GO_FAKE_STDIO: "off" }),
      logger: logs.add,
      onStdout: out.push,
      killTimeoutMs: 30_000,
    });
    logs.watch(plugin);
    let second: PluginClient | undefined;
    try {
      expect(plugin.handshake).toMatchObject({ network: "unix", protocol: "grpc" });
      expect(dirname(plugin.address)).toBe(tmp);
      // Logged by the client itself (no stderr line) once StreamStdio failed; checked after the exit.
      const warned = logs.waitFor("about GRPCStdio", (e) => e.level === "warn" && /does not implement GRPCStdio/.test(e.message));
      warned.catch(() => {}); // awaited below

      // The certificate go-plugin generated (ECDSA, self-signed for localhost), as the handshake sent it.
      const tls = plugin.reattachConfig.tls!;
      const cert = new X509Certificate(tls.serverCertPem);
      expect(cert.publicKey.asymmetricKeyType).toBe("ec");
      expect(cert.subject).toContain("CN=localhost");
      expect(cert.subject).toContain("O=HashiCorp");
      expect(cert.checkIssued(cert)).toBe(true);
      expect(cert.raw.toString("base64").replace(/=+$/, "")).toBe(plugin.handshake.serverCert);
      expect(tls.clientCertPem).toContain("BEGIN CERTIFICATE");

      await basicCalls(plugin);
      await configureAndFingerprint(plugin);
      // The socket really speaks TLS: a plaintext h2c client gets nowhere.
      const plain = await new HealthClient(createUnixSocketTransport(plugin.address))
        .check({ service: "plugin" }, { timeoutMs: 30_000 })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(plain).toBeInstanceOf(ConnectError);
      expect((plain as ConnectError).code).not.toBe(Code.DeadlineExceeded);

      // A second connection with the TLS material from reattachConfig, alongside the first; closing
      // it leaves the plugin serving the first.
      second = await reattachPlugin(plugin.reattachConfig, { killTimeoutMs: 30_000 });
      await basicCalls(second);
      second.close();
      await basicCalls(plugin);

      expect(await plugin.kill()).toEqual({ code: 0, signal: null });
      await checkStderr(logs, plugin, ["configuring server automatic mTLS"]);
      expect((await warned).raw).toBe("");
      expect(out.text).toBe("");
      expect(readdirSync(tmp)).toEqual([]);
    } finally {
      if (!plugin.exitSignal.aborted) process.kill(plugin.pid, "SIGKILL");
      second?.close();
    }
  }, TEST_TIMEOUT_MS);

  it("a launch without Nomad's cookie fails with go-plugin's message and exit status", async () => {
    const tmp = freshTmp();
    const err = await launchPlugin(bin, [], {
      env: pluginEnv(tmp),
      cookie: { key: "NOMAD_PLUGIN_MAGIC_COOKIE", value: "not-nomad" },
    }).then(
      async (p) => {
        await p.kill();
        return undefined;
      },
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(PluginLaunchError);
    expect((err as PluginLaunchError).exit).toEqual({ code: 1, signal: null });
    expect((err as PluginLaunchError).stderr).toContain("This binary is a plugin. These are not meant to be executed directly.");
    expect(readdirSync(tmp)).toEqual([]);
  }, TEST_TIMEOUT_MS);

  it("nomadkit info and nomadkit --automtls fingerprint", async () => {
    const tmp = freshTmp();
    const env = { ...process.env, ...pluginEnv(tmp) };
    const info = await runProcess(process.execPath, [cli, "info", "--json", bin], { cwd: repo, env });
    expect(info.code, info.stderr).toBe(0);
    expect(info.stderr).toBe("");
    expect(JSON.parse(info.stdout)).toEqual({
      type: "DRIVER",
      pluginApiVersions: ["v0.1.0"],
      pluginVersion: "0.1.0",
      name: "go-fake",
      configSchema: { object: { attributes: { greeting: { Attr: { name: "greeting", type: "string" } } } } },
      taskConfigSchema: { object: { attributes: { command: { Attr: { name: "command", type: "string", required: true } } } } },
    });

    // SetConfig first, with no config block given: as Nomad's decoder shapes it, every declared
    // attribute, null when unset ({greeting: nil}), which the fingerprint reports back; the
    // plugin's hclog lines on the CLI's stderr show that it configured AutoMTLS.
    const fp = await runProcess(process.execPath, [cli, "--automtls", "--log-level", "info", "fingerprint", "--json", bin], { cwd: repo, env });
    expect(fp.code, fp.stderr).toBe(0);
    expect(JSON.parse(fp.stdout)).toMatchObject({
      health: "HEALTHY",
      healthDescription: "go-fake is ready",
      attributes: { "driver.go-fake.config": { stringVal: "81a86772656574696e67c0" } },
    });
    expect(fp.stderr).toContain(`[${bin}] INFO go-fake: configuring server automatic mTLS\n`);
    expect(fp.stderr).toContain(`[${bin}] INFO go-fake: set config api_version=v0.1.0 config_hex=81a86772656574696e67c0\n`);
    // Each run's plugin stopped cleanly and removed its socket.
    expect(readdirSync(tmp)).toEqual([]);
  }, TEST_TIMEOUT_MS);
});
