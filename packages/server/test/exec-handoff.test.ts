// The exec output handoff (src/exec/handoff.ts): a driver's forwardExecStream has the executor start
// the command with its stdout/stderr connected to FIFOs the driver reads. Checked through a real
// driver plugin and its real executor processes: what the command's stdout is (a FIFO the driver
// process holds open), the exec protocol's ordering with output still flowing after the exit,
// stdin, exit statuses, and output as messages when the driver cannot make FIFOs or the executor
// declines them. The executor's side on its own: only FIFOs with a reader are ever opened.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, openSync, closeSync, constants, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { Code, ConnectError } from "@connectrpc/connect";
import { launchPlugin, type PluginClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OUTPUT_HANDOFF_HEADER, closeHandedOutputs, openHandedOutputs, outputHandoffHeader } from "../src/exec/handoff.js";
import { executorBinPath, launchExecutor, type ExecutorHandle } from "../src/executor.js";

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

/** Files (FIFOs, sockets: readlink targets) that process `pid` has open, matching `pattern`. */
function openFiles(pid: number, pattern: RegExp): string[] {
  const out: string[] = [];
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      if (pattern.test(target)) out.push(target);
    } catch {
      // closed while listing
    }
  }
  return out;
}

/**
 * What the command's stdout is (readlink of its fd 1: a FIFO's path, or `socket:[inode]`), and
 * whether the driver process holds that same file open while the command runs.
 */
async function stdoutOf(plugin: PluginClient): Promise<{ target: string; heldByDriver: boolean }> {
  // The command prints its own fd 1 and keeps it a while, so the driver's ends are still open when looked up.
  async function* requests() {
    yield { setup: { taskId: "t", command: ["/bin/sh", "-c", "readlink /proc/self/fd/1; sleep 1"], tty: false } };
    await new Promise(() => {});
  }
  let out = "";
  let held: boolean | undefined;
  for await (const r of plugin.driver.execTaskStreaming(requests())) {
    if (!r.stdout?.data.length || held !== undefined) continue;
    out += Buffer.from(r.stdout.data).toString();
    if (out.endsWith("\n")) held = openFiles(plugin.pid!, /./).includes(out.trim());
  }
  return { target: out.trim(), heldByDriver: held === true };
}

/**
 * For the enclosing describe: the fixture driver with task "t" started, TMPDIR a fresh directory
 * (`env` may name more variables, given that directory).
 */
function fixturePlugin(env: (dir: string) => Record<string, string> = () => ({})): { dir: string; plugin: PluginClient } {
  const it = {} as { dir: string; plugin: PluginClient };
  beforeAll(async () => {
    if (!existsSync(executorBinPath())) throw new Error(`build first: ${executorBinPath()} is missing (npx turbo run build)`);
    it.dir = mkdtempSync(join(tmpdir(), "nk-handoff-"));
    it.plugin = await launchPlugin(process.execPath, [fixture], { env: { TMPDIR: it.dir, NOMADKIT_LOG_LEVEL: "warn", ...env(it.dir) } });
    await it.plugin.driver.startTask({ task: { id: "t", name: "t", allocId: "a1" } });
  });
  afterAll(async () => {
    await it.plugin?.driver.destroyTask({ taskId: "t", force: true }).catch(() => undefined);
    await it.plugin?.kill();
    if (it.dir) rmSync(it.dir, { recursive: true, force: true });
  });
  return it;
}

describe("exec output handoff, through a driver and its executor", () => {
  const fx = fixturePlugin();

  it("gives the command a FIFO of the driver's as its stdout", async () => {
    const out = await stdoutOf(fx.plugin);
    expect(out.target).toMatch(new RegExp(`^${fx.dir}/nomadkit-pipes-[^/]+/\\d+/stdout$`));
    expect(out.heldByDriver).toBe(true);
  });

  it("keeps stdout and stderr apart, passes stdin, and reports the exit after every close marker", async () => {
    const r = await exec(fx.plugin, ["/bin/sh", "-c", "cat; echo err >&2; exit 3"], "from stdin\n");
    expect(r.stdout).toBe("from stdin\n");
    expect(r.stderr).toBe("err\n");
    expect([...r.events].sort()).toEqual(["exited", "stderr-close", "stdout-close"]);
    expect(r.events.at(-1)).toBe("exited");
    expect(r.exitCode).toBe(3);
  });

  it("waits for output written after the command exited (a background process still holding stdout)", async () => {
    const r = await exec(fx.plugin, ["/bin/sh", "-c", "echo first; (sleep 0.5; echo late) & exit 0"]);
    expect(r.stdout).toBe("first\nlate\n");
    expect(r.events.at(-1)).toBe("exited");
  });

  it("reuses a session's FIFOs for the next one once it is over", async () => {
    const first = await stdoutOf(fx.plugin);
    const second = await stdoutOf(fx.plugin);
    expect(second.target).toBe(first.target);
  });

  it("a call cancelled while a leftover process holds the output ends, and lets go of the FIFOs", async () => {
    // Idle pairs are held open too (their keepers); a session adds its own ends.
    const fifos = () => openFiles(fx.plugin.pid, /\/nomadkit-pipes-/).length;
    const before = fifos();
    const ac = new AbortController();
    async function* requests() {
      const command = `sleep 30 & echo $! > ${join(fx.dir, "leftover.pid")}; readlink /proc/self/fd/1; exit 0`;
      yield { setup: { taskId: "t", command: ["/bin/sh", "-c", command], tty: false } };
      await new Promise(() => {});
    }
    let during = 0;
    let cancelled = "";
    const err = await (async () => {
      for await (const r of fx.plugin.driver.execTaskStreaming(requests(), { signal: ac.signal })) {
        cancelled += Buffer.from(r.stdout?.data ?? []).toString();
        if (!cancelled.endsWith("\n")) continue;
        during = fifos();
        ac.abort();
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Canceled);
    expect(during).toBeGreaterThan(before);
    // The leftover sleep still holds its end; the plugin's ends must be closed all the same.
    for (let i = 0; i < 100 && fifos() > before; i++) await sleep(50);
    expect(fifos()).toBeLessThanOrEqual(before);
    process.kill(Number(readFileSync(join(fx.dir, "leftover.pid"), "utf8")), "SIGKILL");
    // Not reused: the next session gets other FIFOs (the leftover may have held these on).
    const next = await stdoutOf(fx.plugin);
    expect(next.heldByDriver).toBe(true);
    expect(next.target).not.toBe(cancelled.trim());
  });

  it("reports a command killed by a signal as Nomad does (128+N)", async () => {
    const r = await exec(fx.plugin, ["/bin/sh", "-c", "kill -9 $$"]);
    expect(r.exitCode).toBe(137);
    expect(r.signal).toBe(9);
  });

  it("carries bulk output byte-exact", async () => {
    const r = await exec(fx.plugin, ["/bin/sh", "-c", "seq 1 300000"]);
    const expected = Array.from({ length: 300000 }, (_, i) => `${i + 1}\n`).join("");
    expect(r.stdout.length).toBe(expected.length);
    expect(r.stdout === expected).toBe(true);
  });
});

describe("exec output handoff, when the driver cannot make FIFOs", () => {
  // No mkfifo on the plugin's (and so its executor's) PATH; the task's own PATH is set by the fixture.
  const fx = fixturePlugin((dir) => ({ PATH: join(dir, "empty") }));

  it("has the executor send the output as messages, from Node's own pipes", async () => {
    expect((await stdoutOf(fx.plugin)).target).toMatch(/^socket:\[\d+\]$/);
    const r = await exec(fx.plugin, ["/bin/sh", "-c", "cat; echo err >&2; exit 4"], "again\n");
    expect(r).toMatchObject({ stdout: "again\n", stderr: "err\n", exitCode: 4 });
    expect(r.events.at(-1)).toBe("exited");
  });
});

describe("the executor's side of the handoff", () => {
  let dir: string;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "nk-handoff-x-"));
  });

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** A directory with the two names made by `make` (mkfifo by default). */
  function pair(name: string, make: (path: string) => void = (p) => expect(spawnSync("mkfifo", [p]).status).toBe(0)): string {
    const d = join(dir, name);
    mkdirSync(d);
    for (const n of ["stdout", "stderr"]) make(join(d, n));
    return d;
  }

  it("opens FIFOs that are being read", () => {
    const d = pair("read");
    const readers = ["stdout", "stderr"].map((n) => openSync(join(d, n), constants.O_RDONLY | constants.O_NONBLOCK));
    const outputs = openHandedOutputs(outputHandoffHeader(d));
    expect(outputs).toBeDefined();
    closeHandedOutputs(outputs!);
    readers.forEach((fd) => closeSync(fd));
  });

  it("declines FIFOs nobody reads, regular files, symlinks, relative or malformed names", () => {
    expect(openHandedOutputs(outputHandoffHeader(pair("unread")))).toBeUndefined();
    const files = pair("files", (p) => writeFileSync(p, ""));
    expect(openHandedOutputs(outputHandoffHeader(files))).toBeUndefined();
    const real = pair("real");
    const readers = ["stdout", "stderr"].map((n) => openSync(join(real, n), constants.O_RDONLY | constants.O_NONBLOCK));
    expect(openHandedOutputs(outputHandoffHeader(pair("links", (p) => symlinkSync(join(real, p.endsWith("stdout") ? "stdout" : "stderr"), p))))).toBeUndefined();
    readers.forEach((fd) => closeSync(fd));
    expect(openHandedOutputs("relative%2Fdir")).toBeUndefined();
    expect(openHandedOutputs("%E0%A4%A")).toBeUndefined();
  });

  it("a real executor given regular files sends the output as messages and leaves the files alone", async () => {
    const files = pair("e2e-files", (p) => writeFileSync(p, ""));
    const executor: ExecutorHandle = await launchExecutor();
    try {
      await executor.client.launch({ cmd: "/bin/sh", args: ["-c", "sleep 30"], env: ["PATH=/usr/bin:/bin"] });
      async function* requests() {
        yield { setup: { taskId: "t", command: ["/bin/sh", "-c", "echo out; echo err >&2"], tty: false } };
        yield { stdin: { close: true } };
      }
      let stdout = "";
      let stderr = "";
      let exited = false;
      for await (const r of executor.client.execStreaming(requests(), { headers: { [OUTPUT_HANDOFF_HEADER]: outputHandoffHeader(files) } })) {
        stdout += Buffer.from(r.stdout?.data ?? []).toString();
        stderr += Buffer.from(r.stderr?.data ?? []).toString();
        exited ||= r.exited;
      }
      expect({ stdout, stderr, exited }).toEqual({ stdout: "out\n", stderr: "err\n", exited: true });
      expect(readFileSync(join(files, "stdout"), "utf8")).toBe("");
      expect(readFileSync(join(files, "stderr"), "utf8")).toBe("");
    } finally {
      await executor.shutdownTask("SIGKILL", 0).catch(() => undefined);
      await executor.kill();
    }
  });
});
