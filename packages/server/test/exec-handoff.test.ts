// The exec output handoff (src/exec/handoff.ts): a driver's forwardExecStream has the executor start
// the command with its stdout/stderr connected to sockets the driver reads. Checked through a real
// driver plugin and its real executor processes: which socket the command's stdout is (read from
// /proc/net/unix: an accepted socket shows its listener's path), the exec protocol's ordering with
// output still flowing after the exit, stdin, exit statuses, and the fallback to messages when the
// executor cannot be reached that way. The executor's listener on its own: unknown tokens, bad prefaces.
import { existsSync, readdirSync, readFileSync, readlinkSync, mkdtempSync, rmSync, unlinkSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { Code, ConnectError } from "@connectrpc/connect";
import { launchPlugin, type PluginClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutputHandoff, openHandoffSession } from "../src/exec/handoff.js";
import { executorBinPath } from "../src/executor.js";

const fixture = join(dirname(fileURLToPath(import.meta.url)), "fixtures/executor/driver.mjs");

interface Run {
  stdout: string;
  stderr: string;
  /** Non-data events in order: "stdout-close", "stderr-close", "exited". */
  events: string[];
  exitCode: number;
  signal: number;
}

async function exec(plugin: PluginClient, command: string[], stdin?: string): Promise<Run> {
  async function* requests() {
    yield { setup: { taskId: "t", command, tty: false } };
    if (stdin !== undefined) {
      yield { stdin: { data: Buffer.from(stdin) } };
      yield { stdin: { close: true } };
    }
    await new Promise(() => {}); // Nomad never half-closes
  }
  const run: Run = { stdout: "", stderr: "", events: [], exitCode: -1, signal: -1 };
  for await (const r of plugin.driver.execTaskStreaming(requests())) {
    if (r.stdout?.data.length) run.stdout += Buffer.from(r.stdout.data).toString();
    if (r.stderr?.data.length) run.stderr += Buffer.from(r.stderr.data).toString();
    if (r.stdout?.close) run.events.push("stdout-close");
    if (r.stderr?.close) run.events.push("stderr-close");
    if (r.exited) {
      run.events.push("exited");
      run.exitCode = r.result!.exitCode;
      run.signal = r.result!.signal;
    }
  }
  return run;
}

/** The path a unix socket inode is bound to, as /proc/net/unix lists it ("" when unnamed). */
function unixSocketPath(inode: string): string | undefined {
  for (const line of readFileSync("/proc/net/unix", "utf8").split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f[6] === inode) return f[7] ?? "";
  }
  return undefined;
}

/** Where the command's stdout went: the bound path of the socket it was given. */
async function stdoutSocketPath(plugin: PluginClient): Promise<string | undefined> {
  // The command prints its own fd 1 and holds it a while, so the socket is still listed when looked up.
  async function* requests() {
    yield { setup: { taskId: "t", command: ["/bin/sh", "-c", "readlink /proc/self/fd/1; sleep 2"], tty: false } };
    await new Promise(() => {});
  }
  let path: string | undefined;
  let out = "";
  for await (const r of plugin.driver.execTaskStreaming(requests())) {
    if (!r.stdout?.data.length || path !== undefined) continue;
    out += Buffer.from(r.stdout.data).toString();
    const m = /^socket:\[(\d+)\]\n/.exec(out);
    if (m) path = unixSocketPath(m[1]!);
  }
  expect(out).toMatch(/^socket:/);
  return path;
}

describe("exec output handoff, through a driver and its executor", () => {
  let dir: string;
  let plugin: PluginClient;

  beforeAll(async () => {
    if (!existsSync(executorBinPath())) throw new Error(`build first: ${executorBinPath()} is missing (npx turbo run build)`);
    dir = mkdtempSync(join(tmpdir(), "nk-handoff-"));
    plugin = await launchPlugin(process.execPath, [fixture], { env: { TMPDIR: dir, NOMADKIT_LOG_LEVEL: "warn" } });
    await plugin.driver.startTask({ task: { id: "t", name: "t", allocId: "a1" } });
  });

  afterAll(async () => {
    await plugin?.driver.destroyTask({ taskId: "t", force: true }).catch(() => undefined);
    await plugin?.kill();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("gives the command the executor's handoff socket as its stdout", async () => {
    const path = await stdoutSocketPath(plugin);
    expect(path).toMatch(/\/exec-output\.sock$/);
  });

  it("keeps stdout and stderr apart, passes stdin, and reports the exit after every close marker", async () => {
    const r = await exec(plugin, ["/bin/sh", "-c", "cat; echo err >&2; exit 3"], "from stdin\n");
    expect(r.stdout).toBe("from stdin\n");
    expect(r.stderr).toBe("err\n");
    expect([...r.events].sort()).toEqual(["exited", "stderr-close", "stdout-close"]);
    expect(r.events.at(-1)).toBe("exited");
    expect(r.exitCode).toBe(3);
  });

  it("waits for output written after the command exited (a background process still holding stdout)", async () => {
    const r = await exec(plugin, ["/bin/sh", "-c", "echo first; (sleep 0.5; echo late) & exit 0"]);
    expect(r.stdout).toBe("first\nlate\n");
    expect(r.events.at(-1)).toBe("exited");
  });

  it("a call cancelled while a leftover process holds the output ends, and lets go of the sockets", async () => {
    const sockets = () => readdirSync(`/proc/${plugin.pid}/fd`).filter((fd) => {
      try {
        return readlinkSync(`/proc/${plugin.pid}/fd/${fd}`).startsWith("socket:");
      } catch {
        return false; // closed while listing
      }
    }).length;
    const before = sockets();
    const ac = new AbortController();
    async function* requests() {
      yield { setup: { taskId: "t", command: ["/bin/sh", "-c", `echo x; sleep 30 & echo $! > ${join(dir, "leftover.pid")}; exit 0`], tty: false } };
      await new Promise(() => {});
    }
    const err = await (async () => {
      for await (const r of plugin.driver.execTaskStreaming(requests(), { signal: ac.signal })) {
        if (r.stdout?.data.length) ac.abort();
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Canceled);
    // The leftover sleep still holds its end; the plugin's ends must be closed all the same.
    for (let i = 0; i < 100 && sockets() > before; i++) await sleep(50);
    expect(sockets()).toBeLessThanOrEqual(before);
    process.kill(Number(readFileSync(join(dir, "leftover.pid"), "utf8")), "SIGKILL");
  });

  it("reports a command killed by a signal as Nomad does (128+N)", async () => {
    const r = await exec(plugin, ["/bin/sh", "-c", "kill -9 $$"]);
    expect(r.exitCode).toBe(137);
    expect(r.signal).toBe(9);
  });

  it("carries bulk output byte-exact", async () => {
    const r = await exec(plugin, ["/bin/sh", "-c", "seq 1 300000"]);
    const expected = Array.from({ length: 300000 }, (_, i) => `${i + 1}\n`).join("");
    expect(r.stdout.length).toBe(expected.length);
    expect(r.stdout === expected).toBe(true);
  });

  it("falls back to output as messages when the executor's handoff socket cannot be reached", async () => {
    const sockets = readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((p) => p.endsWith("exec-output.sock"));
    expect(sockets).toHaveLength(1);
    unlinkSync(join(dir, sockets[0]!));
    // The executor's own socket pair now (its listener lives in a nomadkit-pairs directory).
    expect(await stdoutSocketPath(plugin)).toMatch(/nomadkit-pairs-[^/]+\/s$/);
    const r = await exec(plugin, ["/bin/sh", "-c", "cat; echo err >&2; exit 4"], "again\n");
    expect(r).toMatchObject({ stdout: "again\n", stderr: "err\n", exitCode: 4 });
    expect(r.events.at(-1)).toBe("exited");
  });
});

describe("the executor's handoff listener", () => {
  let dir: string;
  let handoff: OutputHandoff;
  const sink = () => new Writable({ write: (_c, _e, cb) => cb() });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "nk-handoff-l-"));
    handoff = new OutputHandoff();
    await handoff.listen(join(dir, "exec-output.sock"));
  });

  afterAll(() => {
    handoff?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("hands out the two connections a session made, by its token", async () => {
    const session = await openHandoffSession(join(dir, "exec-output.sock"), sink(), sink());
    const outputs = await handoff.claim(session.token, new AbortController().signal);
    expect(outputs).toBeDefined();
    // What the process would write into its stdout arrives at the session's stdout.
    const got: Buffer[] = [];
    const target = new Writable({
      write: (c: Buffer, _e, cb) => {
        got.push(Buffer.from(c));
        cb();
      },
    });
    const second = await openHandoffSession(join(dir, "exec-output.sock"), target, sink());
    const mine = (await handoff.claim(second.token, new AbortController().signal))!;
    mine.stdout.end("hello");
    mine.stderr.destroy();
    await second.done;
    expect(Buffer.concat(got).toString()).toBe("hello");
    outputs!.stdout.destroy();
    outputs!.stderr.destroy();
    await session.done;
  });

  it("declines a token nobody connected for, once the call is aborted", async () => {
    const ac = new AbortController();
    const claimed = handoff.claim("0".repeat(32), ac.signal);
    ac.abort();
    expect(await claimed).toBeUndefined();
    expect(await handoff.claim("not a token", new AbortController().signal)).toBeUndefined();
  });

  it("closes a connection whose preface is not a token", async () => {
    const s = connect(join(dir, "exec-output.sock"));
    s.on("data", () => {});
    s.write("GET /index.html HTTP/1.1\r\nHost: localhost\r\n\r\n");
    await new Promise<void>((resolve) => s.once("close", () => resolve()));
    expect(s.destroyed).toBe(true);
  });

  it("declines when nothing listens (no listen call)", async () => {
    expect(await new OutputHandoff().claim("a".repeat(32), new AbortController().signal)).toBeUndefined();
  });
});
