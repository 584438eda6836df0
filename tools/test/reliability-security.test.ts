// Security (issue 8), for the shipped binaries: the reference driver (nomadkit-rawexec) and the
// per-task executor it starts. Proven elsewhere for the servePlugin test fixture, and not repeated:
// socket dir 0700 / socket 0600 and PLUGIN_UNIX_SOCKET_DIR/GROUP (packages/server/test/
// goplugin-serve.test.ts), AutoMTLS rejecting a client without a certificate and one from another
// CA (goplugin-mtls.test.ts), refusing to run without or with a wrong cookie
// (goplugin-handshake.test.ts), the executor launching a task as `nobody` (executor.test.ts) and
// rawexec starting a task as `nobody` (examples/rawexec-driver/test/driver.test.ts, uid only).
// Added here:
// - rawexec and every executor it starts listen in a private directory (0700) on a 0600 socket;
// - AutoMTLS on rawexec: no client certificate, another CA's certificate, plain h2c: rejected;
// - rawexec and the executor binary refuse to run without the magic cookie, or with a wrong one;
// - a task with `user` runs with that user's uid, gid and groups only (setuid/setgid, no root
//   supplementary group), and exec into it — streaming with pipes, with a tty, and buffered
//   ExecTask — runs as exactly the same identity; numeric uid:gid works; an unknown user is
//   InvalidArgument naming the field.
import { spawnSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import * as net from "node:net";
import { dirname } from "node:path";
import * as tls from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import { HealthClient, generateSelfSignedCertificate, launchPlugin, type PluginClient, RequestQueue } from "@nomadkit/client";
import { HealthCheckResponse_ServingStatus as ServingStatus } from "@nomadkit/protocol/health";
import { executorBinPath } from "@nomadkit/server/executor";
import { launchRawexec, rawexecBin, rawexecTask, until } from "../reliability/helpers.js";
import { runProcess, type ProcessResult } from "./run-process.js";

const isRoot = process.getuid?.() === 0;

function mode(path: string): number {
  return statSync(path).mode & 0o777;
}

/** Runs a binary with `env` (no cookie unless given) and collects its exit and output. */
function runRaw(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<ProcessResult> {
  return runProcess(file, args, { env });
}

function envWithout(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k === "NOMAD_PLUGIN_MAGIC_COOKIE" || k.startsWith("PLUGIN_")) delete env[k];
  return env;
}

describe("the magic cookie", () => {
  for (const [name, file, args] of [
    ["nomadkit-rawexec", rawexecBin, []],
    ["the executor", process.execPath, [executorBinPath()]],
  ] as const) {
    it(`${name} refuses to run without it, or with a wrong one: a human message, exit 1, nothing on stdout`, async () => {
      for (const env of [envWithout(), { ...envWithout(), NOMAD_PLUGIN_MAGIC_COOKIE: "not-the-cookie", PLUGIN_PROTOCOL_VERSIONS: "2" }]) {
        const r = await runRaw(file, [...args], env);
        expect(r.code).toBe(1);
        expect(r.stdout).toBe("");
        expect(r.stderr).toContain("This binary is a plugin");
      }
    });
  }
});

describe("nomadkit-rawexec sockets and AutoMTLS", () => {
  let plugin: PluginClient;
  let task: ReturnType<typeof rawexecTask>;
  let executorAddress: string;

  beforeAll(async () => {
    ({ plugin } = await launchRawexec());
    task = rawexecTask({ command: "/bin/sleep", args: ["3600"] });
    const res = await plugin.driver.startTask({ task: task.config });
    const state = JSON.parse(Buffer.from(res.handle!.driverState).toString()) as { executor: { address: string; network: string } };
    expect(state.executor.network).toBe("unix");
    executorAddress = state.executor.address;
  });

  afterAll(async () => {
    try {
      await plugin?.driver.destroyTask({ taskId: task.id, force: true });
      if (plugin) expect(await plugin.kill()).toEqual({ code: 0, signal: null });
    } finally {
      // The task's cgroup (and what is left in it) goes whatever failed above.
      await task?.cleanup();
    }
  });

  it("the driver and its task's executor listen in private directories: dir 0700, socket 0600", () => {
    for (const address of [plugin.address, executorAddress]) {
      expect(statSync(address).isSocket()).toBe(true);
      expect(mode(dirname(address)), dirname(address)).toBe(0o700);
      expect(mode(address), address).toBe(0o600);
      expect(statSync(address).uid).toBe(process.getuid!());
    }
  });

  it("AutoMTLS: its own certificate in the handshake; no client certificate, another CA, or plain h2c are rejected", async () => {
    const mtls = await launchPlugin(rawexecBin, [], { autoMTLS: true, startTimeoutMs: 120_000 });
    try {
      expect((await mtls.health.check({ service: "plugin" })).status).toBe(ServingStatus.SERVING);
      const ca = new X509Certificate(Buffer.from(mtls.handshake.serverCert, "base64")).toString();
      const base = { path: mtls.address, servername: "localhost", ca, ALPNProtocols: ["h2"], minVersion: "TLSv1.2" as const };
      const healthOver = async (baseUrl: string, connect: () => net.Socket) => {
        const sessions = new Http2SessionManager(baseUrl, {}, { createConnection: connect });
        try {
          return (await new HealthClient(createGrpcTransport({ baseUrl, sessionManager: sessions })).check({ service: "plugin" }, { timeoutMs: 30_000 })).status;
        } finally {
          sessions.abort();
        }
      };
      await expect(healthOver("https://localhost", () => tls.connect(base))).rejects.toThrow(/certificate required|handshake|alert|reset|socket/i);
      const stranger = await generateSelfSignedCertificate();
      await expect(healthOver("https://localhost", () => tls.connect({ ...base, cert: stranger.certPem, key: stranger.keyPem }))).rejects.toThrow();
      await expect(healthOver("http://localhost", () => net.connect(mtls.address))).rejects.toThrow();
      // The launcher's own certificate still works.
      expect((await mtls.basePlugin.pluginInfo({})).name).toBe("nomadkit-rawexec");
    } finally {
      expect(await mtls.kill()).toEqual({ code: 0, signal: null });
    }
  });
});

describe.runIf(isRoot)("a task with a user", () => {
  let plugin: PluginClient;
  const tasks: ReturnType<typeof rawexecTask>[] = [];

  beforeAll(async () => {
    ({ plugin } = await launchRawexec());
  });

  afterAll(async () => {
    try {
      for (const t of tasks) await plugin?.driver.destroyTask({ taskId: t.id, force: true }).catch(() => {});
      if (plugin) expect(await plugin.kill()).toEqual({ code: 0, signal: null });
    } finally {
      for (const t of tasks) await t.cleanup();
    }
  });

  /** uid, gid and groups of `user` as the system sees them. */
  function identityOf(user: string): string {
    const id = (flag: string) => spawnSync("id", [flag, user], { encoding: "utf8" }).stdout.trim();
    return `${id("-u")} ${id("-g")} ${id("-G")}`;
  }

  /** Starts a task as `user` that records its identity, and returns it once written. */
  async function startAs(user: string): Promise<{ t: ReturnType<typeof rawexecTask>; identity: string }> {
    const t = rawexecTask({ command: "/bin/sh", args: ["-c", 'echo "$(id -u) $(id -g) $(id -G)"; exec sleep 3600'] }, { user });
    tasks.push(t);
    await plugin.driver.startTask({ task: t.config });
    const stdoutPath = t.config.stdoutPath as string;
    let identity = "";
    await until("the task to record its identity", () => (identity = readOr(stdoutPath).trim()) !== "");
    return { t, identity };
  }

  function readOr(path: string): string {
    try {
      return readFileSync(path, "utf8");
    } catch {
      return "";
    }
  }

  /** Exec `id` into the task (streaming, with or without a tty) and return what it printed. */
  async function execIdentity(taskId: string, tty: boolean): Promise<string> {
    const requests = new RequestQueue<object>();
    requests.push({ setup: { taskId, command: ["sh", "-c", 'echo "$(id -u) $(id -g) $(id -G)"'], tty } });
    let out = "";
    let exitCode: number | undefined;
    try {
      for await (const m of plugin.driver.execTaskStreaming(requests)) {
        if (m.stdout?.data.length) out += Buffer.from(m.stdout.data).toString();
        if (m.exited) exitCode = m.result?.exitCode;
      }
    } finally {
      requests.end();
    }
    expect(exitCode).toBe(0);
    return out.replace(/\r/g, "").trim();
  }

  it("runs as `nobody` (uid, gid, groups; no root group), and exec into it runs as the same identity", async () => {
    const want = identityOf("nobody");
    expect(want.split(" ")[0]).not.toBe("0");
    const { t, identity } = await startAs("nobody");
    expect(identity).toBe(want);
    expect(identity.split(" ").slice(2)).not.toContain("0");
    expect(await execIdentity(t.id, false)).toBe(want);
    expect(await execIdentity(t.id, true)).toBe(want);
    const buffered = await plugin.driver.execTask({ taskId: t.id, command: ["sh", "-c", 'echo "$(id -u) $(id -g) $(id -G)"'] });
    expect(buffered.result?.exitCode).toBe(0);
    expect(Buffer.from(buffered.stdout).toString().trim()).toBe(want);
  });

  it("a numeric uid:gid works the same way", async () => {
    const { t, identity } = await startAs("4242:4343");
    expect(identity).toBe("4242 4343 4343");
    expect(await execIdentity(t.id, false)).toBe("4242 4343 4343");
    expect(await execIdentity(t.id, true)).toBe("4242 4343 4343");
  });

  it("an unknown user is InvalidArgument naming the field", async () => {
    const t = rawexecTask({ command: "/bin/true" }, { user: "no-such-user-nomadkit" });
    tasks.push(t);
    const err = await plugin.driver.startTask({ task: t.config }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    expect((err as ConnectError).rawMessage).toMatch(/user/);
    tasks.pop();
    await t.cleanup();
  });
});

