// The executor's task under what real Nomad does around it: logmon's FIFOs losing their reader, a
// process SIGKILL cannot end, and a StartTask that gives up while the launch is under way.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { LaunchRequestSchema, ShutdownRequestSchema } from "@nomadkit/protocol/executor";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ExecutorService, TaskCgroups, TaskProcess } from "../src/executor.js";
import { pidExists } from "../src/executor/pids.js";

const PATH = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
const isRoot = process.getuid?.() === 0;
const FREEZER = "/sys/fs/cgroup/freezer";

let dir: string;
const cleanups: (() => void)[] = [];
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "nk-exe-stop-"));
});
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
  rmSync(dir, { recursive: true, force: true });
});

async function until(what: string, cond: () => boolean): Promise<void> {
  for (let i = 0; i < 3000; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Whether process `pid` has `path` open. */
function holdsOpen(pid: number, path: string): boolean {
  try {
    return readdirSync(`/proc/${pid}/fd`).some((fd) => {
      try {
        return readlinkSync(`/proc/${pid}/fd/${fd}`) === path;
      } catch {
        return false;
      }
    });
  } catch {
    return false;
  }
}

/** `cat fifo`, its output collected. */
function reader(fifo: string): { child: ChildProcess; text: () => string; closed: Promise<void> } {
  const child = spawn("cat", [fifo], { stdio: ["ignore", "pipe", "ignore"] });
  let text = "";
  child.stdout!.on("data", (c: Buffer) => (text += c.toString()));
  cleanups.push(() => child.kill("SIGKILL"));
  return { child, text: () => text, closed: new Promise((r) => child.once("close", () => r())) };
}

describe("a task writing to logmon's FIFO", () => {
  it("keeps running when the reader goes away, and its output waits for the next reader", async () => {
    const fifo = join(dir, "task.stdout.fifo");
    execFileSync("mkfifo", [fifo]);
    const first = reader(fifo);
    const task = await TaskProcess.launch({
      cmd: "sh",
      // "two" is written while no reader is there; "wrote" says it was (a SIGPIPE would end sh first).
      args: ["-c", "echo one; until [ -e go ]; do sleep 0.02; done; echo two; touch wrote; until [ -e end ]; do sleep 0.02; done"],
      env: [PATH],
      workDir: dir,
      stdoutPath: fifo,
    });
    cleanups.push(() => void task.shutdown("SIGKILL", 0).catch(() => undefined));
    await until("the first reader to get the first line", () => first.text() === "one\n");
    first.child.kill("SIGKILL");
    await first.closed;
    writeFileSync(join(dir, "go"), "");
    await until("the task to write with no reader, or to die trying", () => existsSync(join(dir, "wrote")) || task.exit !== undefined);
    expect(task.exit).toBeUndefined();
    const second = reader(fifo);
    // Opened before the task ends: a reader opening a FIFO nobody writes any more waits for a writer forever.
    await until("the second reader to open the FIFO", () => holdsOpen(second.child.pid!, fifo));
    writeFileSync(join(dir, "end"), "");
    expect(await task.wait()).toMatchObject({ exitCode: 0, signal: 0 });
    await second.closed;
    expect(second.text()).toBe("two\n");
  });

  it("starts the task only once the FIFO has a reader, which then gets all of its output", async () => {
    const fifo = join(dir, "task.stdout.fifo");
    execFileSync("mkfifo", [fifo]);
    const launching = TaskProcess.launch({ cmd: "sh", args: ["-c", "touch started; echo early; until [ -e end ]; do sleep 0.02; done"], env: [PATH], workDir: dir, stdoutPath: fifo });
    // Several of the launch's polls for a reader.
    await new Promise((r) => setTimeout(r, 200));
    expect(existsSync(join(dir, "started"))).toBe(false);
    const late = reader(fifo);
    const task = await launching;
    cleanups.push(() => void task.shutdown("SIGKILL", 0).catch(() => undefined));
    writeFileSync(join(dir, "end"), "");
    expect(await task.wait()).toMatchObject({ exitCode: 0 });
    await late.closed;
    expect(late.text()).toBe("early\n");
  });

  it("Shutdown gives up a launch still waiting for a reader (no blocked open holds the executor)", async () => {
    const fifo = join(dir, "task.stdout.fifo");
    execFileSync("mkfifo", [fifo]);
    let shutDown = false;
    const service = new ExecutorService({ afterShutdown: () => (shutDown = true) });
    const launching = service.launch(create(LaunchRequestSchema, { cmd: "sleep", args: ["600"], env: [PATH], taskDir: dir, stdoutPath: fifo }));
    await service.shutdown(create(ShutdownRequestSchema, { signal: "SIGKILL" }));
    const err = await launching.catch((e: unknown) => e);
    expect((err as ConnectError).code).toBe(Code.Canceled);
    expect((err as ConnectError).rawMessage).toBe(`stdout_path: launch cancelled while waiting for a reader of ${JSON.stringify(fifo)}`);
    expect(service.current).toBeUndefined();
    await new Promise((r) => setImmediate(r));
    expect(shutDown).toBe(true);
  });

});

describe.skipIf(!isRoot || !existsSync(join(FREEZER, "cgroup.procs")))("a task SIGKILL cannot end", () => {
  it("fails Shutdown with DeadlineExceeded instead of holding it forever (a frozen v1 freezer cgroup)", async () => {
    const cg = join(FREEZER, `nomadkit-test-${process.pid}-frozen`);
    mkdirSync(cg);
    cleanups.push(() => rmdirSync(cg));
    const task = await TaskProcess.launch({ cmd: "sleep", args: ["600"], env: [PATH], cgroups: TaskCgroups.resolve({ cgroupV1Override: { freezer: cg } }) });
    cleanups.push(() => void task.shutdown("SIGKILL", 0).catch(() => undefined));
    writeFileSync(join(cg, "freezer.state"), "FROZEN");
    await until("the cgroup to freeze", () => readFileSync(join(cg, "freezer.state"), "utf8").trim() === "FROZEN");
    const err = await task.shutdown("SIGTERM", 0, 300).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.DeadlineExceeded);
    expect((err as ConnectError).rawMessage).toBe(`shutdown: process ${task.pid} did not exit within 300 ms of SIGKILL`);
    // Thawed, the pending SIGKILL ends it.
    writeFileSync(join(cg, "freezer.state"), "THAWED");
    expect(await task.wait()).toMatchObject({ signal: 9 });
  });
});

describe("a StartTask that gives up while the executor launches", () => {
  const launchRequest = () => create(LaunchRequestSchema, { cmd: "sleep", args: ["600"], env: [PATH], taskDir: dir });

  it("a Shutdown that arrives during Launch stops the task that Launch starts", async () => {
    let shutDown = false;
    const service = new ExecutorService({ afterShutdown: () => (shutDown = true) });
    const launching = service.launch(launchRequest());
    // Launch is under way (it opens files and spawns asynchronously): no task yet.
    expect(service.current).toBeUndefined();
    await service.shutdown(create(ShutdownRequestSchema, { signal: "SIGKILL" }));
    await launching;
    const task = service.current!;
    expect(task.exit).toMatchObject({ signal: 9 });
    await new Promise((r) => setImmediate(r)); // afterShutdown runs once the reply is on its way
    expect(shutDown).toBe(true);
    expect(pidExists(task.pid)).toBe(false);
  });

  it("a Launch whose caller has gone kills the task it started and answers Canceled", async () => {
    const service = new ExecutorService();
    const caller = new AbortController();
    const launching = service.launch(launchRequest(), { signal: caller.signal });
    caller.abort();
    const err = await launching.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Canceled);
    const task = service.current!;
    expect((err as ConnectError).rawMessage).toBe(`launch: cancelled by the caller; the task (pid ${task.pid}) was killed`);
    expect(task.exit).toMatchObject({ signal: 9 });
  });
});
