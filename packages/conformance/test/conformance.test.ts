// The suite against the reference driver (must conform) and against a deliberately broken plugin
// (must be caught). Both are launched as real child processes, exactly as Nomad launches drivers.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { defaultTaskConfig, formatReport, listChecks, runConformance, type CheckResult, type ConformanceOptions, type ConformanceReport } from "../src/index.js";
import { defaultTaskSignals } from "../src/suite.js";
// A real user with two supplementary groups (the server package's test helper).
import { createTestUser } from "../../server/test/test-user.js";
import { CGROUP_ROOT, canMakeCgroups, removeCgroupTree, testCgroups, v2Host } from "../../client/test/cgroup-fixtures.js";

const rawexec = fileURLToPath(new URL("../../../examples/rawexec-driver/bin/nomadkit-rawexec", import.meta.url));
const broken = fileURLToPath(new URL("./fixtures/broken-driver.mjs", import.meta.url));
// One behaviour each, chosen by BUG_MODE: real processes (modes-driver) or the generated handlers (modes-raw).
const modesDriver = fileURLToPath(new URL("./fixtures/modes-driver.mjs", import.meta.url));
const modesRaw = fileURLToPath(new URL("./fixtures/modes-raw.mjs", import.meta.url));
// A correct driver whose plugin process writes the stdout FIFO itself, and reopens it in RecoverTask.
const relayDriver = fileURLToPath(new URL("./fixtures/relay-driver.mjs", import.meta.url));
const isRoot = process.getuid?.() === 0;
// Nomad's bounds (2 s shutdown, a prompt first fingerprint) are checked generously here: the
// project's tests run on busy machines; the CLI and the API default to Nomad's values.
const generous = { shutdownTimeoutMs: 15_000, fingerprintTimeoutMs: 30_000 };
// The tasks' cgroups (made by default, as Nomad's client does, where this host allows: root).
const canCgroup = canMakeCgroups;
const cgroupParent = `nomadkit-test-${process.pid}`;

afterEach(() => {
  if (isRoot) for (const d of testCgroups(cgroupParent)) removeCgroupTree(d);
});

function byName(report: ConformanceReport): Record<string, CheckResult> {
  return Object.fromEntries(report.results.map((r) => [r.name, r]));
}

/** Asserts every listed check passed, showing the whole table when one did not. */
function expectPassed(report: ConformanceReport, names: readonly string[]): void {
  const rows = byName(report);
  const bad = names.filter((n) => rows[n]?.status !== "pass");
  expect(bad, formatReport(report)).toEqual([]);
}

describe("conformance of the reference driver (nomadkit-rawexec)", () => {
  it(
    "passes every check; the network check is skipped without create_network",
    async () => {
      expect(existsSync(rawexec), `${rawexec} is missing`).toBe(true);
      const report = await runConformance({ plugin: rawexec, name: "nomadkit-rawexec", cgroupParent, ...generous });
      const all = listChecks().map((c) => c.name);
      expect(report.results.map((r) => r.name)).toEqual(all);
      // shared-cpuset applies where cpuset_cgroup is shared: cgroup v1, as root.
      const sharedCpuset = canCgroup && !v2Host;
      expectPassed(
        report,
        all.filter((n) => n !== "network" && (n !== "shared-cpuset" || sharedCpuset)),
      );
      if (!sharedCpuset) expect(byName(report)["shared-cpuset"]!.status, formatReport(report)).toBe("skip");
      expect(byName(report).network!.status, formatReport(report)).toBe("skip");
      expect(byName(report).network!.message).toContain("must_create_network");
      // The recovered task is the running one, under the new plugin's control.
      expect(byName(report).recover!.message).toMatch(/; task pid \d+ never stopped; SignalTask\(SIGHUP\) reached it; exec works; WaitTask pending$/);
      expect(report.ok).toBe(true);
      expect(report.failed).toBe(0);
      expect(formatReport(report)).toMatch(/CONFORMS$/);
      // As under Nomad: the task ran in the cgroup made for it (its executor joins cpuset_cgroup),
      // which is gone with the run.
      if (canCgroup) {
        const layout = v2Host ? `${cgroupParent}/share.slice/[^ ]+\\.main\\.scope` : `cpuset/${cgroupParent}/share`;
        expect(byName(report)["start-task"]!.message).toMatch(new RegExp(`cpuset_cgroup ${CGROUP_ROOT}/${layout}, the task runs in it$`));
        expect(testCgroups(cgroupParent)).toEqual([]);
      } else {
        expect(byName(report)["start-task"]!.message).toMatch(/no task cgroup \(.+\)$/);
      }
    },
    300_000,
  );

  it(
    "starts tasks without a cgroup when taskCgroup is false",
    async () => {
      const report = await runConformance({ plugin: rawexec, taskCgroup: false, cgroupParent, checks: ["start-task", "shared-cpuset", "shutdown"], ...generous });
      expectPassed(report, ["start-task", "shutdown"]);
      expect(byName(report)["shared-cpuset"]).toMatchObject({ status: "skip", message: "no task cgroup (turned off: taskCgroup false, --no-task-cgroup)" });
      expect(byName(report)["start-task"]!.message).toMatch(/; no task cgroup \(turned off: taskCgroup false, --no-task-cgroup\)$/);
      expect(testCgroups(cgroupParent)).toEqual([]);
    },
    180_000,
  );

  it.skipIf(!isRoot)(
    "with create_network = true creates the group namespace, runs a task in it and destroys it (root)",
    async () => {
      const report = await runConformance({ plugin: rawexec, pluginConfig: { create_network: true }, checks: ["network", "shutdown"], ...generous });
      expectPassed(report, ["capabilities", "network", "shutdown"]);
      expect(byName(report).capabilities!.message).toContain("must_create_network=true");
      expect(byName(report).network!.message).toMatch(/\/var\/run\/netns\/.*task runs in net:\[\d+\]/);
    },
    180_000,
  );

  it.skipIf(!isRoot)(
    "with user, checks that the task runs as that user, its primary and supplementary groups included (root)",
    async () => {
      const user = createTestUser("cf");
      try {
        const report = await runConformance({ plugin: rawexec, user: user.name, cgroupParent, checks: ["start-task", "destroy-task"], ...generous });
        expectPassed(report, ["start-task", "destroy-task"]);
        const uid = Number(execFileSync("id", ["-u", user.name], { encoding: "utf8" }));
        expect(byName(report)["start-task"]!.message).toContain(`runs as ${user.name} (uid ${uid}, gid ${user.groups.find((g) => !user.supplementary.includes(g))}, groups ${user.groups.join(",")})`);
      } finally {
        user.remove();
      }
    },
    180_000,
  );
});

describe("the tasks' resources (cpuMhz, memoryMb, memoryMaxMb, cores), as a job gives them", () => {
  it.skipIf(!canCgroup)(
    "each task gets them: its NOMAD_* limits, its cgroup's memory limit, and with cores its own reserve cpuset cgroup, on those CPUs only (root)",
    async (ctx) => {
      const usable = readFileSync(v2Host ? `${CGROUP_ROOT}/cpuset.cpus.effective` : `${CGROUP_ROOT}/cpuset/cpuset.cpus`, "utf8").trim();
      const last = Number(/(\d+)$/.exec(usable)![1]);
      if (usable === String(last)) return ctx.skip("one CPU: nothing to reserve apart");
      const dir = mkdtempSync(join(tmpdir(), "nk-cf-resources-"));
      try {
        // A task of the caller's that says what it got, then runs until stopped.
        const out = join(dir, "seen");
        const script = [
          `echo "$NOMAD_MEMORY_LIMIT $NOMAD_MEMORY_MAX_LIMIT $NOMAD_CPU_CORES" > ${out}`,
          `grep Cpus_allowed_list /proc/self/status >> ${out}`,
          "if [ -f /sys/fs/cgroup/cgroup.controllers ]; then cat /sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/memory.max",
          `else cat /sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:[^:]*\\bmemory\\b[^:]*://p' /proc/self/cgroup)/memory.limit_in_bytes; fi >> ${out}`,
          "exec sleep 600",
        ].join("\n");
        const report = await runConformance({
          plugin: rawexec,
          taskConfig: { command: "/bin/sh", args: ["-c", script] },
          memoryMb: 64,
          memoryMaxMb: 96,
          cores: [last],
          cgroupParent,
          checks: ["start-task", "shared-cpuset", "destroy-task"],
          ...generous,
        });
        expectPassed(report, ["start-task", "destroy-task"]);
        const layout = v2Host ? `${cgroupParent}/reserve\\.slice/[^ ]+\\.main\\.scope` : `cpuset/${cgroupParent}/reserve/[^ ]+\\.main`;
        expect(byName(report)["start-task"]!.message).toMatch(new RegExp(`cpuset_cgroup ${CGROUP_ROOT}/${layout}$`));
        expect(readFileSync(out, "utf8")).toBe(`64 96 ${last}\nCpus_allowed_list:\t${last}\n${96 * 1024 * 1024}\n`);
        // Its cpuset cgroup is its own, not the one tasks without reserved cores share.
        expect(byName(report)["shared-cpuset"]).toMatchObject({ status: "skip", message: v2Host ? "cgroup v2: cpuset_cgroup is the task's own" : "the tasks reserve cores (cores): cpuset_cgroup is the task's own" });
        expect(testCgroups(cgroupParent)).toEqual([]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    180_000,
  );

  it("refuses, before starting anything, what Nomad refuses in a job, naming the option", async () => {
    await expect(runConformance({ plugin: rawexec, cpuMhz: 500, cores: [0] })).rejects.toThrow(
      `cpuMhz and cores: a task asks for one or the other; Nomad refuses both: "Task can only ask for 'cpu' or 'cores' resource, not both."`,
    );
    await expect(runConformance({ plugin: rawexec, memoryMaxMb: 100 })).rejects.toThrow(
      `memoryMaxMb 100: below the task's memory, 128 MB (the default); Nomad refuses it: "MemoryMaxMB value (100) should be larger than MemoryMB value (128)"`,
    );
    await expect(runConformance({ plugin: rawexec, memoryMb: 4 })).rejects.toThrow("memoryMb 4: must be a whole number of MB, at least 10 (Nomad's minimum)");
    await expect(runConformance({ plugin: rawexec, cores: [0], taskCgroup: false })).rejects.toThrow("cores: reserved cores need the tasks' cgroups, which taskCgroup false turns off");
  });
});

describe("conformance catches a broken plugin", () => {
  it(
    "reports two exited messages and a stats sample without timestamp as failures",
    async () => {
      const report = await runConformance({
        plugin: process.execPath,
        args: [broken],
        ...generous,
        checks: ["plugin-info", "task-stats", "exec-streaming", "exec-streaming-tty", "shutdown"],
      });
      const rows = byName(report);
      expect(report.ok, formatReport(report)).toBe(false);
      expect(report.failed).toBeGreaterThanOrEqual(2);
      expect(rows["plugin-info"]!.status).toBe("pass");
      expect(rows["start-task"]!.status).toBe("pass");
      expect(rows["task-stats"]!.status).toBe("fail");
      expect(rows["task-stats"]!.message).toContain("timestamp is missing");
      expect(rows["exec-streaming"]!.status).toBe("fail");
      expect(rows["exec-streaming"]!.message).toContain("2 exited messages");
      expect(rows["exec-streaming-tty"]!.status).toBe("fail");
      expect(rows.shutdown!.status).toBe("pass");
      expect(formatReport(report)).toMatch(/DOES NOT CONFORM$/);
    },
    120_000,
  );

  it(
    "reports a recovery that needs the task's config block, which Nomad's state database does not keep",
    async () => {
      // A task config of its own: the broken driver runs no process that would print the default task's pid.
      const report = await runConformance({ plugin: process.execPath, args: [broken], ...generous, taskConfig: { command: "/bin/sleep" }, checks: ["recover"] });
      const row = byName(report).recover!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toContain("RecoverTask failed");
      expect(row.message).toContain("the handle has no task config");
    },
    120_000,
  );

  it("names an unknown check and a missing plugin", async () => {
    await expect(runConformance({ plugin: rawexec, checks: ["no-such-check"] })).rejects.toThrow(/checks: unknown check "no-such-check"/);
    await expect(runConformance({ plugin: "" })).rejects.toThrow(/plugin: /);
  });

  it(
    "reports configs that do not fit the plugin's schemas as Nomad would refuse them, not as plugin behaviour",
    async () => {
      const plugin = await runConformance({ plugin: rawexec, pluginConfig: { create_netwrok: true }, checks: ["set-config"], ...generous });
      expect(byName(plugin)["set-config"]).toMatchObject({ status: "fail" });
      expect(byName(plugin)["set-config"]!.message).toContain(
        `the plugin config (pluginConfig, --plugin-config) does not fit the plugin's ConfigSchema: "create_netwrok" is not declared (declared: create_network, denied_envvars, denied_host_gids, denied_host_uids, enabled)`,
      );
      const task = await runConformance({ plugin: rawexec, taskConfig: { command: "/bin/sleep", agrs: ["600"] }, checks: ["start-task"], ...generous });
      expect(byName(task)["start-task"]).toMatchObject({ status: "fail" });
      expect(byName(task)["start-task"]!.message).toContain(`the task config (taskConfig, --task-config) does not fit the plugin's TaskConfigSchema: "agrs" is not declared (declared: args, cgroup_v1_override, cgroup_v2_override, command, denied_envvars, oom_score_adj, work_dir)`);
    },
    180_000,
  );

  it(
    "a plugin that cannot start fails the handshake and skips what depends on it",
    async () => {
      const report = await runConformance({ plugin: "/bin/false", checks: ["handshake", "exec"] });
      const rows = byName(report);
      expect(rows.handshake!.status).toBe("fail");
      expect(rows.handshake!.message).toMatch(/exited with status 1 before completing the go-plugin handshake/);
      expect(rows.exec!.status).toBe("skip");
      expect(rows.exec!.message).toMatch(/^needs /);
      expect(report.ok).toBe(false);
      // One that crashes (exit 1, a stack trace on stderr) does not pass for refusing a missing cookie.
      const crash = byName(await runConformance({ plugin: process.execPath, args: ["-e", "throw new Error('boom')"], checks: ["no-cookie"] }));
      expect(crash.handshake!.status).toBe("fail");
      expect(crash["no-cookie"]!.status).toBe("skip");
    },
    60_000,
  );
});

describe("conformance judges what Nomad relies on, not what the kit happens to do", () => {
  it(
    "signals a task of the caller's with SIGCONT by default: `sleep 600` must still run for stop-task",
    async () => {
      // The documented kind of task config: SIGHUP, the default task's trapped signal, would end it,
      // and stop-task would then fail the driver for a task that exited before StopTask.
      const direct = fileURLToPath(new URL("./fixtures/direct-driver.mjs", import.meta.url));
      const report = await runConformance({
        plugin: process.execPath,
        args: [direct],
        ...generous,
        taskConfig: { command: "/bin/sleep", args: ["600"] },
        checks: ["signal-task", "stop-task"],
      });
      expectPassed(report, ["signal-task", "stop-task"]);
      expect(byName(report)["signal-task"]!.message).toBe("SIGCONT sent (accepted; its delivery is not verified with a custom taskConfig)");
    },
    120_000,
  );

  // modes-raw runs no process that would print the default task's pid: it gets a task config of its own.
  const run = (fixture: string, mode: string, checks: string[], extra: Partial<ConformanceOptions> = {}) =>
    runConformance({
      plugin: process.execPath,
      args: [fixture],
      env: { BUG_MODE: mode },
      cgroupParent,
      ...generous,
      checks,
      ...(fixture === modesRaw ? { taskConfig: { command: "/bin/sleep" } } : {}),
      ...extra,
    });

  it(
    "accepts a non-setup first exec message failed with status Unknown, as Nomad's Go plugin server fails it",
    async () => {
      const report = await run(modesRaw, "go-setup-first", ["exec-setup-first"]);
      const row = byName(report)["exec-setup-first"]!;
      expect(row.status, formatReport(report)).toBe("pass");
      expect(row.message).toMatch(/^status Unknown \(2\): .*first message should always be setup.*; the plugin stays SERVING$/);
    },
    120_000,
  );

  it(
    "a check that times out is stopped for real: it makes no call afterwards, and the task it started is destroyed as it ends",
    async () => {
      // exit-code waits for a WaitTask the driver holds until destroy-force, a later check, starts its
      // task: exit-code times out, and an abandoned check that went on would then call DestroyTask.
      const dir = mkdtempSync(join(tmpdir(), "conformance-calls-"));
      const log = join(dir, "calls");
      try {
        const report = await run(modesDriver, "wait-hold", ["exit-code", "destroy-force"], { checkTimeoutMs: 15_000, env: { BUG_MODE: "wait-hold", CALL_LOG: log } });
        const rows = byName(report);
        expect(rows["exit-code"], formatReport(report)).toMatchObject({ status: "fail", message: "the check did not finish within 15000 ms" });
        expect(rows["destroy-force"]!.status, formatReport(report)).toBe("pass");
        const calls = readFileSync(log, "utf8").trim().split("\n");
        const next = calls.indexOf("startTask forced");
        expect(next, calls.join("\n")).toBeGreaterThan(0);
        // Destroyed as the check ended, before the next check began; nothing about it afterwards.
        expect(calls.slice(0, next).filter((c) => c.endsWith(" exits") || c.includes(" exits "))).toEqual(["startTask exits", "waitTask exits", "inspectTask exits", "destroyTask exits force"]);
        expect(calls.slice(next).filter((c) => c.includes(" exits")), calls.join("\n")).toEqual([]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    120_000,
  );

  it(
    "exec-setup-first fails a driver that never answers the exec stream (no refusal within the call deadline)",
    async () => {
      const report = await run(modesRaw, "exec-hang", ["exec-setup-first"], { callTimeoutMs: 5_000 });
      const row = byName(report)["exec-setup-first"]!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toMatch(/^the driver did not answer a stream whose first message was not setup: Driver.ExecTaskStreaming: not over within 5000 ms \(the call.s timeout\)/);
    },
    120_000,
  );

  it(
    "fails a driver that reports every task's end as exit code 0 (a killed or failed task counted as a success)",
    async () => {
      const report = await run(modesDriver, "exit-zero", ["stop-task", "exit-code", "stop-timeout"]);
      const rows = byName(report);
      expect(rows["stop-task"], formatReport(report)).toMatchObject({ status: "fail" });
      expect(rows["stop-task"]!.message).toContain("Nomad would count a killed task as a success");
      expect(rows["exit-code"]).toMatchObject({ status: "fail" });
      expect(rows["exit-code"]!.message).toContain("want exit_code 7");
      expect(rows["stop-timeout"]).toMatchObject({ status: "fail" });
      // The same checks pass the driver without the bug.
      const good = byName(await run(modesDriver, "", ["stop-task", "exit-code", "stop-timeout"]));
      for (const name of ["stop-task", "exit-code", "stop-timeout"]) expect([name, good[name]!.status, good[name]!.message]).toEqual([name, "pass", expect.any(String)]);
    },
    180_000,
  );

  it.skipIf(!canCgroup || v2Host)(
    "fails a driver that kills everything in cpuset_cgroup, which on cgroup v1 the node's tasks share (root, cgroup v1)",
    async () => {
      const share = `${CGROUP_ROOT}/cpuset/${cgroupParent}/share`;
      const report = await run(modesDriver, "cpuset-kill", ["shared-cpuset"]);
      const row = byName(report)["shared-cpuset"]!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toMatch(new RegExp(`^StopTask killed pid \\d+, a process of no task that was only in the task's cpuset_cgroup ${share}: `));
      expect(row.message).toContain("through its own cgroups, <controller>/<parent>/<alloc_id>.<task>");
      // The same driver without the bug passes; the suite leaves no cgroup behind either way.
      const good = byName(await run(modesDriver, "", ["shared-cpuset"]))["shared-cpuset"]!;
      expect(good.status, good.message).toBe("pass");
      expect(good.message).toMatch(new RegExp(`^pid \\d+ in ${share} outlived the task's StopTask and DestroyTask$`));
      expect(testCgroups(cgroupParent)).toEqual([]);
    },
    120_000,
  );

  it(
    "fails a driver that reopens the stdout FIFO after every writer closed it, and goes on (the reopen does not block it)",
    async () => {
      // The driver appends each chunk of the task's output with its own open and close: the default
      // task's ticks come 100 ms apart, so the kit sees the FIFO's EOF between two of them. It used
      // to stop reading there, and the next (blocking) open froze the plugin: every call timed out.
      const report = await run(modesDriver, "log-reopen", ["signal-task", "stop-task"], { callTimeoutMs: 5_000, checkTimeoutMs: 20_000 });
      const lost = report.results.filter((r) => r.status === "fail" && /\/\.main\.stdout\.fifo after every writer had closed it/.test(r.message));
      expect(lost.length, formatReport(report)).toBe(1);
      expect(lost[0]!.message).toMatch(/Nomad's logmon would never collect it.*open the FIFO once and keep it open.*driver guide §3/);
      // Nothing waited for a frozen plugin.
      expect(report.results.filter((r) => /timed out|did not finish|not over within/.test(r.message)), formatReport(report)).toEqual([]);
    },
    120_000,
  );

  it(
    "destroys the exited task with force = true, as Nomad's task runner always does",
    async () => {
      // The driver kills the (reaped) pid on force and throws ESRCH; with force = false it never did.
      const report = await run(modesDriver, "destroy-force", ["destroy-task"]);
      const row = byName(report)["destroy-task"]!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toContain("DestroyTask(force = true)");
    },
    120_000,
  );

  it(
    "destroy-no-force fails a driver that destroys a running task without force, and one that refuses to destroy an exited task without force",
    async () => {
      const any = byName(await run(modesDriver, "destroy-any", ["destroy-no-force"]))["destroy-no-force"]!;
      expect([any.status, any.message]).toEqual([
        "fail",
        expect.stringMatching(/^DestroyTask\(force = false\) on the running task \(pid \d+\) succeeded: without force a running task is an error \(Nomad's drivers answer "cannot destroy running task"\); only force may kill it$/),
      ]);
      const refuse = byName(await run(modesDriver, "destroy-exited-refuse", ["destroy-no-force"]))["destroy-no-force"]!;
      expect([refuse.status, refuse.message]).toEqual(["fail", "DestroyTask(force = false) on the exited task failed: [failed_precondition] cannot destroy running task (an exited task needs no force)"]);
      // Without either bug the fixture refuses the running task, keeps it, and forgets it once it has exited.
      const good = byName(await run(modesDriver, "", ["destroy-no-force"]))["destroy-no-force"]!;
      expect([good.status, good.message]).toEqual(["pass", expect.stringMatching(/^running: refused \(\[failed_precondition\] cannot destroy running task\); exited: forgotten \(InspectTask: \[not_found\] task not found/)]);
      // The reference driver too.
      const ref = byName(await runConformance({ plugin: rawexec, cgroupParent, checks: ["destroy-no-force"], ...generous }))["destroy-no-force"]!;
      expect([ref.status, ref.message]).toEqual(["pass", expect.stringMatching(/^running: refused \(\[failed_precondition\] cannot destroy running task .*\); exited: forgotten/)]);
    },
    180_000,
  );

  it(
    "reports TaskStats samples sent faster than the collection interval",
    async () => {
      const report = await run(modesRaw, "stats-flood", ["task-stats"]);
      const row = byName(report)["task-stats"]!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toMatch(/samples \d+ ms apart, want at least 100 ms \(half the collection_interval of 200 ms\)/);
    },
    120_000,
  );

  it(
    "fails a TaskStats stub that claims to measure CPU percent and always reports 0 % (the default task is idle)",
    async () => {
      const report = await run(modesDriver, "stats-zero", ["task-stats"]);
      const row = byName(report)["task-stats"]!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toMatch(
        /^a task burning CPU \(pid \d+, a busy shell loop\) ran for [\d.]+s and TaskStats never showed it: percent stayed 0 in \d+ samples, though measured_fields lists it /,
      );
      // The fixture's real sampler (/proc) passes: each measure it lists (percent, user and system mode) shows the use.
      const good = byName(await run(modesDriver, "", ["task-stats"]))["task-stats"]!;
      expect(good.status, good.message).toBe("pass");
      expect(good.message).toMatch(/; a CPU-burning task showed percent [\d.]+, user_mode [\d.]+, system_mode [\d.]+$/);
    },
    120_000,
  );

  it(
    "fails a TaskStats stream that never sends a sample: the CPU-burning task's (it passed as 'CPU use not verified'), and the run's task's",
    async () => {
      const report = await run(modesDriver, "stats-burn-hang", ["task-stats"]);
      const row = byName(report)["task-stats"]!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toMatch(/^the TaskStats stream of the CPU-burning task sent 0 samples in [\d.]+s, want one every 200 ms$/);
      // The run's task's stream too, within the call deadline: said as such, not as a cancellation.
      const main = byName(await run(modesDriver, "stats-hang", ["task-stats"], { callTimeoutMs: 5_000 }))["task-stats"]!;
      expect([main.status, main.message]).toEqual(["fail", "the TaskStats stream sent 0 samples within the call deadline of 5000 ms, want 2, one every 200 ms"]);
    },
    120_000,
  );

  it(
    "fails recover, not a later check, for a RecoverTask that only records the task: signals must reach the running process",
    async () => {
      // The task's process runs on, its output grows and InspectTask says RUNNING: only control tells.
      // A 10 s call deadline bounds the wait for the signal line that never comes.
      const report = await run(modesDriver, "fake-recover", ["recover"], { callTimeoutMs: 10_000 });
      const row = byName(report).recover!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toMatch(/^after RecoverTask the plugin does not control the running task \(pid \d+\): timed out after 10000 ms waiting for the task to report SIGHUP /);
    },
    120_000,
  );

  it(
    "fails recover for a recovered task whose WaitTask answers at once while it runs",
    async () => {
      const report = await run(modesDriver, "recover-wait", ["recover"]);
      const row = byName(report).recover!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toMatch(/^WaitTask on the recovered task returned \(exit_code 0\), while the task's process \d+ still runs: Nomad would take the running task as exited$/);
    },
    120_000,
  );

  it(
    "passes recover for a driver whose plugin writes the stdout FIFO and reopens it in RecoverTask: Nomad's logmon reads it again",
    async () => {
      // The plugin's death is the FIFO's EOF. Nomad's task runner then calls RecoverTask and runs
      // logmon's Start, which reads each ended FIFO again: what the recovered plugin relays (at once,
      // in RecoverTask, and after) is collected under Nomad, so it is no lost output here either.
      const report = await run(relayDriver, "", ["recover"], { callTimeoutMs: 10_000 });
      const row = byName(report).recover!;
      expect(row.status, formatReport(report)).toBe("pass");
      expect(row.message).toMatch(/; task pid \d+ never stopped; SignalTask\(SIGHUP\) reached it; WaitTask pending$/);
      expect(report.ok, formatReport(report)).toBe(true);
    },
    120_000,
  );

  it(
    "reports a WaitTask that returns while the task still runs",
    async () => {
      const report = await run(modesDriver, "wait-early", ["inspect-task", "task-stats", "stop-task"]);
      const row = byName(report)["stop-task"]!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toContain("WaitTask returned (exit_code 0) before StopTask");
    },
    120_000,
  );

  it.each([
    ["fp-error", /the Fingerprint stream failed during .*runtime socket unreachable/],
    ["fp-close", /the Fingerprint stream ended during /],
  ])(
    "reports a Fingerprint stream that fails or ends after its first response (%s)",
    async (mode, message) => {
      const report = await run(modesRaw, mode, ["fingerprint", "task-stats", "fingerprint-stream", "shutdown"]);
      const rows = byName(report);
      expect(rows.fingerprint!.status, formatReport(report)).toBe("pass");
      expect(rows["fingerprint-stream"]!.status, formatReport(report)).toBe("fail");
      expect(rows["fingerprint-stream"]!.message).toMatch(message);
      expect(rows.shutdown!.status).toBe("pass");
    },
    120_000,
  );

  it(
    "reports a TaskEvents stream that ends before Shutdown, and events Nomad cannot route",
    async () => {
      // task-stats takes 200 ms at least: an end or an event sent as the task starts has arrived by then.
      const closed = await run(modesRaw, "ev-close", ["task-stats", "task-events", "shutdown"]);
      expect(byName(closed)["task-events"]!.status, formatReport(closed)).toBe("fail");
      expect(byName(closed)["task-events"]!.message).toMatch(/the TaskEvents stream ended during /);
      const noalloc = await run(modesRaw, "ev-noalloc", ["start-task", "task-stats", "task-events", "shutdown"]);
      expect(byName(noalloc)["task-events"]!.status, formatReport(noalloc)).toBe("fail");
      expect(byName(noalloc)["task-events"]!.message).toMatch(/^event 1 \("Started"\): alloc_id "" and task_name "" are not those of task /);
    },
    120_000,
  );

  it(
    "fails a driver that sends one fixed signal whatever SignalTask asks for (it passed with the default --signal SIGHUP)",
    async () => {
      const report = await run(modesDriver, "signal-fixed", ["signal-task"]);
      const row = byName(report)["signal-task"]!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toBe("SignalTask asked for SIGUSR1, the task received SIGHUP: the driver must send the signal Nomad names");
      const good = byName(await run(modesDriver, "", ["signal-task"]))["signal-task"]!;
      expect([good.status, good.message]).toEqual(["pass", "the task received SIGHUP, SIGUSR1, SIGUSR2, each as sent"]);
    },
    120_000,
  );

  it("the default task traps the signal option plus SIGUSR1 and SIGUSR2, once each", () => {
    expect(defaultTaskSignals("SIGHUP")).toEqual(["SIGHUP", "SIGUSR1", "SIGUSR2"]);
    expect(defaultTaskSignals("usr2")).toEqual(["SIGUSR2", "SIGUSR1"]);
    expect(defaultTaskSignals("15")).toEqual(["SIGTERM", "SIGUSR1", "SIGUSR2"]);
    const script = (defaultTaskConfig("/bin/sh", "SIGINT").args as string[])[1];
    expect(script).toMatch(/^trap 'echo conformance-signal INT' INT; trap 'echo conformance-signal USR1' USR1; trap 'echo conformance-signal USR2' USR2; /);
  });

  it(
    "with requireTaskEvents, fails a driver that sends no TaskEvent (optional otherwise); one that does passes, on a task of the check's own when none ran",
    async () => {
      // Only task-events (and init): no task ran, the check starts one. A 5 s deadline bounds the wait.
      const none = await run(modesDriver, "ev-none", ["task-events"], { requireTaskEvents: true, callTimeoutMs: 5_000 });
      const row = byName(none)["task-events"]!;
      expect(row.status, formatReport(none)).toBe("fail");
      expect(row.message).toBe(
        "no TaskEvent within 5000 ms for the 1 task(s) the driver ran, and requireTaskEvents (--require-task-events) wants at least one (Nomad shows them in the task's events)",
      );
      const optional = byName(await run(modesDriver, "ev-none", ["task-events"]))["task-events"]!;
      expect([optional.status, optional.message]).toEqual(["pass", "open, 0 event(s) received"]);
      const sends = await run(modesDriver, "", ["task-events"], { requireTaskEvents: true });
      expect(byName(sends)["task-events"], formatReport(sends)).toMatchObject({ status: "pass", message: 'open, 1 event(s) received, the first "Started"' });
      // The reference driver reports each task it starts.
      const ref = await runConformance({ plugin: rawexec, requireTaskEvents: true, cgroupParent, checks: ["start-task", "task-events"], ...generous });
      expect(byName(ref)["task-events"]!.status, formatReport(ref)).toBe("pass");
      expect(byName(ref)["task-events"]!.message).toMatch(/^open, 1 event\(s\) received, the first "Started \/bin\/sh \(pid \d+\) under executor \d+"$/);
    },
    180_000,
  );

  it.each([
    ["destroy-task", "inspect-panic", /^InspectTask of the destroyed task: the plugin process exited with status 2 during destroy-task; last log lines: panic: runtime error: invalid memory address/],
    ["destroy-force", "inspect-panic", /^InspectTask of the destroyed task: the plugin process exited with status 2 during destroy-force; last log lines: panic: runtime error: invalid memory address/],
    ["destroy-task", "inspect-hang", /^InspectTask of the destroyed task did not answer: .*no answer within 5000 ms/],
  ])(
    "%s fails a driver whose InspectTask of the forgotten task crashes or hangs (%s), not only one that still knows it",
    async (check, mode, message) => {
      const report = await run(modesRaw, mode, [check], { callTimeoutMs: 5_000 });
      const row = byName(report)[check]!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toMatch(message);
      expect(report.ok).toBe(false);
      // The same check passes the fixture without the bug: it refuses the unknown task with an error status.
      const good = byName(await run(modesRaw, "", [check]))[check]!;
      expect([good.status, good.message]).toEqual(["pass", check === "destroy-task" ? "InspectTask: [unknown] task not found" : "forgotten"]);
    },
    120_000,
  );

  it(
    "inspect-task fails a started_at that is Go's zero time, as inspect-exited fails such a completed_at",
    async () => {
      const report = await run(modesRaw, "start-zero", ["inspect-task"]);
      expect(byName(report)["inspect-task"], formatReport(report)).toMatchObject({ status: "fail", message: "started_at is not set" });
      const good = byName(await run(modesRaw, "", ["inspect-task"]))["inspect-task"]!;
      expect(good.status, good.message).toBe("pass");
    },
    120_000,
  );

  it(
    "bad-config fails a StartTask that never answers a config it cannot decode (only a refusal is a clean failure)",
    async () => {
      const report = await run(modesRaw, "start-hang", ["bad-config"], { callTimeoutMs: 5_000 });
      const row = byName(report)["bad-config"]!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toMatch(/^StartTask did not answer the malformed config: .*no answer within 5000 ms/);
      // The reference driver refuses it at once.
      const good = await runConformance({ plugin: rawexec, cgroupParent, checks: ["bad-config"], ...generous });
      expect(byName(good)["bad-config"]!.status, formatReport(good)).toBe("pass");
    },
    120_000,
  );

  it(
    "reports a StopTask that never kills a task ignoring the stop signal once the timeout passes",
    async () => {
      const report = await run(modesDriver, "no-escalate", ["stop-timeout"]);
      const row = byName(report)["stop-timeout"]!;
      expect(row.status, formatReport(report)).toBe("fail");
      expect(row.message).toMatch(/^the task \(pid \d+\) ignores INT, TERM and HUP and still runs 11\.0s after StopTask\(timeout 1 s\): the driver never killed it$/);
      // Without the bug the fixture escalates after the timeout: the check passes.
      const good = await run(modesDriver, "", ["stop-timeout"]);
      expect(byName(good)["stop-timeout"]!.status, formatReport(good)).toBe("pass");
    },
    120_000,
  );
});
