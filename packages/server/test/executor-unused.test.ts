// An executor whose driver goes away before any Launch succeeded (killed during StartTask) is known
// to nobody: no handle was returned, so no driver_state names it. It must exit, its socket
// directory removed, instead of serving nothing forever; one that launched its task must not.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import {
  existsSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { Code, ConnectError } from "@connectrpc/connect";
import { NOMAD_PLUGIN_COOKIE, PluginLaunchError } from "@nomadkit/client";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  executorBinPath,
  isProcessAlive,
  launchExecutor,
  reattachExecutor,
  type ExecutorHandle,
} from "../src/executor.js";
import { endExecutors } from "./executor-helpers.js";

const PATH = "PATH=/usr/local/bin:/usr/bin:/bin";
let dir: string;
const handles: ExecutorHandle[] = [];
const stray: number[] = [];

beforeAll(() => {
  if (!existsSync(executorBinPath()))
    throw new Error(
      `build first: ${executorBinPath()} is missing (npx turbo run build)`,
    );
  dir = mkdtempSync(join(tmpdir(), "nk-executor-unused-"));
});
afterEach(() => endExecutors(handles, stray));
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

let n = 0;
const file = (name: string) => join(dir, `${++n}-${name}`);

/** Polls until `done()` holds: a condition, not a timed sleep (the test's timeout bounds it). */
async function until(done: () => boolean): Promise<void> {
  while (!done()) await new Promise((r) => setTimeout(r, 20));
}

/** The executor's hclog lines (JSON) in its log file. */
function logLines(path: string): Record<string, unknown>[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** Waits for the executor `pid` to exit, then requires its socket directory to be gone too. */
async function expectExitedClean(pid: number, address: string): Promise<void> {
  await until(() => !isProcessAlive(pid));
  expect(existsSync(dirname(address)), dirname(address)).toBe(false);
}

/** Starts test/fixtures/executor/host.mjs (a driver that launches an executor) and reads its reattach info. */
async function startHost(
  args: string[] = [],
): Promise<{
  host: ChildProcess;
  reattach: { pid: number; address: string };
  lines: AsyncIterator<string>;
}> {
  const host = spawn(
    process.execPath,
    [join(__dirname, "fixtures/executor/host.mjs"), ...args],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  stray.push(host.pid!);
  const lines = createInterface({ input: host.stdout! })[
    Symbol.asyncIterator
  ]();
  const first = await lines.next();
  if (first.done)
    throw new Error(
      "the host exited before printing its executor's reattach info",
    );
  const { reattach } = JSON.parse(first.value as string) as {
    reattach: { pid: number; address: string };
  };
  stray.push(reattach.pid);
  return { host, reattach, lines };
}

async function sigkill(host: ChildProcess): Promise<void> {
  const gone = new Promise((r) => host.once("exit", r));
  host.kill("SIGKILL");
  await gone;
}

/** Processes whose command line is exactly `argv`. */
function processesRunning(argv: string[]): number[] {
  const want = argv.join("\0") + "\0";
  return readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        return readFileSync(`/proc/${d}/cmdline`, "utf8") === want;
      } catch {
        return false;
      }
    })
    .map(Number);
}

describe("executor: a host gone before any task was launched", () => {
  it("exits, its socket directory removed, when its driver is SIGKILLed before the Launch", async () => {
    const { host, reattach } = await startHost();
    expect(isProcessAlive(reattach.pid)).toBe(true);
    await sigkill(host);
    await expectExitedClean(reattach.pid, reattach.address);
  });

  it("exits when its driver dies while the Launch waits for a reader of a log FIFO; the task never starts", async () => {
    const stdoutPath = file("stdout");
    const stderrPath = file("stderr.fifo");
    execFileSync("mkfifo", [stderrPath]); // Nomad's logmon FIFO, nobody reading yet
    const seconds = `${600 + (process.pid % 997)}.5`; // a command line no other test runs
    const { host, reattach } = await startHost([
      stdoutPath,
      stderrPath,
      seconds,
    ]);
    // The Launch opens stdout first (a file: created at once), then waits for the FIFO's reader.
    await until(() => existsSync(stdoutPath));
    await sigkill(host);
    await expectExitedClean(reattach.pid, reattach.address);
    expect(processesRunning(["/bin/sleep", seconds])).toEqual([]);
  });

  it("exits when the driver closes its last connection, not while another is open", async () => {
    const logFile = file("executor.log");
    const exe = await launchExecutor({ config: { logFile } });
    handles.push(exe);
    const side = await reattachExecutor(exe.reattach);
    side.close();
    // The executor saw that connection go (one still open) and serves on.
    await until(() =>
      logLines(logFile).some(
        (l) => l["@message"] === "host connection closed" && l.open === 1,
      ),
    );
    expect(isProcessAlive(exe.pid)).toBe(true);
    expect((await exe.client.version({})).version).toBe("2.0.0");
    exe.close();
    await expectExitedClean(exe.pid, exe.reattach.address);
    expect(logLines(logFile).map((l) => l["@message"])).toContain(
      "exiting: the host went away before any task was launched in this executor",
    );
  });

  it("once a task was launched, outlives its driver's connections and can be reattached", async () => {
    const logFile = file("executor.log");
    const exe = await launchExecutor({ config: { logFile } });
    handles.push(exe);
    const { process: started } = await exe.client.launch({
      cmd: "sleep",
      args: ["600"],
      env: [PATH],
    });
    stray.push(started!.pid);
    exe.close();
    await until(() =>
      logLines(logFile).some(
        (l) => l["@message"] === "host connection closed" && l.open === 0,
      ),
    );
    expect(isProcessAlive(exe.pid)).toBe(true);
    expect(isProcessAlive(started!.pid)).toBe(true);
    const again = await reattachExecutor(exe.reattach);
    handles.push(again);
    const wait = again.client.wait({});
    await again.shutdownTask("SIGTERM", 5000);
    expect((await wait).process).toMatchObject({
      pid: started!.pid,
      signal: 15,
    });
  });

  it("a Launch arriving once the executor is on its way out is refused, not started", async () => {
    // Reached only through the service itself: over the wire the host is gone by then.
    const { ExecutorService } = await import("../src/executor/service.js");
    const service = new ExecutorService();
    expect(await service.retireIfUnused()).toBe(true);
    const err = await service
      .launch({ cmd: "/bin/true", args: [], env: [PATH] } as never)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
  });
});

describe("executor: a host that never connects", () => {
  /** Starts the executor as launchExecutor does, without ever connecting to it. */
  function spawnExecutor(config: object) {
    const child = spawn(
      process.execPath,
      [executorBinPath(), JSON.stringify(config)],
      {
        env: {
          ...process.env,
          [NOMAD_PLUGIN_COOKIE.key]: NOMAD_PLUGIN_COOKIE.value,
          PLUGIN_PROTOCOL_VERSIONS: "2",
        },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    stray.push(child.pid!);
    let stderr = "";
    child.stderr!.on("data", (b: Buffer) => (stderr += b.toString()));
    let stdout = "";
    child.stdout!.on("data", (b: Buffer) => (stdout += b.toString()));
    const exit = new Promise<number | null>((r) =>
      child.once("close", (code) => r(code)),
    );
    return { exit, stdout: () => stdout, stderr: () => stderr };
  }

  it("exits cleanly once hostConnectTimeoutMs has passed with no connection and no task", async () => {
    const exe = spawnExecutor({ hostConnectTimeoutMs: 200 });
    expect(await exe.exit).toBe(0);
    const address = exe.stdout().split("\n")[0]!.split("|")[3]!;
    expect(address).toMatch(/plugin\.sock$/);
    expect(existsSync(dirname(address))).toBe(false);
  });

  it("takes a hostConnectTimeoutMs beyond setTimeout's range as a long wait, not as none", async () => {
    // setTimeout fires at once for a delay over 2^31-1 ms: the executor left before its host connected.
    const exe = await launchExecutor({ config: { hostConnectTimeoutMs: 1e10 } });
    handles.push(exe);
    const { process: p } = await exe.client.launch({ cmd: "/bin/true", args: [], env: [] });
    expect(p?.pid).toBeGreaterThan(0);
  });

  it("refuses a hostConnectTimeoutMs that is not a positive number, naming it", async () => {
    const exe = spawnExecutor({ hostConnectTimeoutMs: "soon" });
    expect(await exe.exit).toBe(1);
    expect(exe.stdout()).toBe("");
    expect(exe.stderr()).toContain(
      'hostConnectTimeoutMs must be a positive number of ms, not "soon"',
    );
    const err = await launchExecutor({
      config: { hostConnectTimeoutMs: -1 },
    }).catch((e: unknown) => e);
    if (!(err instanceof Error)) handles.push(err as ExecutorHandle);
    expect(err).toBeInstanceOf(PluginLaunchError);
    expect((err as PluginLaunchError).stderr).toContain(
      "hostConnectTimeoutMs must be a positive number of ms, not -1",
    );
  });
});
