import { execFileSync, spawn, spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, createReadStream, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { Code, ConnectError } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { PluginLaunchError, PluginShutdownError, RequestQueue } from "@nomadkit/client";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  CPUUsage_Fields,
  ExecTaskStreamingRequestSchema,
  type ExecTaskStreamingRequest,
} from "@nomadkit/protocol/driver";
import { execStreaming } from "../src/exec/index.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  decodeExecutorState,
  encodeExecutorState,
  executorBinPath,
  isProcessAlive,
  launchExecutor,
  reattachExecutor,
  forwardExecStream,
  type ExecutorHandle,
} from "../src/executor.js";
import { LinuxNetnsManager } from "../src/network.js";
import { hostCompute, processTree, totalTicks } from "../src/stats.js";
import { createTestUser, parseGroups, type TestUser } from "./test-user.js";
import { collectExec, endExecutors } from "./executor-helpers.js";

const isRoot = process.getuid?.() === 0;
const PATH = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
let dir: string;
const handles: ExecutorHandle[] = [];
const stray: number[] = [];

beforeAll(() => {
  if (!existsSync(executorBinPath())) throw new Error(`build first: ${executorBinPath()} is missing (npx turbo run build)`);
  dir = mkdtempSync(join(tmpdir(), "nk-executor-"));
});
afterEach(() => endExecutors(handles, stray));
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function executor(config = {}): Promise<ExecutorHandle> {
  const h = await launchExecutor({ config });
  handles.push(h);
  return h;
}

let n = 0;
const file = (name: string) => join(dir, `${++n}-${name}`);

/** Polls a file until `done(content)` holds: a condition, not a timed sleep. */
async function fileUntil(path: string, done: (s: string) => boolean): Promise<string> {
  for (;;) {
    const s = existsSync(path) ? readFileSync(path, "utf8") : "";
    if (done(s)) return s;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** An exec request, as Nomad sends them. */
const req = (init: MessageInitShape<typeof ExecTaskStreamingRequestSchema>) => create(ExecTaskStreamingRequestSchema, init);

/** Collects an exec stream's responses: output per stream, close markers, exited messages. */
async function expectCode(p: Promise<unknown>, code: Code, field: string) {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  expect((err as ConnectError).code).toBe(code);
  expect((err as ConnectError).rawMessage).toContain(field);
}

describe("executor: launch and wait", () => {
  it("reports the exit code, version, env and working directory", async () => {
    const exe = await executor();
    expect((await exe.client.version({})).version).toBe("2.0.0"); // Nomad's ExecutorVersionLatest
    const out = file("out");
    const { process: started } = await exe.client.launch({
      cmd: "sh",
      args: ["-c", 'echo "$FOO"; pwd; exit 7'],
      env: ["FOO=bar=baz", PATH],
      taskDir: dir,
      stdoutPath: out,
    });
    expect(started!.pid).toBeGreaterThan(0);
    const { process: done } = await exe.client.wait({});
    expect(done).toMatchObject({ pid: started!.pid, exitCode: 7, signal: 0, oomKilled: false });
    expect(done!.time).toBeDefined();
    expect(readFileSync(out, "utf8")).toBe(`bar=baz\n${dir}\n`);
    // Wait again: same answer. A second Launch is refused.
    expect((await exe.client.wait({})).process!.exitCode).toBe(7);
    await expectCode(exe.client.launch({ cmd: "true" }), Code.FailedPrecondition, "launch");
    // UpdateResources is accepted (no resource controller).
    await exe.client.updateResources({ resources: {} });
  });

  it("keeps go-plugin's variables out of the executor and out of a task that inherits its environment", async () => {
    // The driver's own go-plugin variables, as a host would have set them.
    const own = { NOMAD_PLUGIN_MAGIC_COOKIE: "driver-cookie", PLUGIN_CLIENT_CERT: "driver-cert", PLUGIN_MIN_PORT: "10000" };
    Object.assign(process.env, own);
    let exe: ExecutorHandle;
    try {
      exe = await launchExecutor({ env: { NK_FROM_DRIVER: "kept", PLUGIN_MAX_PORT: "20000" } });
    } finally {
      for (const k of Object.keys(own)) delete process.env[k];
    }
    handles.push(exe);
    const environ = Object.fromEntries(
      readFileSync(`/proc/${exe.pid}/environ`, "utf8")
        .split("\0")
        .filter(Boolean)
        .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
    );
    // The executor gets its own handshake, none of the driver's (nor PLUGIN_* passed in options.env).
    expect(environ.NOMAD_PLUGIN_MAGIC_COOKIE).not.toBe("driver-cookie");
    expect(environ).toMatchObject({ NK_FROM_DRIVER: "kept", PLUGIN_PROTOCOL_VERSIONS: "2", PLUGIN_MIN_PORT: "0", PLUGIN_MAX_PORT: "0" });
    expect(environ.PLUGIN_CLIENT_CERT).toBeUndefined();
    // A task launched without env inherits the executor's environment minus its go-plugin variables.
    const out = file("env");
    await exe.client.launch({ cmd: "/usr/bin/env", env: [], stdoutPath: out });
    expect((await exe.client.wait({})).process!.exitCode).toBe(0);
    const names = readFileSync(out, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => l.slice(0, l.indexOf("=")));
    expect(names).toContain("NK_FROM_DRIVER");
    expect(names.filter((k) => k === "NOMAD_PLUGIN_MAGIC_COOKIE" || k.startsWith("PLUGIN_"))).toEqual([]);
  });

  it("puts the executor's socket under a PLUGIN_UNIX_SOCKET_DIR given in options.env, not under the driver's own", async () => {
    const chosen = mkdtempSync(join(dir, "sockets-"));
    const drivers = mkdtempSync(join(dir, "drivers-"));
    process.env.PLUGIN_UNIX_SOCKET_DIR = drivers; // as Nomad may set it for the driver
    let inherited: ExecutorHandle;
    let honoured: ExecutorHandle;
    try {
      inherited = await launchExecutor();
      handles.push(inherited);
      honoured = await launchExecutor({ env: { PLUGIN_UNIX_SOCKET_DIR: chosen } });
      handles.push(honoured);
    } finally {
      delete process.env.PLUGIN_UNIX_SOCKET_DIR;
    }
    expect(inherited.reattach.address.startsWith(`${drivers}/`)).toBe(false);
    // Before: dropped with the go-plugin variables, the socket went to the temp dir.
    expect(honoured.reattach.address).toMatch(new RegExp(`^${chosen}/plugin-[^/]+/plugin\\.sock$`));
    expect(statSync(honoured.reattach.address).isSocket()).toBe(true);
    // Its task does not inherit it.
    const out = file("env-socket-dir");
    await honoured.client.launch({ cmd: "/usr/bin/env", env: [], stdoutPath: out });
    expect((await honoured.client.wait({})).process!.exitCode).toBe(0);
    expect(readFileSync(out, "utf8")).not.toContain("PLUGIN_UNIX_SOCKET_DIR");
    // A directory that does not exist is named in the error.
    const missing = join(dir, "no-such-socket-dir");
    const err = await launchExecutor({ env: { PLUGIN_UNIX_SOCKET_DIR: missing } }).catch((e: unknown) => e);
    if (!(err instanceof Error)) handles.push(err as ExecutorHandle);
    expect(err).toBeInstanceOf(PluginLaunchError);
    expect((err as PluginLaunchError).stderr).toContain(`PLUGIN_UNIX_SOCKET_DIR=${missing}`);
  });

  it("caps the executor's malloc arenas for the executor only, and keeps an operator's own cap for its tasks too", async () => {
    const environOf = (pid: number) =>
      Object.fromEntries(
        readFileSync(`/proc/${pid}/environ`, "utf8")
          .split("\0")
          .filter(Boolean)
          .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
      );
    const taskEnv = async (exe: ExecutorHandle, name: string) => {
      const out = file(name);
      await exe.client.launch({ cmd: "/usr/bin/env", env: [], stdoutPath: out });
      expect((await exe.client.wait({})).process!.exitCode).toBe(0);
      return readFileSync(out, "utf8").split("\n").filter((l) => l.startsWith("MALLOC_ARENA_MAX=") || l.startsWith("NOMADKIT_EXECUTOR_MALLOC"));
    };
    expect(process.env.MALLOC_ARENA_MAX).toBeUndefined();
    // Set by launchExecutor: glibc reads it as the executor starts; a task inheriting the
    // executor's environment does not get it.
    const capped = await launchExecutor();
    handles.push(capped);
    expect(environOf(capped.pid).MALLOC_ARENA_MAX).toBe("2");
    expect(await taskEnv(capped, "env-capped")).toEqual([]);
    // The operator's (or the driver's) own setting wins and reaches the task as before.
    const own = await launchExecutor({ env: { MALLOC_ARENA_MAX: "4" } });
    handles.push(own);
    expect(environOf(own.pid).MALLOC_ARENA_MAX).toBe("4");
    expect(await taskEnv(own, "env-own")).toEqual(["MALLOC_ARENA_MAX=4"]);
  });

  it("rejects bad launch requests with errors naming the field", async () => {
    const exe = await executor();
    await expectCode(exe.client.launch({ cmd: "definitely-not-a-command-xyz", env: [PATH] }), Code.InvalidArgument, "cmd");
    await expectCode(exe.client.launch({ cmd: "true", env: [PATH, "NOEQUALS"] }), Code.InvalidArgument, "env[1]");
    await expectCode(exe.client.launch({ cmd: "true", env: [PATH], user: "no-such-user-xyz" }), Code.InvalidArgument, "user");
    await expectCode(exe.client.launch({ cmd: "true", env: [PATH], workDir: join(dir, "missing") }), Code.InvalidArgument, "work_dir");
    await expectCode(exe.client.launch({ cmd: "true", env: [PATH], stdoutPath: join(dir, "no/such/dir/out") }), Code.InvalidArgument, "stdout_path");
    await expectCode(exe.client.wait({}), Code.FailedPrecondition, "wait");
    await expectCode(exe.client.signal({ signal: 15 }), Code.FailedPrecondition, "signal");
    // After all those failures the executor still launches a task.
    await exe.client.launch({ cmd: "true", env: [PATH] });
    expect((await exe.client.wait({})).process!.exitCode).toBe(0);
  });

  it("finds the command as Nomad's lookupBin does: <task>/local, then <task>, then PATH, and makes it executable", async () => {
    const taskDir = file("task");
    mkdirSync(join(taskDir, "local"), { recursive: true });
    const bin = file("bin");
    mkdirSync(bin);
    const env = [`PATH=${bin}:/usr/bin:/bin`];
    // An artifact unpacked without exec bits, and a same-named program in PATH it must win over.
    writeFileSync(join(taskDir, "local", "nk-app"), '#!/bin/sh\necho "local $*"\n', { mode: 0o644 });
    writeFileSync(join(bin, "nk-app"), "#!/bin/sh\necho path\n", { mode: 0o755 });
    writeFileSync(join(taskDir, "nk-top"), "#!/bin/sh\necho top\n", { mode: 0o600 });
    const run = async (cmd: string, args: string[] = []) => {
      const exe = await executor();
      const out = file("out");
      await exe.client.launch({ cmd, args, env, taskDir, stdoutPath: out });
      expect((await exe.client.wait({})).process!.exitCode, cmd).toBe(0);
      return readFileSync(out, "utf8");
    };
    expect(await run("nk-app", ["a"])).toBe("local a\n");
    expect(statSync(join(taskDir, "local", "nk-app")).mode & 0o777).toBe(0o755); // makeExecutable: 0644 | 0555
    // A relative path with a slash is taken from the task directory (lookupBin's second place).
    expect(await run("local/nk-app", ["b"])).toBe("local b\n");
    expect(await run("nk-top")).toBe("top\n");
    expect(statSync(join(taskDir, "nk-top")).mode & 0o777).toBe(0o755);
    // Absolute paths and PATH still work; PATH is the task's.
    expect(await run(join(bin, "nk-app"))).toBe("path\n");
    expect(await run("sh", ["-c", "echo ok"])).toBe("ok\n");
  });

  it("reports a command found nowhere, and one in PATH it may not execute, naming cmd", async () => {
    const taskDir = file("task");
    mkdirSync(join(taskDir, "local"), { recursive: true });
    const bin = file("bin");
    mkdirSync(bin);
    writeFileSync(join(bin, "nk-noexec"), "#!/bin/sh\nexit 0\n", { mode: 0o644 });
    const env = [`PATH=${bin}:/usr/bin:/bin`];
    const exe = await executor();
    const missing = await exe.client.launch({ cmd: "nk-missing", env, taskDir }).catch((e: unknown) => e as ConnectError);
    expect(missing).toBeInstanceOf(ConnectError);
    expect((missing as ConnectError).code).toBe(Code.InvalidArgument);
    expect((missing as ConnectError).rawMessage).toBe(
      `cmd: executable "nk-missing" not found (looked for ${[join(taskDir, "local", "nk-missing"), join(taskDir, "nk-missing")]
        .map((p) => JSON.stringify(p))
        .join(", ")}, the task's PATH)`,
    );
    // Host programs are only chmodded when found executable (Nomad's LookPath skips the others).
    const noexec = await exe.client.launch({ cmd: "nk-noexec", env, taskDir }).catch((e: unknown) => e as ConnectError);
    expect((noexec as ConnectError).rawMessage).toBe(`cmd: ${JSON.stringify(join(bin, "nk-noexec"))} is not executable`);
    expect(statSync(join(bin, "nk-noexec")).mode & 0o777).toBe(0o644);
  });

  it("writes stdout and stderr to files and to a FIFO", async () => {
    const exe = await executor();
    const fifo = file("fifo");
    execFileSync("mkfifo", [fifo]);
    const errFile = file("err");
    // Nomad's log collector opens the FIFO's read side; the executor's open waits for it.
    const reader = createReadStream(fifo);
    const chunks: Buffer[] = [];
    reader.on("data", (b) => chunks.push(b as Buffer));
    const ended = new Promise<void>((r) => reader.on("end", () => r()));
    await exe.client.launch({
      cmd: "sh",
      args: ["-c", "echo to-stdout; echo to-stderr >&2"],
      env: [PATH],
      stdoutPath: fifo,
      stderrPath: errFile,
    });
    await exe.client.wait({});
    await ended; // EOF: the executor closed its copy of the FIFO
    expect(Buffer.concat(chunks).toString()).toBe("to-stdout\n");
    expect(readFileSync(errFile, "utf8")).toBe("to-stderr\n");
  });

  it.runIf(isRoot)("runs the task as another user", async () => {
    const exe = await executor();
    const out = file("user");
    await exe.client.launch({ cmd: "sh", args: ["-c", "id -u; id -g"], env: [PATH], user: "nobody", stdoutPath: out });
    expect((await exe.client.wait({})).process!.exitCode).toBe(0);
    const nobody = execFileSync("id", ["-u", "nobody"], { encoding: "utf8" }).trim();
    expect(readFileSync(out, "utf8").split("\n")[0]).toBe(nobody);
  });

  it.runIf(isRoot)("sets USER, LOGNAME and HOME to the task user's over the task's env, for the task and Exec (as Nomad's setCmdUser)", async () => {
    const exe = await executor();
    const out = file("user-env");
    // Nomad's task env carries the agent's own (raw_exec): root's, which must not reach nobody's task.
    const env = [PATH, "USER=root", "LOGNAME=root", "HOME=/root"];
    await exe.client.launch({ cmd: "sh", args: ["-c", 'echo "$USER $LOGNAME $HOME"; sleep 1000'], env, user: "nobody", stdoutPath: out });
    const home = execFileSync("getent", ["passwd", "nobody"], { encoding: "utf8" }).trim().split(":")[5];
    expect(await fileUntil(out, (s) => s.endsWith("\n"))).toBe(`nobody nobody ${home}\n`);
    const res = await exe.client.exec({ cmd: "sh", args: ["-c", 'echo "$USER $LOGNAME $HOME"'] });
    expect(new TextDecoder().decode(res.output)).toBe(`nobody nobody ${home}\n`);
  });
});

describe("executor: the host's state, not a bad request", () => {
  it("Exec after the task's directory was removed says so (FailedPrecondition naming cwd)", async () => {
    const exe = await executor();
    const taskDir = mkdtempSync(join(tmpdir(), "nk-gone-"));
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH], taskDir });
    rmSync(taskDir, { recursive: true, force: true });
    const err = await exe.client.exec({ cmd: "true" }).catch((e: unknown) => ConnectError.from(e));
    expect((err as ConnectError).code).toBe(Code.FailedPrecondition);
    expect((err as ConnectError).rawMessage).toBe(`cwd: ${JSON.stringify(taskDir)} does not exist`);
  });

  it.runIf(isRoot)("an output path on a full filesystem is ResourceExhausted, not InvalidArgument", async () => {
    const full = mkdtempSync(join(tmpdir(), "nk-full-"));
    // No inode left for a new file: its creation fails with ENOSPC.
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=64k,nr_inodes=1", "nk-full", full]);
    try {
      const exe = await executor();
      const err = await exe.client.launch({ cmd: "true", env: [PATH], stdoutPath: join(full, "stdout.0") }).catch((e: unknown) => ConnectError.from(e));
      expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
      expect((err as ConnectError).rawMessage).toMatch(/^stdout_path: cannot open ".*": ENOSPC/);
    } finally {
      execFileSync("umount", [full]);
      rmSync(full, { recursive: true, force: true });
    }
  });
});

describe.runIf(isRoot)("executor: the loader's variables", () => {
  // setpriv and nsenter run as root before the switch to the task's user: glibc's loader honours
  // LD_PRELOAD & co. in them, so a job's env would run code as root. LD_DEBUG_OUTPUT makes every
  // program the loader starts write a file as whoever it runs as: all must be the task user's.
  async function rootPrograms(networkIsolation?: { path: string }) {
    const dbg = mkdtempSync(join(tmpdir(), "nk-ld-"));
    chmodSync(dbg, 0o777);
    try {
      const exe = await executor();
      const out = file("ld");
      const env = [PATH, "LD_DEBUG=files", `LD_DEBUG_OUTPUT=${dbg}/ld`];
      await exe.client.launch({ cmd: "sh", args: ["-c", 'echo "$LD_DEBUG"; sleep 1000'], env, user: "nobody", stdoutPath: out, networkIsolation });
      expect((await fileUntil(out, (t) => t.includes("\n"))).trim()).toBe("files"); // still the task's
      const r = await exe.client.exec({ cmd: "sh", args: ["-c", 'echo "$LD_DEBUG_OUTPUT"'] });
      expect(Buffer.from(r.output).toString().trim()).toBe(`${dbg}/ld`);
      for (const tty of [false, true]) {
        const q = new RequestQueue<ExecTaskStreamingRequest>();
        q.push(req({ setup: { taskId: "t", command: ["/bin/sh", "-c", 'echo "$LD_DEBUG"'], tty } }));
        const e = await collectExec(exe.client.execStreaming(q));
        q.end();
        expect(e.stdout.trim()).toBe("files");
      }
      const nobody = Number(execFileSync("id", ["-u", "nobody"], { encoding: "utf8" }).trim());
      const written = readdirSync(dbg).map((f) => ({ uid: statSync(join(dbg, f)).uid, text: readFileSync(join(dbg, f), "utf8") }));
      expect(written.length).toBeGreaterThan(0);
      return written.filter((w) => w.uid !== nobody).map((w) => /needed by (\S+)/.exec(w.text)?.[1] ?? w.text.slice(0, 200));
    } finally {
      rmSync(dbg, { recursive: true, force: true });
    }
  }

  it("reach the task, Exec and ExecStreaming only after the switch to the task's user (setpriv)", async () => {
    expect(await rootPrograms()).toEqual([]);
  });

  it("a command whose path contains \"=\" is refused with them set (env would take it for a variable), run without", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-eq="));
    chmodSync(dir, 0o755);
    try {
      const cmd = join(dir, "true");
      writeFileSync(cmd, "#!/bin/sh\nexit 0\n", { mode: 0o755 });
      const exe = await executor();
      await expectCode(exe.client.launch({ cmd, env: [PATH, "LD_LIBRARY_PATH=/nowhere"], user: "nobody" }), Code.InvalidArgument, "cmd");
      const exe2 = await executor();
      await exe2.client.launch({ cmd, env: [PATH], user: "nobody" });
      expect((await exe2.client.wait({})).process!.exitCode).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("and inside a network namespace (nsenter, then setpriv)", async () => {
    const nets = new LinuxNetnsManager();
    const allocId = `nk-ld-${process.pid}`;
    const { spec } = await nets.create(allocId, "");
    try {
      expect(await rootPrograms({ path: spec.path })).toEqual([]);
    } finally {
      await nets.destroy(allocId, spec);
    }
  });
});

describe("executor: signals and shutdown", () => {
  it("Signal delivers the signal; death by signal N is exit code 128+N", async () => {
    const exe = await executor();
    const { process: p } = await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    await exe.client.signal({ signal: 15 });
    const { process: done } = await exe.client.wait({});
    expect(done).toMatchObject({ pid: p!.pid, exitCode: 143, signal: 15 });
    await expectCode(exe.client.signal({ signal: 15 }), Code.FailedPrecondition, "signal");
  });

  it("rejects unknown signals naming the field", async () => {
    const exe = await executor();
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    await expectCode(exe.client.signal({ signal: 999 }), Code.InvalidArgument, "signal");
    await expectCode(exe.client.shutdown({ signal: "SIGNOPE", gracePeriod: 1_000_000_000n }), Code.InvalidArgument, "signal");
  });

  it("Signal takes any number the kernel does (0, real-time signals), as Nomad's syscall.Signal(n)", async () => {
    const exe = await executor();
    // The task reports SIGRTMIN+2 (36) when it arrives.
    const out = join(dir, "rt.out");
    await exe.client.launch({ cmd: "perl", args: ["-e", `$SIG{RTMIN} = sub {}; $SIG{"NUM36"} = sub { open my $f, ">", "${out}"; print $f "36\n"; close $f; exit 0 }; sleep 1 while 1`], env: [PATH] });
    await exe.client.signal({ signal: 0 }); // a check: delivers nothing
    await new Promise((r) => setTimeout(r, 300)); // perl has set its handlers
    await exe.client.signal({ signal: 36 });
    expect((await exe.client.wait({})).process!.exitCode).toBe(0);
    expect(readFileSync(out, "utf8")).toBe("36\n");
  });

  it("Shutdown with no grace period kills the task whatever the signal says (it is never sent)", async () => {
    const exe = await executor();
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    const wait = exe.client.wait({});
    await exe.client.shutdown({ signal: "SIGNOPE", gracePeriod: 0n }); // before: InvalidArgument, the task ran on
    expect((await wait).process).toMatchObject({ exitCode: 137, signal: 9 });
  });

  it("Shutdown sends the signal and returns when the task obeys it", async () => {
    const exe = await executor();
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    const wait = exe.client.wait({});
    // A long grace: the task exits on SIGTERM well before it.
    await exe.shutdownTask("SIGTERM", 600_000);
    expect((await wait).process).toMatchObject({ exitCode: 143, signal: 15 });
  });

  it("Shutdown kills a task that ignores the signal once the grace period is over", async () => {
    const exe = await executor();
    const out = file("trap");
    await exe.client.launch({
      cmd: "sh",
      args: ["-c", 'trap "" TERM; echo ready; while :; do sleep 1; done'],
      env: [PATH],
      stdoutPath: out,
    });
    await fileUntil(out, (s) => s.includes("ready"));
    const wait = exe.client.wait({});
    await exe.shutdownTask("SIGTERM", 300);
    expect((await wait).process).toMatchObject({ exitCode: 137, signal: 9 });
    // And the executor exits after Shutdown.
    await new Promise<void>((r) => (exe.exited.aborted ? r() : exe.exited.addEventListener("abort", () => r())));
    expect(isProcessAlive(exe.pid)).toBe(false);
  });

  it("with exitAfterShutdown false the executor keeps serving after Shutdown", async () => {
    const exe = await executor({ exitAfterShutdown: false });
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    await exe.client.shutdown({ signal: "SIGTERM", gracePeriod: 600_000_000_000n });
    expect((await exe.client.wait({})).process).toMatchObject({ exitCode: 143, signal: 15 });
    expect(isProcessAlive(exe.pid)).toBe(true);
    await exe.kill();
    expect(isProcessAlive(exe.pid)).toBe(false);
  });

  it.runIf(isRoot)("Shutdown after the task exited leaves alone a process that got its pid since", () => {
    // In a pid namespace of its own the fixture can hand the exited task's pid to another process.
    const fixture = fileURLToPath(new URL("./fixtures/executor/pid-reuse.mjs", import.meta.url));
    const r = spawnSync("unshare", ["-pf", "--mount-proc", process.execPath, fixture], { encoding: "utf8", timeout: 30_000 });
    expect(r.stdout.trim(), r.stderr).toBe("unrelated: alive");
  });

  it("Shutdown also kills what the task left running in its process group", async () => {
    const exe = await executor();
    const out = file("group");
    const { process: p } = await exe.client.launch({
      cmd: "sh",
      args: ["-c", "sleep 1000 & echo $!; wait"],
      env: [PATH],
      stdoutPath: out,
    });
    const child = Number((await fileUntil(out, (s) => s.endsWith("\n"))).trim());
    expect((await processTree(p!.pid)).map((x) => x.pid)).toContain(child);
    await exe.shutdownTask("SIGTERM", 600_000);
    // SIGKILL was sent before Shutdown answered; its delivery is asynchronous: wait for the death.
    while (isProcessAlive(child)) await new Promise((r) => setTimeout(r, 20));
    expect(isProcessAlive(child)).toBe(false);
  });
});

describe("executor: exec and stats", () => {
  it("Exec runs in the task's context and returns combined output and exit code", async () => {
    const exe = await executor();
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: ["FOO=from-task", PATH], taskDir: dir });
    const r = await exe.client.exec({ cmd: "sh", args: ["-c", 'echo "$FOO"; pwd; echo err >&2; exit 4'] });
    expect(r.exitCode).toBe(4);
    const text = Buffer.from(r.output).toString();
    expect(text).toContain(`from-task\n${dir}\n`);
    expect(text).toContain("err\n");
    // Past its deadline the command is killed: -1, as Nomad's ExecScript (WaitStatus.ExitStatus()).
    const late = await exe.client.exec({ cmd: "sleep", args: ["1000"], deadline: timestampFromDate(new Date(Date.now() + 200)) });
    expect(late.exitCode).toBe(-1);
    // A deadline already past runs nothing (Go's exec.CommandContext refuses to start).
    const marker = join(dir, "not-run");
    await expectCode(exe.client.exec({ cmd: "touch", args: [marker], deadline: timestampFromDate(new Date(Date.now() - 60_000)) }), Code.DeadlineExceeded, "deadline");
    expect(existsSync(marker)).toBe(false);
    // Deadlines beyond a Date's range, which Go takes: far ahead is no deadline, far back has passed.
    const far = await exe.client.exec({ cmd: "echo", args: ["done"], deadline: { seconds: 1_000_000_000_000_000n } });
    expect([far.exitCode, Buffer.from(far.output).toString()]).toEqual([0, "done\n"]);
    await expectCode(exe.client.exec({ cmd: "sleep", args: ["1000"], deadline: { seconds: -1_000_000_000_000_000n } }), Code.DeadlineExceeded, "deadline");
    // So is any death by signal; an exit status stays as it is.
    expect((await exe.client.exec({ cmd: "sh", args: ["-c", "kill -TERM $$"] })).exitCode).toBe(-1);
    expect((await exe.client.exec({ cmd: "sh", args: ["-c", "exit 143"] })).exitCode).toBe(143);
    await expectCode(exe.client.exec({ cmd: "no-such-cmd-xyz", args: [] }), Code.InvalidArgument, "cmd");
  });

  it("Exec keeps the last 4 KiB of output, as Nomad's executor keeps for a script check", async () => {
    const exe = await executor();
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    const r = await exe.client.exec({ cmd: "sh", args: ["-c", "head -c 20000 /dev/zero | tr '\\0' x; echo 'CRITICAL: db unreachable'; exit 2"] });
    expect(r.exitCode).toBe(2);
    const text = Buffer.from(r.output).toString();
    expect(text).toHaveLength(4096);
    expect(text.endsWith("xxxCRITICAL: db unreachable\n")).toBe(true);
  });

  it("Exec ends at its deadline even when a process that left the group holds the output", async () => {
    const exe = await executor();
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    const pidFile = join(dir, "setsid.pid");
    const r = await exe.client.exec({
      cmd: "sh",
      args: ["-c", `setsid sh -c 'echo $$ > ${pidFile}; exec sleep 1000' & echo started; wait`],
      deadline: timestampFromDate(new Date(Date.now() + 500)),
    });
    expect(r.exitCode).toBe(-1);
    expect(Buffer.from(r.output).toString()).toContain("started");
    // The escaped process is the task's to clean up, not Exec's: end it here.
    const escaped = Number(readFileSync(pidFile, "utf8"));
    stray.push(escaped);
    process.kill(escaped, "SIGKILL");
  });

  it("Stats streams samples of the task's process tree with total_ticks from the compute the driver passed", async () => {
    // The agent's topology, not this host's: Nomad's executors get the driver's Compute.
    const totalComputeMhz = 12_345;
    const numCores = hostCompute().numCores + 1;
    const exe = await executor({ totalComputeMhz, numCores });
    const { process: p } = await exe.client.launch({
      cmd: "sh",
      args: ["-c", "sh -c 'while :; do :; done' & sh -c 'while :; do :; done' & wait"],
      env: [PATH],
    });
    for (;;) {
      const t = await processTree(p!.pid);
      if (t.length >= 3 && t.some((x) => x.utime + x.stime > 0)) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const ac = new AbortController();
    const samples = [];
    for await (const r of exe.client.stats({ interval: 50_000_000n }, { signal: ac.signal })) {
      samples.push(r.stats!);
      // The first has no previous reading (0 %, as Nomad's); the busy loops show in a later one.
      if (samples.length >= 2 && r.stats!.aggResourceUsage!.cpu!.percent > 0) break;
    }
    ac.abort();
    const host = { numCores, totalComputeMhz };
    for (const s of samples) {
      expect(s.timestamp).toBeDefined();
      expect(s.aggResourceUsage?.cpu).toBeDefined();
      expect(s.aggResourceUsage?.memory).toBeDefined();
      expect(s.aggResourceUsage!.cpu!.totalTicks).toBeCloseTo(totalTicks(s.aggResourceUsage!.cpu!.percent, host), 9);
    }
    expect(samples[0]!.aggResourceUsage!.cpu!.percent).toBe(0);
    const first = samples.at(-1)!;
    expect(first.aggResourceUsage!.cpu!.percent).toBeGreaterThan(0);
    expect(first.aggResourceUsage!.cpu!.totalTicks).toBeGreaterThan(0);
    expect(first.aggResourceUsage!.cpu!.measuredFields).not.toContain(CPUUsage_Fields.TOTAL_TICKS);
    expect(first.aggResourceUsage!.memory!.rss).toBeGreaterThan(0n);
    expect(Object.keys(first.resourceUsageByPid).length).toBeGreaterThanOrEqual(3);
  });
});

describe("executor: exec streaming", () => {
  it("runs Nomad's non-tty vector in the task's context", async () => {
    const exe = await executor();
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: ["GREETING=hello", PATH] });
    const q = new RequestQueue<ExecTaskStreamingRequest>();
    q.push(req({ setup: { taskId: "t", command: ["/bin/sh", "-c", 'echo "$GREETING" stdout; echo hello stderr >&2; exit 43'], tty: false } }));
    q.push(req({})); // heartbeat
    const r = await collectExec(exe.client.execStreaming(q));
    q.end();
    expect(r).toEqual({ stdout: "hello stdout\n", stderr: "hello stderr\n", stdoutClosed: 1, stderrClosed: 1, exited: 1, exitCode: 43 });
  });

  it("runs Nomad's tty vector: stty size follows the last resize", async () => {
    const exe = await executor();
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    const q = new RequestQueue<ExecTaskStreamingRequest>();
    q.push(req({ setup: { taskId: "t", command: ["/bin/sh"], tty: true } }));
    q.push(req({ ttySize: { height: 50, width: 40 } }));
    q.push(req({ ttySize: { height: 100, width: 100 } }));
    q.push(req({ stdin: { data: new TextEncoder().encode("stty size; exit 0\n") } }));
    const r = await collectExec(exe.client.execStreaming(q));
    q.end();
    expect(r.stdout).toContain("100 100\r\n");
    expect(r.exited).toBe(1);
    expect(r.exitCode).toBe(0);
  });

  it("forwardExecStream passes a driver's raw stream through to the executor untranslated", async () => {
    const exe = await executor();
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    const q = new RequestQueue<ExecTaskStreamingRequest>();
    q.push(req({ setup: { taskId: "t", command: ["/bin/sh", "-c", "cat; echo done >&2; exit 5"], tty: false } }));
    q.push(req({ stdin: { data: new TextEncoder().encode("from stdin\n") } }));
    q.push(req({}));
    q.push(req({ stdin: { close: true } }));
    // The engine's raw form, exactly as a driver's execTaskStreamingRaw gets it.
    const r = await collectExec(execStreaming(q, { raw: (stream) => forwardExecStream(stream, exe) }));
    q.end();
    expect(r).toEqual({ stdout: "from stdin\n", stderr: "done\n", stdoutClosed: 1, stderrClosed: 1, exited: 1, exitCode: 5 });
  });

  it("answers InvalidArgument naming the field for a missing command", async () => {
    const exe = await executor();
    await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    const q = new RequestQueue<ExecTaskStreamingRequest>();
    q.push(req({ setup: { taskId: "t", command: ["no-such-cmd-xyz"], tty: false } }));
    await expectCode(collectExec(exe.client.execStreaming(q)), Code.InvalidArgument, "command[0]");
    q.end();
  });
});

describe.runIf(isRoot)("executor: network isolation", () => {
  it("runs the task inside the allocation's network namespace, as another user", async () => {
    const nets = new LinuxNetnsManager();
    const allocId = `nk-exec-${process.pid}`;
    const { spec } = await nets.create(allocId, "");
    try {
      const exe = await executor();
      const out = file("netns");
      await exe.client.launch({
        cmd: "sh",
        args: ["-c", "id -u; cat /proc/net/dev"],
        env: [PATH],
        user: "nobody",
        stdoutPath: out,
        networkIsolation: spec,
      });
      expect((await exe.client.wait({})).process!.exitCode).toBe(0);
      const lines = readFileSync(out, "utf8").trim().split("\n");
      expect(lines[0]).toBe(execFileSync("id", ["-u", "nobody"], { encoding: "utf8" }).trim());
      const ifaces = lines.slice(3).map((l) => l.split(":")[0]!.trim());
      expect(ifaces).toEqual(["lo"]);
      // Exec runs in the namespace too.
      const r = await exe.client.exec({ cmd: "cat", args: ["/proc/net/dev"] });
      expect(Buffer.from(r.output).toString().split("\n").slice(2).filter(Boolean).map((l) => l.split(":")[0]!.trim())).toEqual(["lo"]);
    } finally {
      await nets.destroy(allocId, spec);
    }
  });

  it("refuses a namespace path that does not exist, naming the field", async () => {
    const exe = await executor();
    await expectCode(
      exe.client.launch({ cmd: "true", env: [PATH], networkIsolation: { path: "/var/run/netns/nk-missing-xyz" } }),
      Code.InvalidArgument,
      "network_isolation.path",
    );
  });
});

describe.runIf(isRoot)("executor: the task user's groups", () => {
  let user: TestUser;
  beforeAll(() => {
    user = createTestUser("x");
  });
  afterAll(() => user?.remove());

  it("runs the task, Exec and ExecStreaming with the user's supplementary groups, the task's pid being the command's", async () => {
    expect(user.groups).toEqual(expect.arrayContaining(user.supplementary));
    const exe = await executor();
    const out = file("groups");
    const { process: p } = await exe.client.launch({
      cmd: "sh",
      args: ["-c", "echo $$; id -u; id -G"],
      env: [PATH],
      user: user.name,
      stdoutPath: out,
    });
    expect((await exe.client.wait({})).process!.exitCode).toBe(0);
    const [pid, uid, groups] = readFileSync(out, "utf8").trim().split("\n");
    // setpriv execs the command: the pid the executor waits on is the task's own.
    expect(Number(pid)).toBe(p!.pid);
    expect(uid).toBe(execFileSync("id", ["-u", user.name], { encoding: "utf8" }).trim());
    expect(parseGroups(groups!)).toEqual(user.groups);

    const exe2 = await executor();
    await exe2.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH], user: user.name });
    expect(parseGroups(Buffer.from((await exe2.client.exec({ cmd: "id", args: ["-G"] })).output).toString())).toEqual(user.groups);
    for (const tty of [false, true]) {
      const q = new RequestQueue<ExecTaskStreamingRequest>();
      q.push(req({ setup: { taskId: "t", command: ["id", "-G"], tty } }));
      const r = await collectExec(exe2.client.execStreaming(q));
      q.end();
      expect(r.exitCode, `tty ${tty}`).toBe(0);
      expect(parseGroups(r.stdout), `tty ${tty}`).toEqual(user.groups);
    }
  });

  it("keeps the groups inside the allocation's network namespace", async () => {
    const nets = new LinuxNetnsManager();
    const allocId = `nk-groups-${process.pid}`;
    const { spec } = await nets.create(allocId, "");
    try {
      const exe = await executor();
      const out = file("netns-groups");
      await exe.client.launch({
        cmd: "sh",
        args: ["-c", "id -G; cat /proc/net/dev"],
        env: [PATH],
        user: user.name,
        stdoutPath: out,
        networkIsolation: spec,
      });
      expect((await exe.client.wait({})).process!.exitCode).toBe(0);
      const lines = readFileSync(out, "utf8").trim().split("\n");
      expect(parseGroups(lines[0]!)).toEqual(user.groups);
      expect(lines.slice(3).map((l) => l.split(":")[0]!.trim())).toEqual(["lo"]);
      expect(parseGroups(Buffer.from((await exe.client.exec({ cmd: "id", args: ["-G"] })).output).toString())).toEqual(user.groups);
    } finally {
      await nets.destroy(allocId, spec);
    }
  });

  it("refuses, naming cmd, a command the user may not execute", async () => {
    // Root's 0700 directory: the user cannot reach the script (spawn used to report EACCES).
    const locked = mkdtempSync(join(tmpdir(), "nk-locked-"));
    try {
      const script = join(locked, "run");
      writeFileSync(script, "#!/bin/sh\nexit 0\n", { mode: 0o755 });
      const exe = await executor();
      const err = await exe.client.launch({ cmd: script, env: [PATH], user: user.name }).catch((e: unknown) => e as ConnectError);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      expect((err as ConnectError).rawMessage).toContain(`cmd: ${JSON.stringify(script)} is not executable by user ${JSON.stringify(user.name)}`);
      // Reachable, but its interpreter is missing: said at launch, not left to setpriv's exit 127.
      chmodSync(locked, 0o755);
      writeFileSync(script, "#!/nonexistent/python9\nprint(1)\n", { mode: 0o755 });
      const exe2 = await executor();
      const noInterpreter = await exe2.client.launch({ cmd: script, env: [PATH], user: user.name }).catch((e: unknown) => e as ConnectError);
      expect((noInterpreter as ConnectError).code).toBe(Code.InvalidArgument);
      expect((noInterpreter as ConnectError).rawMessage).toContain("/nonexistent/python9");
    } finally {
      rmSync(locked, { recursive: true, force: true });
    }
  });

  it("refuses in the buffered Exec (script checks), naming cmd, a command the user may not execute", async () => {
    // A program in root's 0700 directory, found by name in the task's PATH as root finds it (Nomad's
    // LookPath too). Nomad's ExecScript then fails its exec as the user (permission denied); behind
    // setpriv, which still holds root's capabilities when it execs, the user used to run it.
    const locked = mkdtempSync(join(tmpdir(), "nk-locked-"));
    try {
      const id = join(locked, "myid");
      copyFileSync(execFileSync("sh", ["-c", "command -v id"], { encoding: "utf8" }).trim(), id);
      chmodSync(id, 0o700);
      const exe = await executor();
      await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [`PATH=${locked}:/usr/bin:/bin`], user: user.name });
      const uid = execFileSync("id", ["-u", user.name], { encoding: "utf8" }).trim();
      for (const cmd of ["myid", id]) {
        const got = await exe.client.exec({ cmd, args: ["-u"] }).then(
          (r) => ({ output: Buffer.from(r.output).toString(), exitCode: r.exitCode }),
          (e: unknown) => ({ code: Code[ConnectError.from(e).code], message: ConnectError.from(e).rawMessage }),
        );
        expect(got, cmd).toEqual({
          code: "InvalidArgument",
          message: `cmd: ${JSON.stringify(id)} is not executable by user ${JSON.stringify(user.name)} (uid ${uid})`,
        });
      }
    } finally {
      rmSync(locked, { recursive: true, force: true });
    }
  });

  it("refuses in ExecStreaming, naming setup.command[0], a command the user may not execute or whose interpreter is missing (tty or not)", async () => {
    // Root's 0700 directory, and one the user can reach (mkdtemp makes it 0700 too).
    const locked = mkdtempSync(join(tmpdir(), "nk-locked-"));
    const open = mkdtempSync(join(tmpdir(), "nk-open-"));
    try {
      chmodSync(open, 0o755);
      const unreachable = join(locked, "run");
      writeFileSync(unreachable, "#!/bin/sh\nexit 0\n", { mode: 0o755 });
      const noInterpreter = join(open, "run");
      writeFileSync(noInterpreter, "#!/nonexistent/python9\nprint(1)\n", { mode: 0o755 });
      const exe = await executor();
      await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH], user: user.name });
      const uid = execFileSync("id", ["-u", user.name], { encoding: "utf8" }).trim();
      const cases = [
        [unreachable, `setup.command[0]: ${JSON.stringify(unreachable)} is not executable by user ${JSON.stringify(user.name)} (uid ${uid})`],
        [noInterpreter, `setup.command[0]: cannot start ${JSON.stringify(noInterpreter)}: its interpreter "/nonexistent/python9": ENOENT`],
      ] as const;
      for (const [command, message] of cases) {
        for (const tty of [false, true]) {
          const q = new RequestQueue<ExecTaskStreamingRequest>();
          q.push(req({ setup: { taskId: "t", command: [command], tty } }));
          // Before: setpriv's (or the shell's) complaint as output and exit 127 (or 2), not an error.
          const err = await collectExec(exe.client.execStreaming(q)).then(
            (r) => r,
            (e: unknown) => e,
          );
          q.end();
          expect(err, `${command} tty ${tty}`).toBeInstanceOf(ConnectError);
          expect((err as ConnectError).code).toBe(Code.InvalidArgument);
          expect((err as ConnectError).rawMessage).toBe(message);
        }
      }
    } finally {
      rmSync(locked, { recursive: true, force: true });
      rmSync(open, { recursive: true, force: true });
    }
  });
});

describe("executor: outliving the driver", () => {
  it("keeps the task running when the driver is SIGKILLed, and is reattachable", async () => {
    const out = file("survivor");
    const parent = spawn(process.execPath, [join(__dirname, "fixtures/executor/parent.mjs"), out], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    stray.push(parent.pid!);
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: parent.stdout! }).once("line", resolve);
      parent.once("exit", (c) => reject(new Error(`parent exited ${c}`)));
    });
    const { reattach, taskPid } = JSON.parse(line) as { reattach: { pid: number; network: "unix"; address: string }; taskPid: number };
    stray.push(reattach.pid, taskPid);
    await fileUntil(out, (s) => s.includes("started"));

    const parentGone = new Promise((r) => parent.once("exit", r));
    parent.kill("SIGKILL");
    await parentGone;
    expect(isProcessAlive(reattach.pid)).toBe(true);
    expect(isProcessAlive(taskPid)).toBe(true);

    // driver_state round trip, then reattach.
    const state = decodeExecutorState(encodeExecutorState(reattach, { note: "x" }));
    expect(state).toEqual({ executor: reattach, driver: { note: "x" } });
    const exe = await reattachExecutor(state.executor);
    handles.push(exe);
    // The executor logs after its stderr pipe broke (EPIPE) and keeps serving.
    expect((await exe.client.version({})).version).toBe("2.0.0"); // Nomad's ExecutorVersionLatest
    const wait = exe.client.wait({});
    await exe.client.signal({ signal: 10 }); // SIGUSR1: the task's trap exits 42
    const { process: done } = await wait;
    expect(done).toMatchObject({ pid: taskPid, exitCode: 42, signal: 0 });
    const text = readFileSync(out, "utf8");
    // Started exactly once: it never stopped or restarted.
    expect(text.match(/started/g)).toHaveLength(1);
    expect(text).toContain(`started ${taskPid}`);
    expect(text).toContain("got USR1");
  });

  it("reattaching to a dead executor fails with PluginLaunchError; bad driver_state names the field", async () => {
    const c = spawn("true");
    await new Promise((r) => c.once("exit", r));
    await expect(reattachExecutor({ pid: c.pid!, network: "unix", address: "/nonexistent.sock" })).rejects.toBeInstanceOf(PluginLaunchError);
    for (const bad of ["not json", "{}", '{"executor":{"pid":-1,"network":"unix","address":"x"}}', '{"executor":{"pid":1,"network":"udp","address":"x"}}']) {
      expect(() => decodeExecutorState(new TextEncoder().encode(bad))).toThrow(/driver_state/);
    }
    // Garbage is quoted, never printed raw (terminal escapes, NULs).
    expect(() => decodeExecutorState(new TextEncoder().encode("\x1b[2J\x00junk"))).toThrow('driver_state: not JSON (9 bytes: "\\u001b[2J\\u0000junk")');
  });

  it("decodeExecutorState checks the driver's part with parseDriver: InvalidArgument naming the field", () => {
    const reattach = { pid: 1, network: "unix" as const, address: "/x.sock" };
    const bytes = (driver: unknown) => encodeExecutorState(reattach, driver);
    const parse = (v: unknown, invalid: (field: string, problem: string) => never) => {
      const pid = (v as { pid?: unknown }).pid;
      if (typeof pid === "string" && /^\d+$/.test(pid)) return { pid: Number(pid) };
      if (!Number.isInteger(pid)) invalid("pid", "must be an integer");
      if (pid === 0) throw new Error("pid 0 is nobody");
      return { pid: pid as number };
    };
    expect(decodeExecutorState(bytes({ pid: 7 }), parse)).toEqual({ executor: reattach, driver: { pid: 7 } });
    expect(decodeExecutorState(bytes({ pid: "7" }), parse).driver).toEqual({ pid: 7 }); // converted
    expect(decodeExecutorState(bytes(undefined), parse)).toEqual({ executor: reattach, driver: undefined }); // no part: not asked
    const failure = (driver: unknown) => {
      try {
        decodeExecutorState(bytes(driver), parse);
      } catch (err) {
        return err as ConnectError;
      }
      throw new Error("accepted");
    };
    expect(failure({ pid: "x" })).toMatchObject({ code: Code.InvalidArgument, rawMessage: "driver_state: driver.pid must be an integer" });
    expect(failure({ pid: 0 })).toMatchObject({ code: Code.InvalidArgument, rawMessage: "driver_state: driver: pid 0 is nobody" });
    // The executor's part is checked first, and without a parser the driver's part is left as it is.
    expect(() => decodeExecutorState(new TextEncoder().encode('{"driver":{"pid":"x"}}'), parse)).toThrow("driver_state: missing executor");
    expect(decodeExecutorState(bytes("anything")).driver).toBe("anything");
  });

  it("calls fail with PluginShutdownError once the executor is gone", async () => {
    const exe = await executor();
    const { process: p } = await exe.client.launch({ cmd: "sleep", args: ["1000"], env: [PATH] });
    stray.push(p!.pid);
    process.kill(exe.pid, "SIGKILL");
    await expect(exe.client.wait({})).rejects.toBeInstanceOf(PluginShutdownError);
  });
});
