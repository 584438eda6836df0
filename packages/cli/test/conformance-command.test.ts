// `nomadkit conformance`: the suite from a shell, against the reference driver (exit 0) and a
// deliberately broken plugin (exit 1), plus flag errors that name the flag.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { sweepTestCgroups } from "../../client/test/cgroup-fixtures.js";
import { alive, descendants, until } from "./processes.js";
import { TEST_CGROUP_PARENT, withTestCgroupParent } from "./test-cgroups.js";

const bin = fileURLToPath(new URL("../bin/nomadkit.js", import.meta.url));
const rawexec = fileURLToPath(new URL("../../../examples/rawexec-driver/bin/nomadkit-rawexec", import.meta.url));
const direct = fileURLToPath(new URL("../../conformance/test/fixtures/direct-driver.mjs", import.meta.url));
const broken = fileURLToPath(new URL("../../conformance/test/fixtures/broken-driver.mjs", import.meta.url));

function nomadkit(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [bin, "--log-level", "off", ...withTestCgroupParent(args)], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr })));
}

afterAll(() => {
  // The suite removes every task's cgroup, however the run ended.
  if (process.getuid?.() === 0) expect(sweepTestCgroups(TEST_CGROUP_PARENT), "task cgroups the runs left").toEqual([]);
});

describe("nomadkit conformance", () => {
  it("checks --memory-max against the kit's own default memory", async () => {
    const { DEFAULT_MEMORY_MB } = await import("@nomadkit/conformance");
    const { KIT_MEMORY_MB } = await import("../src/commands/conformance.js");
    expect(KIT_MEMORY_MB).toBe(DEFAULT_MEMORY_MB);
  });

  it(
    "Ctrl-C stops the run, cleans up what it started, and exits 130",
    async () => {
      const child = spawn(process.execPath, [bin, "--log-level", "off", ...withTestCgroupParent(["conformance", rawexec])], {
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, NO_COLOR: "1" },
      });
      let stdout = "";
      let stderr = "";
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      const below = new Set<number>();
      // Interrupt once a task runs (start-task passed), noting every process the run has started.
      await new Promise<void>((resolve) =>
        child.stdout.on("data", (d: Buffer) => {
          stdout += d.toString();
          for (const p of descendants(child.pid!)) below.add(p);
          if (/^start-task +PASS/m.test(stdout)) resolve();
        }),
      );
      for (const p of descendants(child.pid!)) below.add(p);
      expect(below.size).toBeGreaterThan(0);
      child.kill("SIGINT");
      const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
      expect(code, stdout + stderr).toBe(130);
      expect(stdout).toMatch(/ — INTERRUPTED\n$/);
      for (const p of below) await until(() => !alive(p));
    },
    180_000,
  );

  it("refuses a --cgroup-parent that is not below the root before launching the plugin (not the driver's failure)", async () => {
    for (const parent of ["/", "../x"]) {
      const r = await nomadkit(["conformance", rawexec, "--cgroup-parent", parent]);
      expect(r.stderr).toBe(`nomadkit: --cgroup-parent ${JSON.stringify(parent)}: must name a cgroup below the root, without ".."\n`);
      expect(r.stdout).toBe("");
      expect(r.code).toBe(1);
    }
  });

  it("refuses task resources Nomad would refuse, naming the flag, before launching the plugin", async () => {
    const cases: [string[], string][] = [
      [["--memory-max", "100"], `--memory-max 100: below the task's memory, 128 MB (the default); Nomad refuses it: "MemoryMaxMB value (100) should be larger than MemoryMB value (128)"`],
      [["--cpu", "500", "--cores", "0"], `--cpu and --cores: a task asks for one or the other; Nomad refuses both: "Task can only ask for 'cpu' or 'cores' resource, not both."`],
      [["--memory", "big"], '--memory "big": expected a whole number of MB'],
      [["--cores", "1,x"], '--cores "1,x": "x" is not a CPU number or a low-high span (a cpuset list such as 0-1,3)'],
      [["--cores", "0", "--no-task-cgroup"], "--cores 0: reserved cores need the tasks' cgroups, which --no-task-cgroup turns off"],
    ];
    for (const [flags, message] of cases) {
      const r = await nomadkit(["conformance", rawexec, ...flags]);
      expect([r.code, r.stdout, r.stderr], flags.join(" ")).toEqual([1, "", `nomadkit: ${message}\n`]);
    }
  });

  it.skipIf(process.getuid?.() !== 0)(
    "--cores and --memory reach the tasks; where the host cannot make their cgroups (not root), start-task fails saying why",
    async (ctx) => {
      const usable = readFileSync(existsSync("/sys/fs/cgroup/cgroup.controllers") ? "/sys/fs/cgroup/cpuset.cpus.effective" : "/sys/fs/cgroup/cpuset/cpuset.cpus", "utf8").trim();
      const last = /(\d+)$/.exec(usable)![1]!;
      if (usable === last) return ctx.skip("one CPU: nothing to reserve apart");
      const args = ["conformance", rawexec, "--cores", last, "--memory", "64", "--memory-max", "96", "--checks", "start-task", "--shutdown-timeout", "15000"];
      const r = await nomadkit(args);
      expect(r.code, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toMatch(/^start-task +PASS .*cpuset_cgroup \/sys\/fs\/cgroup\/\S+\/reserve(\.slice)?\/\S+, the task runs in it/m);
      // As nobody: the kit cannot make the task's cgroup, which reserved cores need.
      const nobody = spawnSync(process.execPath, [bin, "--log-level", "off", ...withTestCgroupParent(args)], {
        cwd: "/",
        uid: 65534,
        gid: 65534,
        env: { ...process.env, NO_COLOR: "1", TMPDIR: "/tmp" },
        encoding: "utf8",
        timeout: 120_000,
      });
      expect(nobody.status, nobody.stdout + nobody.stderr).toBe(1);
      expect(nobody.stdout).toMatch(new RegExp(`^start-task +FAIL .*cores ${last}: reserved cores need the task's cgroup, which this host cannot make: not root: EACCES`, "m"));
    },
    180_000,
  );

  it("--list names every check", async () => {
    const r = await nomadkit(["conformance", "--list"]);
    expect(r.code).toBe(0);
    for (const name of ["handshake", "exec-streaming-tty", "recover", "network", "shutdown"]) expect(r.stdout).toMatch(new RegExp(`^${name} `, "m"));
  });

  it(
    "prints a PASS table and exits 0 for the reference driver",
    async () => {
      const r = await nomadkit(["conformance", rawexec, "--checks", "exec-streaming,stop-task", "--shutdown-timeout", "15000"]);
      expect(r.code, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toMatch(/^CHECK +STATUS +TIME +MESSAGE$/m);
      expect(r.stdout).toMatch(/^exec-streaming +PASS /m);
      expect(r.stdout).toMatch(/^stop-task +PASS /m);
      expect(r.stdout).toMatch(/0 failed, 0 skipped in .* — CONFORMS\n$/);
    },
    180_000,
  );

  it(
    "exits 1 and shows the failure for a broken plugin (.mjs files run with this node)",
    async () => {
      const r = await nomadkit(["conformance", broken, "--checks", "exec-streaming", "--shutdown-timeout", "15000"]);
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(/^exec-streaming +FAIL .*2 exited messages/m);
      expect(r.stdout).toMatch(/DOES NOT CONFORM\n$/);
    },
    180_000,
  );

  it(
    "--require-task-events fails a driver that sends no TaskEvent",
    async () => {
      // The broken fixture never sends one; without the flag task-events passes.
      const args = ["conformance", broken, "--checks", "task-events", "--call-timeout", "5000", "--shutdown-timeout", "15000"];
      const required = await nomadkit([...args, "--require-task-events"]);
      expect(required.code, required.stdout + required.stderr).toBe(1);
      expect(required.stdout).toMatch(/^task-events +FAIL .*no TaskEvent within 5000 ms for the 1 task\(s\) the driver ran/m);
      const optional = await nomadkit(args);
      expect(optional.code, optional.stdout + optional.stderr).toBe(0);
      expect(optional.stdout).toMatch(/^task-events +PASS /m);
    },
    180_000,
  );

  it(
    "--task-config without --signal signals the task with SIGCONT, which it survives; --signal still picks",
    async () => {
      const args = ["conformance", direct, "--task-config", '{"command":"/bin/sleep","args":["600"]}', "--checks", "signal-task,stop-task", "--shutdown-timeout", "15000"];
      const r = await nomadkit(args);
      expect(r.code, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toMatch(/^signal-task +PASS .*SIGCONT sent/m);
      expect(r.stdout).toMatch(/^stop-task +PASS /m);
      const chosen = await nomadkit([...args, "--checks", "signal-task", "--signal", "USR1"]);
      expect(chosen.stdout, chosen.stderr).toMatch(/^signal-task +PASS .*SIGUSR1 sent/m);
    },
    180_000,
  );

  it(
    "--json prints the report",
    async () => {
      const r = await nomadkit(["conformance", broken, "--checks", "plugin-info", "--json"]);
      expect(r.code).toBe(0);
      const report = JSON.parse(r.stdout) as { ok: boolean; results: { name: string; status: string }[] };
      expect(report.ok).toBe(true);
      expect(report.results.map((x) => `${x.name}:${x.status}`)).toEqual(["handshake:pass", "plugin-info:pass"]);
    },
    120_000,
  );

  it("warns that Nomad could not start a .mjs driver without an exec bit or a #! line (this CLI runs it with its own Node)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-noexec-"));
    try {
      const copy = join(dir, "driver.mjs");
      // A driver module without a #! line and without the exec bit.
      writeFileSync(copy, `import ${JSON.stringify(direct)};\n`, { mode: 0o644 });
      const r = await nomadkit(["conformance", copy, "--checks", "handshake"]);
      expect(r.stderr).toContain(`nomadkit: warning: ${copy}: it is not executable (chmod +x ${copy}): Nomad skips it in plugin_dir\n`);
      expect(r.stderr).toContain(`nomadkit: warning: ${copy}: it has no #! line (#!/usr/bin/env node): Nomad runs it directly, which fails\n`);
      const plain = await nomadkit(["conformance", rawexec, "--checks", "handshake"]);
      expect(plain.stderr).not.toContain("warning");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it("names the flag or file at fault", async () => {
    const badJson = await nomadkit(["conformance", rawexec, "--plugin-config", "{nope"]);
    expect(badJson.code).toBe(1);
    expect(badJson.stderr).toMatch(/^nomadkit: --plugin-config: "\{nope" is neither a file nor valid JSON/);
    const noFile = await nomadkit(["conformance", rawexec, "--task-config", "/no/such/task.json"]);
    expect(noFile.stderr).toContain("--task-config /no/such/task.json: no such file");
    const noPlugin = await nomadkit(["conformance", "./no-such-plugin"]);
    expect(noPlugin.code).toBe(1);
    expect(noPlugin.stderr).toContain("plugin ./no-such-plugin: no such file");
    const badCheck = await nomadkit(["conformance", rawexec, "--checks", "bogus"]);
    expect(badCheck.stderr).toBe('nomadkit: --checks: unknown check "bogus" (see --list)\n');
    expect(badCheck.stdout).toBe(""); // refused before the report's header
    // An empty selection is refused, not taken for "every check".
    const noCheck = await nomadkit(["conformance", rawexec, "--checks", " , "]);
    expect([noCheck.code, noCheck.stdout, noCheck.stderr]).toEqual([1, "", 'nomadkit: --checks: no check named in " , " (see --list)\n']);
    const badTimeout = await nomadkit(["conformance", rawexec, "--call-timeout", "soon"]);
    expect(badTimeout.stderr).toContain('--call-timeout "soon"');
    const array = await nomadkit(["conformance", rawexec, "--plugin-config", "[1]"]);
    expect(array.stderr).toBe("nomadkit: --plugin-config: expected a JSON object, got an array\n");
    const signal = await nomadkit(["conformance", rawexec, "--signal", "BOGUS"]);
    expect(signal.code).toBe(1);
    expect(signal.stderr).toBe('nomadkit: --signal "BOGUS": not a signal (a name such as SIGHUP, or a number)\n');
    // Values that would make a working driver fail: refused before anything runs.
    for (const untrappable of ["KILL", "9", "stop"]) {
      const r = await nomadkit(["conformance", rawexec, "--signal", untrappable]);
      expect([untrappable, r.code, r.stdout]).toEqual([untrappable, 1, ""]);
      expect(r.stderr).toMatch(/^nomadkit: --signal ".*": SIG(KILL|STOP) cannot be trapped/);
    }
    const shell = await nomadkit(["conformance", rawexec, "--exec-shell", ""]);
    expect(shell.stderr).toBe("nomadkit: --exec-shell: must name a shell (the default task runs under it)\n");
  });
});
