// Host side of go-plugin with hand-made plugin processes (no @nomadkit/server involved).
import { spawn, spawnSync } from "node:child_process";
import * as http2 from "node:http2";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it, vi } from "vitest";
import {
  PluginLaunchError,
  PluginShutdownError,
  isCancellation,
  launchPlugin,
  parseHandshake,
  parseLogLine,
  reattachPlugin,
} from "../src/index.js";
import { ExitWatch } from "../src/runtime/exit-watch.js";

const fake = fileURLToPath(
  new URL("./fixtures/goplugin/fake-handshake.mjs", import.meta.url),
);

async function launchFake(
  env: Record<string, string>,
  extra: object = {},
): Promise<PluginLaunchError> {
  const err = await launchPlugin(process.execPath, [fake], {
    env,
    startTimeoutMs: 30_000,
    ...extra,
  }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(PluginLaunchError);
  return err as PluginLaunchError;
}

const scratch: string[] = [];
afterAll(() => {
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
});
/** A temporary directory removed after the tests. */
function scratchDir(): string {
  const d = mkdtempSync(join(tmpdir(), "nk-fake-"));
  scratch.push(d);
  return d;
}

/** `pid` was killed: it is reaped (no longer a pid) within moments. */
async function expectGone(pid: number): Promise<void> {
  const alive = () => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  for (let i = 0; i < 100 && alive(); i++) await new Promise((r) => setTimeout(r, 20));
  expect(alive()).toBe(false);
}

describe("parseHandshake", () => {
  it("parses a unix handshake", () => {
    expect(parseHandshake("1|2|unix|/tmp/p/plugin.sock|grpc|\n", [2])).toEqual({
      coreVersion: 1,
      protocolVersion: 2,
      network: "unix",
      address: "/tmp/p/plugin.sock",
      protocol: "grpc",
      serverCert: "",
    });
  });
  it("parses tcp with a certificate", () => {
    expect(
      parseHandshake("1|2|tcp|127.0.0.1:1234|grpc|QUJD", [2]),
    ).toMatchObject({ network: "tcp", serverCert: "QUJD" });
  });
  it("treats a missing protocol field as net/rpc and rejects it", () => {
    expect(() => parseHandshake("1|2|unix|/x", [2])).toThrow(
      /netrpc.*only grpc/,
    );
  });
});

describe("parseLogLine", () => {
  it("parses hclog JSON", () => {
    const e = parseLogLine(
      '{"@level":"warn","@message":"hi","@module":"drv","@timestamp":"2025-01-01T00:00:00.000000Z","k":1}',
    );
    expect(e).toMatchObject({
      level: "warn",
      message: "hi",
      module: "drv",
      fields: { k: 1 },
      structured: true,
    });
  });
  it("parses [LEVEL] prefixed lines and plain text", () => {
    expect(parseLogLine("[ERROR] boom")).toMatchObject({
      level: "error",
      message: "boom",
      structured: false,
    });
    expect(parseLogLine("just text")).toMatchObject({
      level: "debug",
      message: "just text",
    });
    expect(parseLogLine("{not json")).toMatchObject({
      level: "debug",
      message: "{not json",
    });
  });
});

describe("launchPlugin handshake errors (each quoting the plugin's stderr)", () => {
  it("wrong core version", async () => {
    const err = await launchFake({ FAKE_HANDSHAKE: "2|2|unix|/nowhere|grpc|" });
    expect(err.message).toMatch(/core protocol version "2"/);
    expect(err.stderr).toContain("fake plugin says hi");
    expect(err.message).toContain("[ERROR] fake plugin says hi detail=42");
    expect(err.message).toContain("a plain stderr line");
  });

  it("wrong app version", async () => {
    const err = await launchFake({ FAKE_HANDSHAKE: "1|5|unix|/nowhere|grpc|" });
    expect(err.message).toMatch(
      /plugin protocol version "5", but this host accepts 2/,
    );
    expect(err.stderr).toContain("a plain stderr line");
  });

  it("non-grpc protocol", async () => {
    const err = await launchFake({
      FAKE_HANDSHAKE: "1|2|unix|/nowhere|netrpc|",
    });
    expect(err.message).toMatch(/only grpc is supported/);
  });

  it("unknown network", async () => {
    const err = await launchFake({ FAKE_HANDSHAKE: "1|2|udp|/nowhere|grpc|" });
    expect(err.message).toMatch(/unsupported network "udp"/);
  });

  it("a TCP port range a plugin cannot bind in is refused before it starts, naming the option", async () => {
    // The fake plugin would handshake: only the check stops these launches.
    const handshake = { FAKE_HANDSHAKE: "1|2|unix|/nowhere|grpc|" };
    expect((await launchFake(handshake, { minPort: 20000 })).message).toBe(
      "launchPlugin: minPort 20000 is above maxPort 0 (set both, or neither for any port)",
    );
    expect((await launchFake(handshake, { minPort: 1, maxPort: 70000 })).message).toBe(
      "launchPlugin: maxPort must be a port number (0 to 65535), not 70000",
    );
    expect((await launchFake(handshake, { minPort: 1.5, maxPort: 2 })).message).toMatch(/^launchPlugin: minPort must be a port number/);
  });

  it("garbage instead of a handshake", async () => {
    const err = await launchFake({ FAKE_HANDSHAKE: "Listening on port 8080" });
    expect(err.message).toMatch(
      /wrote "Listening on port 8080" to stdout, which is not a go-plugin handshake/,
    );
  });

  it("exit before the handshake", async () => {
    const err = await launchFake({ FAKE_EXIT: "3" });
    expect(err.message).toMatch(
      /exited with status 3 before completing the go-plugin handshake/,
    );
    expect(err.stderr).toContain("a plain stderr line");
    expect(err.exit).toEqual({ code: 3, signal: null });
    expect(err.message).not.toContain("serveDriver");
    // Status 0: a module that ran to its end without serving (a forgotten serveDriver call).
    expect((await launchFake({ FAKE_EXIT: "0" })).message).toMatch(
      /exited with status 0 before completing the go-plugin handshake \(a plugin serves until it is stopped: does it call serveDriver or servePlugin\?\)/,
    );
  });

  it("a plugin file that cannot be run: the error names the file and why, not only spawn's EACCES/ENOENT", async () => {
    const d = scratchDir();
    const file = join(d, "driver");
    writeFileSync(file, "#!/bin/sh\nexit 0\n", { mode: 0o644 });
    mkdirSync(join(d, "subdir"));
    writeFileSync(join(d, "orphan"), "#!/nonexistent/interp\n", { mode: 0o755 });
    const failure = async (cmd: string, options: Parameters<typeof launchPlugin>[2] = {}) => {
      const err = await launchPlugin(cmd, [], options).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(PluginLaunchError);
      return (err as Error).message;
    };
    // Was "cannot start plugin <file>: spawn <file> EACCES" for the first two.
    expect(await failure(file)).toBe(`cannot start plugin ${file}: ${file} is not executable (mode 0644; chmod +x it)`);
    expect(await failure(join(d, "subdir"))).toBe(`cannot start plugin ${join(d, "subdir")}: ${join(d, "subdir")} is a directory, not a program`);
    expect(await failure(join(d, "nope"))).toBe(`cannot start plugin ${join(d, "nope")}: ${join(d, "nope")} does not exist`);
    // Relative to the plugin's working directory, as spawn runs it.
    expect(await failure("./driver", { cwd: d })).toBe(`cannot start plugin ./driver: ${file} is not executable (mode 0644; chmod +x it)`);
    expect(await failure("nk-no-such-plugin", { env: { PATH: d } })).toBe(`cannot start plugin nk-no-such-plugin: no executable "nk-no-such-plugin" in PATH (${d})`);
    expect(await failure("driver", { env: { PATH: d } })).toBe(`cannot start plugin driver: ${file} is not executable (mode 0644; chmod +x it)`);
    expect(await failure(join(d, "orphan"))).toBe(`cannot start plugin ${join(d, "orphan")}: its interpreter "/nonexistent/interp" does not exist`);
    expect(await failure(file, { cwd: join(d, "gone") })).toBe(`cannot start plugin ${file}: its working directory ${join(d, "gone")} does not exist`);
  });

  it("killed by a signal before the handshake: the error says which, as data too", async () => {
    const err = await launchFake({ FAKE_KILL: "SIGTERM" });
    expect(err.message).toMatch(/exited on signal SIGTERM before completing the go-plugin handshake/);
    expect(err.exit).toEqual({ code: null, signal: "SIGTERM" });
  });

  it("AutoMTLS requested but the plugin answers without a certificate", async () => {
    const err = await launchFake(
      { FAKE_HANDSHAKE: "1|2|unix|/nowhere|grpc|" },
      { autoMTLS: true },
    );
    expect(err.message).toMatch(/ignored AutoMTLS/);
  });

  it("an invalid tcp address, and the plugin is killed", async () => {
    const pidFile = join(scratchDir(), "pid");
    for (const address of ["localhost", "127.0.0.1:http", "127.0.0.1:70000", ":1234"]) {
      const err = await launchFake({ FAKE_HANDSHAKE: `1|2|tcp|${address}|grpc|`, FAKE_PIDFILE: pidFile });
      expect(err.message).toContain(`sent a handshake with an invalid tcp address ${JSON.stringify(address)} (expected host:port)`);
      expect(err.stderr).toContain("a plain stderr line");
      await expectGone(Number(readFileSync(pidFile, "utf8")));
    }
  });

  it("an aborted launch kills the plugin", async () => {
    const pidFile = join(scratchDir(), "pid");
    const ac = new AbortController();
    // Cancelled once the host has the plugin's stderr line (written after its pid file), not after
    // a fixed time: on a busy machine the plugin may not have started by then.
    const logger = (e: { message: string }) => {
      if (e.message.includes("a plain stderr line")) ac.abort();
    };
    const err = await launchFake({ FAKE_SILENT: "1", FAKE_PIDFILE: pidFile }, { signal: ac.signal, logger });
    expect(err.message).toMatch(/^launch of plugin .* cancelled/);
    expect(err.stderr).toContain("a plain stderr line");
    await expectGone(Number(readFileSync(pidFile, "utf8")));
  });

  it("a plugin that closes its stdout without a handshake fails at once (no start timeout), and is killed", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-fake-"));
    try {
      const pidFile = join(dir, "pid");
      const err = await launchFake({ FAKE_CLOSE_STDOUT: "1", FAKE_PIDFILE: pidFile }, { startTimeoutMs: 2 ** 31 - 1 });
      expect(err.message).toMatch(/^plugin .*fake-handshake\.mjs closed its stdout without writing the go-plugin handshake\n/);
      expect(err.stderr).toContain("a plain stderr line");
      expect(err.exit).toBeUndefined();
      await expectGone(Number(readFileSync(pidFile, "utf8")));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a start timeout beyond what a Node timer holds (2^31-1 ms) does not fire at once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-fake-h2-"));
    try {
      const err = await launchFake({ FAKE_H2_404: dir }, { startTimeoutMs: 2 ** 31 });
      // Past the handshake: the plugin's answer, not the deadline, ended the launch.
      expect(err.message).toMatch(/cannot talk gRPC to plugin .* at unix:.*plugin\.sock: .*HTTP 404/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("an HTTP/2 server that is not gRPC (404 for everything) is not taken for a plugin", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-fake-h2-"));
    try {
      const err = await launchFake({ FAKE_H2_404: dir });
      expect(err.message).toMatch(/cannot talk gRPC to plugin .* at unix:.*plugin\.sock: .*HTTP 404/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a handshake pointing nowhere fails to connect, naming the address", async () => {
    const err = await launchFake({
      FAKE_HANDSHAKE: "1|2|unix|/nonexistent/plugin.sock|grpc|",
    });
    expect(err.message).toMatch(
      /cannot talk gRPC to plugin .* at unix:\/nonexistent\/plugin\.sock/,
    );
  });
});

describe("kill", () => {
  /** kill()'s exit for a fake plugin whose Shutdown drops the connection (and exits 0 with `exits`). */
  async function killed(options: Parameters<typeof launchPlugin>[2], exits: boolean, before?: (p: Awaited<ReturnType<typeof launchPlugin>>) => void) {
    const dir = mkdtempSync(join(tmpdir(), "nk-drop-"));
    try {
      const env = { FAKE_DROP_ON_SHUTDOWN: dir, ...(exits && { FAKE_SHUTDOWN_EXITS: "1" }) };
      const p = await launchPlugin(process.execPath, [fake], { ...options, env });
      before?.(p);
      return await p.kill();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it("sends SIGKILL killTimeoutMs after a Shutdown the plugin drops without exiting, not after the runtime's shutdown grace too", async () => {
    // A grace longer than the test's timeout: kill() waited it out before its own timeout began.
    expect(await killed({ killTimeoutMs: 500, shutdownGraceMs: 600_000 }, false)).toEqual({ code: null, signal: "SIGKILL" });
  }, 20_000);

  it("after close() still sends GRPCController.Shutdown (on a connection of its own): the plugin exits by itself, not by SIGKILL", async () => {
    // close(): a finally that lets go of the connection, then a later stop.
    expect(await killed({ killTimeoutMs: 10_000 }, true, (p) => p.close())).toEqual({ code: 0, signal: null });
  }, 20_000);
});

describe("killSync", () => {
  it("SIGKILLs the plugin before it returns, and removes the socket directory the plugin can no longer remove", async () => {
    // A nomadkit plugin's private socket directory; its Shutdown is never sent (an exit listener cannot wait for it).
    const dir = mkdtempSync(join(tmpdir(), "plugin-"));
    let p: Awaited<ReturnType<typeof launchPlugin>> | undefined;
    try {
      p = await launchPlugin(process.execPath, [fake], { env: { FAKE_DROP_ON_SHUTDOWN: dir } });
      expect(existsSync(join(dir, "plugin.sock"))).toBe(true);
      p.killSync();
      // Before anything asynchronous ran, as in a process "exit" listener.
      expect(existsSync(dir)).toBe(false);
      expect(await p.exited).toEqual({ code: null, signal: "SIGKILL" });
      // Once it has exited: nothing to do.
      p.killSync();
    } finally {
      if (p && !p.exitSignal.aborted) p.process?.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it("with processTree, SIGKILLs what the plugin started too, which outlives it otherwise", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-tree-"));
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]![0] !== "Z";
      } catch {
        return false;
      }
    };
    const grandchildren: number[] = [];
    try {
      for (const processTree of [false, true]) {
        const pidFile = join(dir, `sleep-${processTree}.pid`);
        // The plugin's socket directory, removed by killSync.
        const sockets = mkdtempSync(join(tmpdir(), "plugin-"));
        const p = await launchPlugin(process.execPath, [fake], {
          env: { FAKE_DROP_ON_SHUTDOWN: sockets, FAKE_GRANDCHILD_PIDFILE: pidFile },
        });
        const sleep = Number(readFileSync(pidFile, "utf8").trim());
        grandchildren.push(sleep);
        p.killSync({ processTree });
        expect(await p.exited).toEqual({ code: null, signal: "SIGKILL" });
        // SIGKILL is delivered before kill() returns; a killed process is gone once reaped (by init).
        if (processTree) await vi.waitFor(() => expect(alive(sleep)).toBe(false), { timeout: 30_000, interval: 20 });
        else expect(alive(sleep)).toBe(true);
      }
    } finally {
      for (const pid of grandchildren) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // gone
        }
      }
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("close", () => {
  it("fails calls in flight at once as cancellations, not after the grace for a plugin exit", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-close-"));
    const sock = join(dir, "p.sock");
    const server = http2.createServer();
    server.on("session", (session) => session.on("error", () => {}));
    server.on("stream", (s, h) => {
      s.on("error", () => {});
      // Health Unimplemented (reattachPlugin's ping accepts it); every other call is never answered.
      if (h[":path"]!.includes("Health")) s.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12" }, { endStream: true });
    });
    await new Promise<void>((r) => server.listen(sock, r));
    try {
      // A grace longer than the test's timeout: the calls waited it out before.
      const p = await reattachPlugin({ pid: process.pid, network: "unix", address: sock }, { shutdownGraceMs: 600_000 });
      const unary = p.driver.waitTask({ taskId: "t" }).catch((e: unknown) => e);
      const stream = (async () => {
        for await (const _ of p.driver.taskEvents({})) void _;
      })().catch((e: unknown) => e);
      await new Promise((r) => setTimeout(r, 100)); // both reach the server
      p.close();
      // And calls made in the same tick as close(): they did not reach a connection yet (they made a new one).
      const late = await reattachPlugin({ pid: process.pid, network: "unix", address: sock }, { shutdownGraceMs: 600_000 });
      const sameTick = [late.driver.waitTask({ taskId: "t" }).catch((e: unknown) => e), late.driver.capabilities({}).catch((e: unknown) => e)];
      late.close();
      for (const err of await Promise.all([unary, stream, ...sameTick])) {
        expect(isCancellation(err), String(err)).toBe(true);
        expect((err as Error).message).toContain("the connection to the plugin was closed on this side");
      }
    } finally {
      server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 20_000);
});

describe("close or kill while a failed call waits for the plugin's exit", () => {
  /**
   * A plugin whose WaitTask drops the connection while its process stays alive: the call then waits
   * (up to the shutdown grace) for an exit. Resolves once it waits, with the call's outcome.
   */
  async function waitingCall(options: Parameters<typeof launchPlugin>[2]) {
    const dir = mkdtempSync(join(tmpdir(), "nk-wait-"));
    scratch.push(dir);
    const p = await launchPlugin(process.execPath, [fake], { ...options, env: { FAKE_DROP_ON_SHUTDOWN: dir, FAKE_DROP_WAIT_TASK: "1" } });
    // The wait itself is the synchronisation point, not a sleep.
    let waiting!: () => void;
    const waits = new Promise<void>((r) => (waiting = r));
    const wait = ExitWatch.prototype.wait;
    const spy = vi.spyOn(ExitWatch.prototype, "wait").mockImplementation(function (this: ExitWatch, ...args) {
      waiting();
      return wait.apply(this, args);
    });
    try {
      const call = p.driver.waitTask({ taskId: "t" }).catch((e: unknown) => e);
      await waits;
      return { p, call };
    } finally {
      spy.mockRestore();
    }
  }

  it("close() ends the wait at once as a cancellation (it waited out the whole grace)", async () => {
    // A grace longer than the test's timeout: the wait ran to its end before.
    const { p, call } = await waitingCall({ shutdownGraceMs: 600_000 });
    p.close();
    const err = await call;
    expect(isCancellation(err), String(err)).toBe(true);
    expect((err as Error).message).toContain("the connection to the plugin was closed on this side");
    p.process!.kill("SIGKILL");
  }, 20_000);

  it("kill() ends it with PluginShutdownError once the process is gone, and close() during the kill still ends in SIGKILL", async () => {
    const { p, call } = await waitingCall({ shutdownGraceMs: 600_000, killTimeoutMs: 500 });
    const killed = p.kill();
    expect(await call).toBeInstanceOf(PluginShutdownError);
    expect(await killed).toEqual({ code: null, signal: "SIGKILL" });
    // close() while kill() waits for the exit: the process is still killed.
    const again = await waitingCall({ shutdownGraceMs: 600_000, killTimeoutMs: 500 });
    const killing = again.p.kill();
    again.p.close();
    expect(isCancellation(await again.call)).toBe(true);
    expect(await killing).toEqual({ code: null, signal: "SIGKILL" });
    await expectGone(again.p.pid);
  }, 20_000);
});

describe("reattachPlugin", () => {
  it("refuses a pid that does not exist", async () => {
    // pid_max is at most 2^22 on Linux.
    await expect(
      reattachPlugin({ pid: 4_194_305, network: "unix", address: "/x" }),
    ).rejects.toThrow(/no process with pid/);
  });
  it("removes the socket directory a plugin killed hard left, when it finds the plugin gone", async () => {
    // A nomadkit plugin's private directory holding only its socket, and a pid that has exited.
    const dir = mkdtempSync(join(tmpdir(), "plugin-"));
    const sock = join(dir, "plugin.sock");
    // Listening, then SIGKILLed: its socket file stays.
    const child = spawn(process.execPath, ["-e", `require("node:net").createServer().listen(${JSON.stringify(sock)}, () => process.kill(process.pid, "SIGKILL"))`]);
    await once(child, "exit");
    try {
      expect(existsSync(sock)).toBe(true);
      await expect(reattachPlugin({ pid: child.pid!, network: "unix", address: sock })).rejects.toThrow(`no process with pid ${child.pid}`);
      expect(existsSync(dir)).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it("takes a zombie for an exited plugin, at reattach and while attached", async () => {
    // `sh` execs a `sleep` that never reaps the server started before it: once killed, the server
    // stays a zombie, which kill(pid, 0) still finds.
    const sock = join(tmpdir(), `nk-zombie-${process.pid}.sock`);
    const server = `const h=require("node:http2").createServer();h.on("stream",(s,hd)=>{if(hd[":path"].includes("Health"))return s.respond({":status":200,"content-type":"application/grpc","grpc-status":"12"},{endStream:true});s.respond({":status":200,"content-type":"application/grpc"});});h.listen(${JSON.stringify(sock)},()=>console.log("ready"));`;
    const parent = spawn("sh", ["-c", `"$0" -e '${server}' & echo $!; exec sleep 60`, process.execPath], { stdio: ["ignore", "pipe", "inherit"] });
    try {
      const lines = createInterface({ input: parent.stdout! })[Symbol.asyncIterator]();
      const pid = Number((await lines.next()).value);
      expect((await lines.next()).value).toBe("ready");
      const p = await reattachPlugin({ pid, network: "unix", address: sock }, { pollIntervalMs: 10 });
      const call = p.basePlugin.pluginInfo({}).catch((e: unknown) => e); // never answered
      process.kill(pid, "SIGKILL");
      expect(await call).toBeInstanceOf(PluginShutdownError);
      expect(await p.exited).toEqual({ code: null, signal: null });
      // Taken for exited while still on its way out (PF_EXITING, state R on a busy host): a zombie a moment later.
      const zombie = () => / Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\)/s, ""));
      for (let i = 0; i < 200 && !zombie(); i++) await new Promise((r) => setTimeout(r, 10));
      expect(readFileSync(`/proc/${pid}/stat`, "utf8")).toMatch(/\) Z /);
      await expect(reattachPlugin({ pid, network: "unix", address: sock })).rejects.toThrow(`no process with pid ${pid}`);
    } finally {
      parent.kill("SIGKILL");
      rmSync(sock, { force: true });
    }
  });
  // Run as nobody, who must be able to read this checkout's built code (not so under /root, say).
  const built = fileURLToPath(new URL("../dist/esm/index.js", import.meta.url));
  const nobodyReads = () => spawnSync("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "test", "-r", built]).status === 0;
  it.skipIf(process.getuid?.() !== 0 || !existsSync("/usr/bin/setpriv") || !nobodyReads())(
    "kill() of a plugin it may not SIGKILL (another user's) rejects, naming the cause, and stops its polls",
    async () => {
      // A root-owned plugin that drops Shutdown and stays alive; nobody reattaches and kills it.
      const dir = scratchDir();
      chmodSync(dir, 0o755);
      const plugin = spawn(process.execPath, [fake], { env: { ...process.env, FAKE_DROP_ON_SHUTDOWN: dir }, stdio: ["ignore", "pipe", "ignore"] });
      try {
        const line = String((await createInterface({ input: plugin.stdout! })[Symbol.asyncIterator]().next()).value);
        const sock = line.split("|")[3]!;
        chmodSync(sock, 0o777);
        const script = `
          const { reattachPlugin } = await import(${JSON.stringify(built)});
          const p = await reattachPlugin({ pid: ${plugin.pid}, network: "unix", address: ${JSON.stringify(sock)} }, { killTimeoutMs: 100 });
          try { console.log(JSON.stringify({ resolved: await p.kill() })); }
          catch (err) { console.log(JSON.stringify({ rejected: err.message, cause: err.cause?.code })); }`;
        // Before: kill() never settled, and its 5 ms poll kept this process alive until the timeout.
        const r = await new Promise<{ stdout: string; code: number | null }>((resolve) => {
          const c = spawn("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, "--input-type=module", "-e", script], { timeout: 30_000 });
          let stdout = "";
          c.stdout.on("data", (d: Buffer) => (stdout += d));
          c.on("exit", (code) => resolve({ stdout, code }));
        });
        expect(r.code).toBe(0);
        expect(JSON.parse(r.stdout)).toEqual({
          rejected: `cannot kill plugin ${plugin.pid}: it did not exit within 100 ms of GRPCController.Shutdown, and SIGKILL is not permitted (EPERM: the process is not this user's); it is still running`,
          cause: "EPERM",
        });
        expect(plugin.exitCode).toBe(null);
      } finally {
        plugin.kill("SIGKILL");
      }
    },
    60_000,
  );
  it("refuses an invalid tcp address, naming it, and leaves no exit poll running", async () => {
    vi.useFakeTimers();
    try {
      const err = await reattachPlugin({ pid: process.pid, network: "tcp", address: "127.0.0.1" }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(PluginLaunchError);
      expect((err as Error).message).toBe('reattach: invalid tcp address "127.0.0.1" (expected host:port)');
      // The poll for the plugin's exit (every 500 ms, for ever) was started before the address was read.
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });
  it("refuses a bad network", async () => {
    await expect(
      reattachPlugin({
        pid: process.pid,
        network: "udp" as "unix",
        address: "/x",
      }),
    ).rejects.toThrow(/network must be/);
  });
});
