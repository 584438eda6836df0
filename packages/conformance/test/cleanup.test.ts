// What a run leaves behind: nothing. Interrupted runs, drivers whose tasks outlive the plugin, the
// plugin the suite SIGKILLs on purpose: every plugin, task and socket directory the suite started
// is gone when runConformance settles. All with real plugin processes (the reference driver and a
// fixture driver whose tasks are plain children of the plugin).
import { spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { formatReport, runConformance, type CheckResult, type ConformanceReport } from "../src/index.js";
import { processGone } from "../src/util.js";

const rawexec = fileURLToPath(new URL("../../../examples/rawexec-driver/bin/nomadkit-rawexec", import.meta.url));
const direct = fileURLToPath(new URL("./fixtures/direct-driver.mjs", import.meta.url));
// Nomad's bounds, generously: the project's tests run on busy machines.
const generous = { shutdownTimeoutMs: 15_000, fingerprintTimeoutMs: 30_000 };

const root = mkdtempSync(join(tmpdir(), "nomadkit-conformance-cleanup-test-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Pids a test must not leave running, even when the code under test does. */
const survivors = new Set<number>();
afterEach(() => {
  for (const pid of survivors) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  survivors.clear();
});

function byName(report: ConformanceReport): Record<string, CheckResult> {
  return Object.fromEntries(report.results.map((r) => [r.name, r]));
}

async function until(cond: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
  return true;
}

function pidsIn(file: string): number[] {
  return existsSync(file) ? readFileSync(file, "utf8").split(/\s+/).filter(Boolean).map(Number) : [];
}

const netcrash = fileURLToPath(new URL("./fixtures/netcrash-driver.mjs", import.meta.url));
// Root and iproute2: what LinuxNetnsManager needs.
const canNetns = process.getuid?.() === 0 && spawnSync("ip", ["-V"], { stdio: "ignore" }).status === 0;

describe("a plugin that dies after CreateNetwork", () => {
  it.skipIf(!canNetns)(
    "has the allocation's namespace destroyed by a fresh plugin, as Nomad's network hook would",
    async () => {
      const netns = () => (existsSync("/var/run/netns") ? readdirSync("/var/run/netns") : []);
      const before = new Set(netns());
      const report = await runConformance({ plugin: netcrash, checks: ["network"], ...generous });
      expect(byName(report).network?.status).toBe("fail"); // the plugin died under StartTask
      // Before: no task had a handle, so no plugin was started to destroy the network.
      expect(netns().filter((n) => !before.has(n))).toEqual([]);
    },
    120_000,
  );
});

describe("an interrupted run", () => {
  it(
    "leaves no plugin behind that was still starting when the run was interrupted",
    async () => {
      const dir = mkdtempSync(join(root, "slow-"));
      const pidFile = join(dir, "pid");
      // A plugin that takes a while to start: the wrapper's pid becomes the driver's at exec.
      const wrapper = join(dir, "slow-start");
      writeFileSync(wrapper, `#!/bin/sh\necho $$ > '${pidFile}'\nsleep 2\nexec '${rawexec}' "$@"\n`, { mode: 0o755 });
      const ac = new AbortController();
      const run = runConformance({ plugin: wrapper, checks: ["handshake"], abortSignal: ac.signal, ...generous });
      expect(await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").endsWith("\n"), 20_000), "the wrapper never started").toBe(true);
      const pid = Number(readFileSync(pidFile, "utf8"));
      survivors.add(pid);
      ac.abort(); // Ctrl-C while the plugin is starting
      const report = await run;
      expect(report.interrupted).toBe(true);
      expect(report.results).toEqual([]);
      // Had the launch been left running, the wrapper would still be sleeping here and would then
      // exec the driver, which nobody would ever stop.
      expect(processGone(pid), `plugin process ${pid} is still running after the run settled`).toBe(true);
    },
    60_000,
  );
});

describe("a run with an abort signal", () => {
  it(
    "adds no abort listener per check (no MaxListenersExceededWarning)",
    async () => {
      const warnings: Error[] = [];
      const onWarning = (w: Error) => warnings.push(w);
      process.on("warning", onWarning);
      try {
        const report = await runConformance({
          plugin: rawexec,
          abortSignal: new AbortController().signal,
          ...generous,
          // More than 10 checks (Node's listener limit) that run, without tasks to keep it short.
          checks: ["no-cookie", "health", "plugin-info", "set-config", "capabilities", "fingerprint", "task-config-schema", "task-events", "shutdown"],
        });
        expect(report.results.length).toBeGreaterThan(10);
        expect(report.failed, formatReport(report)).toBe(0);
        await new Promise((r) => setImmediate(r));
      } finally {
        process.off("warning", onWarning);
      }
      expect(warnings.filter((w) => w.name === "MaxListenersExceededWarning").map((w) => w.message)).toEqual([]);
    },
    120_000,
  );
});

describe("the socket directory of the plugin SIGKILLed by the recover check", () => {
  it(
    "is removed",
    async () => {
      const sockets = mkdtempSync(join(root, "sockets-"));
      const report = await runConformance({ plugin: rawexec, checks: ["recover"], env: { PLUGIN_UNIX_SOCKET_DIR: sockets }, ...generous });
      expect(byName(report).recover?.status, formatReport(report)).toBe("pass");
      expect(byName(report).handshake?.message).toContain(sockets);
      expect(readdirSync(sockets)).toEqual([]);
    },
    120_000,
  );
});

describe("a driver that cannot recover tasks", () => {
  it(
    "fails recover, and the checks that only need a started task still test one the plugin knows",
    async () => {
      const report = await runConformance({
        plugin: process.execPath,
        args: [direct],
        ...generous,
        checks: ["recover", "signal-task", "stop-task", "wait-task", "inspect-exited", "destroy-task", "destroy-force"],
      });
      const rows = byName(report);
      for (const name of ["signal-task", "stop-task", "wait-task", "inspect-exited", "destroy-task", "destroy-force"]) {
        expect(rows[name]?.status, `${name}\n${formatReport(report)}`).toBe("pass");
      }
      expect(rows["signal-task"]?.message).toBe("the task received SIGHUP, SIGUSR1, SIGUSR2, each as sent");
      // recover alone reports the finding, and says what the suite did about it.
      expect(rows.recover?.status, formatReport(report)).toBe("fail");
      expect(rows.recover?.message).toMatch(/^RecoverTask failed: .*cannot recover tasks; as Nomad does, the task was destroyed and started again/);
    },
    120_000,
  );

  it(
    "with a custom task config: every task process the run started is gone afterwards, though the plugins died with tasks running",
    async () => {
      const dir = mkdtempSync(join(root, "custom-"));
      const pids = join(dir, "pids");
      const report = await runConformance({
        plugin: process.execPath,
        args: [direct],
        // The plugin SIGKILLs itself at SignalTask: a crash the suite does not expect.
        env: { DIRECT_DRIVER_DIE_ON_SIGNAL: "1" },
        taskConfig: { command: "/bin/sh", args: ["-c", `echo $$ >> '${pids}'; exec sleep 600`] },
        ...generous,
        checks: ["recover", "signal-task", "stop-task"],
      });
      const rows = byName(report);
      const started = pidsIn(pids);
      started.forEach((p) => survivors.add(p));
      expect(rows["start-task"]?.status, formatReport(report)).toBe("pass");
      expect(rows.recover?.status, formatReport(report)).toBe("fail");
      expect(rows["signal-task"]?.status, formatReport(report)).toBe("fail");
      expect(rows["signal-task"]?.message, formatReport(report)).toMatch(/exited on signal SIGKILL during signal-task/);
      // One task before the recover check's SIGKILL, one started again after RecoverTask failed.
      expect(started).toHaveLength(2);
      const gone = await until(() => started.every(processGone), 5_000);
      expect(gone, `task processes still running: ${started.filter((p) => !processGone(p)).join(", ")}`).toBe(true);
    },
    120_000,
  );
});

describe("a process that ends mid-run", () => {
  const exitMidRun = fileURLToPath(new URL("./fixtures/exit-mid-run.mjs", import.meta.url));
  /** The cgroup directories named `parent` under any controller (v1) or the v2 root. */
  const cgroupDirs = (parent: string) =>
    ["", ...(existsSync("/sys/fs/cgroup") ? readdirSync("/sys/fs/cgroup") : [])].map((c) => join("/sys/fs/cgroup", c, parent)).filter((d) => existsSync(d));

  it(
    "leaves a signal someone already listens for to them (the CLI's Ctrl-C), and takes its listeners away after the run",
    async () => {
      const mine = () => undefined;
      process.on("SIGINT", mine);
      const before = { SIGINT: process.listenerCount("SIGINT"), SIGHUP: process.listenerCount("SIGHUP"), exit: process.listenerCount("exit") };
      const during: (typeof before)[] = [];
      try {
        await runConformance({
          plugin: rawexec,
          ...generous,
          checks: ["health"],
          onResult: () => void during.push({ SIGINT: process.listenerCount("SIGINT"), SIGHUP: process.listenerCount("SIGHUP"), exit: process.listenerCount("exit") }),
        });
      } finally {
        process.off("SIGINT", mine);
      }
      // SIGINT had a listener: not the suite's to add one (the CLI takes any other for a command's own).
      expect(during[0]).toEqual({ SIGINT: before.SIGINT, SIGHUP: before.SIGHUP === 0 ? 1 : before.SIGHUP, exit: before.exit + 1 });
      expect({ SIGINT: process.listenerCount("SIGINT") + 1, SIGHUP: process.listenerCount("SIGHUP"), exit: process.listenerCount("exit") }).toEqual(before);
    },
    120_000,
  );

  // What a test runner does to a worker whose test timed out: process.exit (Node then runs the
  // "exit" listeners), or SIGTERM (vitest's forks pool), whose default action runs no JavaScript.
  for (const how of ["exit", "SIGTERM"] as const) {
    it(
      `leaves no plugin, task, directory or cgroup of the run behind (${how})`,
      async () => {
        const tmp = mkdtempSync(join(root, `exit-${how}-`));
        const pidsFile = join(root, `exit-${how}-pids`);
        const cgroupParent = `nomadkit-exit-test-${randomUUID().slice(0, 8)}`;
        // TMPDIR: the suite's work dir and the plugin's and executor's socket directories land there.
        const child = spawn(process.execPath, [exitMidRun, rawexec, tmp, cgroupParent, pidsFile, how], {
          env: { ...process.env, TMPDIR: tmp },
          stdio: ["ignore", "ignore", "pipe"],
        });
        let stderr = "";
        child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
        const exit = await new Promise<{ code: number | null; signal: string | null }>((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
        const [status, ...pids] = readFileSync(pidsFile, "utf8").trim().split(" ");
        pids.map(Number).forEach((p) => survivors.add(p));
        // How it ended is unchanged: the exit code given, or death by the signal.
        expect(exit, stderr).toEqual(how === "exit" ? { code: 7, signal: null } : { code: null, signal: "SIGTERM" });
        expect(status, stderr).toBe("pass");
        // The plugin, its executor and the task at least.
        expect(pids.length).toBeGreaterThanOrEqual(3);
        const gone = await until(() => pids.map(Number).every(processGone), 10_000);
        expect(gone, `still running: ${pids.filter((p) => !processGone(Number(p))).join(", ")}`).toBe(true);
        expect(readdirSync(tmp)).toEqual([]);
        const leftCgroups = cgroupDirs(cgroupParent);
        // Not left to the next run whatever the outcome (the processes went with survivors).
        for (const d of leftCgroups) spawnSync("find", [d, "-depth", "-type", "d", "-exec", "rmdir", "{}", ";"]);
        expect(leftCgroups).toEqual([]);
      },
      120_000,
    );
  }
});
