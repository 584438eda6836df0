// The nomadkit binary against a real test plugin (the go-plugin fixture driver of @nomadkit/server).
import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { removeCgroupTree, sweepTestCgroups, testCgroups, v2Host } from "../../client/test/cgroup-fixtures.js";
import { alive, bytesWritten, descendants, grownTo, peakRss, until, withEnv } from "./processes.js";
import { TEST_CGROUP_PARENT, withTestCgroupParent } from "./test-cgroups.js";

const bin = fileURLToPath(new URL("../bin/nomadkit.js", import.meta.url));
const driver = fileURLToPath(
  new URL(
    "../../server/test/fixtures/goplugin/test-driver.mjs",
    import.meta.url,
  ),
);
/** A driver whose tasks are its own children; DIRECT_DRIVER_STOP_LOG records what StopTask asked for. */
const direct = fileURLToPath(
  new URL(
    "../../conformance/test/fixtures/direct-driver.mjs",
    import.meta.url,
  ),
);
/** A driver with one bug chosen by BUG_MODE (the conformance kit's negative tests). */
const modes = fileURLToPath(
  new URL(
    "../../conformance/test/fixtures/modes-driver.mjs",
    import.meta.url,
  ),
);
/** The reference driver: it runs tasks in <alloc_dir>/<task>, which Nomad creates. */
const rawexec = fileURLToPath(
  new URL(
    "../../../examples/rawexec-driver/bin/nomadkit-rawexec",
    import.meta.url,
  ),
);

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A running nomadkit process whose output can be awaited. */
function start(args: string[], input?: string, env?: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, [bin, ...withTestCgroupParent(args)], {
    cwd: dir,
    stdio: ["pipe", "pipe", "pipe"],
    env: env && { ...process.env, ...env },
  });
  let stdout = "";
  let stderr = "";
  const waiters: { test: () => boolean; resolve: () => void }[] = [];
  const poke = () => {
    for (const w of waiters.splice(0))
      (w.test() ? w.resolve : () => waiters.push(w))();
  };
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString();
    poke();
  });
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
    poke();
  });
  if (input !== undefined) child.stdin.end(input);
  let closed = false;
  const done = new Promise<Result>((resolve) =>
    child.once("close", (code) => {
      closed = true;
      resolve({ code, stdout, stderr });
      poke();
    }),
  );
  return {
    child,
    done,
    // Rejects if nomadkit exits first, so a failing start does not hang the test.
    stderrMatch: (re: RegExp) =>
      new Promise<RegExpMatchArray>((resolve, reject) => {
        const test = () => re.test(stderr) || closed;
        const w = {
          test,
          resolve: () => {
            const m = re.exec(stderr);
            if (m) resolve(m);
            else
              reject(
                new Error(
                  `nomadkit exited before printing ${re}; stderr:\n${stderr}`,
                ),
              );
          },
        };
        if (test()) w.resolve();
        else waiters.push(w);
      }),
  };
}

const nomadkit = (...args: string[]): Promise<Result> => start(args).done;

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "nk-cli-"));
  writeFileSync(join(dir, "agent.json"), "{}");
  writeFileSync(
    join(dir, "task.json"),
    JSON.stringify({
      command: "sh",
      args: ["-c", "echo hello; echo oops >&2; exit 3"],
    }),
  );
  writeFileSync(
    join(dir, "long.json"),
    JSON.stringify({ command: "sleep", args: ["300"] }),
  );
  writeFileSync(join(dir, "broken.json"), "{ not json");
  writeFileSync(join(dir, "array.json"), "[1]");
  writeFileSync(join(dir, "not-executable"), "#!/bin/sh\n");
  chmodSync(join(dir, "not-executable"), 0o644);
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  // Every run removes its task's cgroup, however it ended.
  if (process.getuid?.() === 0) expect(sweepTestCgroups(TEST_CGROUP_PARENT), "task cgroups the runs left").toEqual([]);
});

describe("nomadkit", () => {
  it("--help lists the commands and examples", async () => {
    const r = await nomadkit("--help");
    expect(r.code).toBe(0);
    for (const c of [
      "info",
      "fingerprint",
      "capabilities",
      "run",
      "exec",
      "stats",
    ])
      expect(r.stdout).toContain(c);
    expect(r.stdout).toContain("Examples");
    // Installed in a project (the usual case), the binary is not on PATH.
    expect(r.stdout).toContain("npx nomadkit");
  });

  it("run --help gives --kill-signal's default once", async () => {
    const r = await nomadkit("run", "--help");
    expect(r.code).toBe(0);
    const help = r.stdout.replace(/\s+/g, " ");
    expect(help).toContain('default "" (none, as in a job without kill_signal');
    expect(help).not.toContain('(default: "")');
  });

  it("info prints PluginInfo", async () => {
    const r = await nomadkit("info", driver);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("name: test-driver");
    expect(r.stdout).toContain("type: DRIVER");
    const j = await nomadkit("info", driver, "--json");
    expect(JSON.parse(j.stdout)).toMatchObject({
      name: "test-driver",
      pluginApiVersions: ["v0.1.0"],
      pluginVersion: "0.1.0",
    });
  });

  it("capabilities and fingerprint", async () => {
    const caps = await nomadkit("capabilities", driver, "--json");
    expect(caps.code).toBe(0);
    expect(JSON.parse(caps.stdout)).toMatchObject({
      sendSignals: true,
      exec: true,
    });
    const fp = await nomadkit(
      "fingerprint",
      driver,
      "--config",
      join(dir, "agent.json"),
    );
    expect(fp.code).toBe(0);
    expect(fp.stdout).toContain("health: HEALTHY");
    expect(fp.stdout).toContain("driver.test");
    // A Fingerprint stream that ends without a message is the driver's fault, not a success.
    const empty = spawnSync(process.execPath, [bin, "fingerprint", driver], {
      cwd: dir,
      encoding: "utf8",
      env: { ...process.env, TEST_PLUGIN_MODE: "empty-streams" },
    });
    expect(empty.status).toBe(1);
    expect(empty.stderr).toBe(`nomadkit: plugin ${driver}: Driver.Fingerprint ended without sending a fingerprint\n`);
  });

  it("fingerprint gives up on a driver that never sends its first fingerprint, naming the bound", () => {
    // It waited for good (only Ctrl-C ended it); Nomad goes on without such a driver after 50 s.
    const r = spawnSync(process.execPath, [bin, "fingerprint", driver, "--call-timeout", "1500"], {
      cwd: dir,
      encoding: "utf8",
      env: { ...process.env, TEST_PLUGIN_MODE: "silent-fingerprint" },
      timeout: 45_000,
    });
    expect(r.signal, "still waiting 45 s later").toBeNull();
    expect(r.stderr).toBe(
      `nomadkit: plugin ${driver}: Driver.Fingerprint sent no fingerprint within 1500 ms (Nomad waits 50 s for a driver's first; --call-timeout sets this bound)\n`,
    );
    expect(r.status).toBe(1);
  });

  it("fingerprint --watch: a stream that ends after its first fingerprint is the driver's fault, not the end of the watch", async () => {
    const modes = fileURLToPath(new URL("../../conformance/test/fixtures/modes-raw.mjs", import.meta.url));
    // fp-close: one HEALTHY fingerprint, then the stream ends (Nomad takes that for a lost driver).
    const r = spawnSync(process.execPath, [bin, "fingerprint", modes, "--watch"], {
      cwd: dir,
      encoding: "utf8",
      env: { ...process.env, BUG_MODE: "fp-close" },
    });
    expect(r.stdout).toContain("health: HEALTHY");
    expect(r.stderr).toBe(
      `nomadkit: plugin ${modes}: Driver.Fingerprint ended after 1 fingerprint(s); a driver keeps the stream open (Nomad takes its end for a lost driver)\n`,
    );
    expect(r.status).toBe(1);
  });

  it("fingerprint says a health of UNDETECTED (the enum's zero value, which proto3 JSON leaves out)", () => {
    const modes = fileURLToPath(new URL("../../conformance/test/fixtures/modes-raw.mjs", import.meta.url));
    for (const json of [false, true]) {
      const r = spawnSync(process.execPath, [bin, "fingerprint", modes, ...(json ? ["--json"] : [])], {
        cwd: dir,
        encoding: "utf8",
        env: { ...process.env, BUG_MODE: "fp-undetected" },
      });
      expect(r.status).toBe(0);
      if (json) expect(JSON.parse(r.stdout)).toEqual({ health: "UNDETECTED" });
      else expect(r.stdout).toBe("health: UNDETECTED\n");
    }
  });

  it("a plugin that never answers a set-up call fails it after --call-timeout", async () => {
    const t0 = Date.now();
    const r = spawnSync(process.execPath, [bin, "--call-timeout", "300", "info", driver], {
      cwd: dir,
      encoding: "utf8",
      env: { ...process.env, TEST_PLUGIN_MODE: "silent-info" },
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`nomadkit: plugin ${driver}: BasePlugin.PluginInfo did not answer in time (--call-timeout;`);
    expect(Date.now() - t0).toBeLessThan(20_000); // not the 30 s default
    const bad = spawnSync(process.execPath, [bin, "--call-timeout", "soon", "info", driver], { cwd: dir, encoding: "utf8" });
    expect(bad.stderr).toBe('nomadkit: --call-timeout "soon": expected a positive number of milliseconds\n');
  });

  it("a timeout longer than a Node timer holds is refused, naming the flag (it would expire at once)", async () => {
    const cases: [string, string, string[]][] = [
      ["--start-timeout", "2147483648", ["info", driver]],
      ["--call-timeout", "1e12", ["info", driver]],
      ["--start-timeout", "3e9", ["conformance", driver, "--checks", "handshake"]],
    ];
    for (const [flag, value, command] of cases) {
      const r = await nomadkit(flag, value, ...command);
      expect(r.stderr).toBe(`nomadkit: ${flag} "${value}": at most 2147483647 milliseconds (about 24.8 days)\n`);
      expect(r.code).toBe(1);
    }
  });

  it("run starts a task, streams its output and exits with its status", async () => {
    const r = await nomadkit(
      "run",
      driver,
      "--config",
      join(dir, "agent.json"),
      "--task-config",
      join(dir, "task.json"),
    );
    expect(r.stdout).toBe("hello\n");
    expect(r.stderr).toContain("oops\n");
    expect(r.stderr).toMatch(/started task [0-9a-f-]+\/task\/[0-9a-f]+/);
    expect(r.stderr).toContain("task exited with code 3");
    expect(r.code).toBe(3);
  });

  it("run warns of output written to a FIFO after every writer closed it (Nomad's logmon would lose it), and does not block its writer", async () => {
    // The driver appends each chunk of the task's stdout with an open and a close of its own: "two"
    // comes a second after "one", long after the FIFO's EOF. The run used to stop reading there,
    // and the driver's (blocking) open of "two" froze the plugin: the run never ended.
    const task = join(dir, "reopen-task.json");
    writeFileSync(task, JSON.stringify({ command: "/bin/sh", args: ["-c", "echo one; sleep 1; echo two"] }));
    const run = start(["run", modes, "--task-config", task, "--name", "web", "--no-task-cgroup"], undefined, { BUG_MODE: "log-reopen" });
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<"hung">((r) => (timer = setTimeout(() => r("hung"), 30_000)));
    const r = await Promise.race([run.done, bound]);
    clearTimeout(timer);
    if (r === "hung") {
      // The frozen plugin (and its task) first: the run's clean-up would wait for it in vain.
      for (const pid of descendants(run.child.pid!)) process.kill(pid, "SIGKILL");
      run.child.kill("SIGTERM");
      await run.done;
    }
    expect(r, "the run did not end").not.toBe("hung");
    const { code, stdout, stderr } = r as Result;
    expect(code, stderr).toBe(0);
    // As under Nomad: only what came before the EOF is collected.
    expect(stdout).toBe("one\n");
    expect(stderr).toMatch(/nomadkit: warning: 4 bytes were written to \S+\/alloc\/logs\/\.web\.stdout\.fifo after every writer had closed it: Nomad's logmon would never collect it/);
    expect(stderr).toContain("task exited with code 0");
  }, 60_000);

  it("run prepares the task's directories as Nomad does (reference driver)", async () => {
    const task = join(dir, "rawexec-task.json");
    writeFileSync(
      task,
      JSON.stringify({
        command: "/bin/sh",
        args: [
          "-c",
          'pwd; echo "$NOMAD_TASK_DIR $NOMAD_SECRETS_DIR $NOMAD_ALLOC_DIR"; touch "$NOMAD_TASK_DIR/x" "$NOMAD_SECRETS_DIR/x" "$NOMAD_ALLOC_DIR/data/x" && echo written; echo "$NOMAD_JOB_NAME $NOMAD_GROUP_NAME $NOMAD_MEMORY_LIMIT $NOMAD_CPU_LIMIT $FROM_FLAG"; echo oops >&2; exit 4',
        ],
      }),
    );
    const r = await nomadkit("run", rawexec, "--task-config", task, "--name", "web", "--env", "FROM_FLAG=yes");
    expect(r.code, r.stderr).toBe(4);
    const [pwd, vars, written, job] = r.stdout.split("\n");
    // Nomad's variables for the job and the default task resources (100 MHz, 300 MB).
    expect(job).toBe("nomadkit-run web 300 100 yes");
    expect(pwd).toMatch(/\/nomadkit-run-[^/]+\/web$/);
    expect(vars).toBe(`${pwd}/local ${pwd}/secrets ${pwd!.replace(/web$/, "alloc")}`);
    expect(written).toBe("written");
    expect(r.stderr).toContain("oops\n");
    expect(r.stderr).toContain("task exited with code 4");
  }, 60_000);

  it.skipIf(process.getuid?.() !== 0)(
    "run gives the task a cgroup as Nomad's client does and removes it after DestroyTask; --no-task-cgroup does not (reference driver, root)",
    async () => {
      const task = join(dir, "cgroup-task.json");
      writeFileSync(task, JSON.stringify({ command: "/bin/sh", args: ["-c", 'cat /proc/self/cgroup; echo "parent=$NOMAD_PARENT_CGROUP"'] }));
      const parent = `nomadkit-test-${process.pid}-run`;
      const r = await nomadkit("run", rawexec, "--task-config", task, "--name", "web", "--cgroup-parent", parent);
      const [, path] = /started task \S+ \(cpuset_cgroup (\S+)\)/.exec(r.stderr) ?? [];
      try {
        expect(r.code, r.stderr).toBe(0);
        // The executor joined it: the task's own view of its cgroups.
        if (v2Host) {
          expect(path).toMatch(new RegExp(`^/sys/fs/cgroup/${parent}/share\\.slice/[0-9a-f-]+\\.web\\.scope$`));
          expect(r.stdout).toContain(`0::${path!.slice("/sys/fs/cgroup".length)}\n`);
        } else {
          // Nomad's: the cpuset cgroup every task without reserved cores shares, and the task's own freezer one.
          expect(path).toBe(`/sys/fs/cgroup/cpuset/${parent}/share`);
          expect(r.stdout).toContain(`:cpuset:${path!.slice("/sys/fs/cgroup/cpuset".length)}\n`);
          expect(r.stdout).toMatch(new RegExp(`:freezer:/${parent}/[0-9a-f-]+\\.web\n`));
        }
        expect(r.stdout).toContain(`parent=${parent}\n`); // NOMAD_PARENT_CGROUP, Nomad's cgroup_parent
        // Gone after DestroyTask, with the parent levels the run made.
        expect(existsSync(path!)).toBe(false);
        expect(testCgroups(parent)).toEqual([]);
      } finally {
        for (const d of testCgroups(parent)) removeCgroupTree(d);
      }
      const off = await nomadkit("run", rawexec, "--task-config", task, "--no-task-cgroup", "--cgroup-parent", parent);
      expect(off.code, off.stderr).toBe(0);
      expect(off.stderr).toMatch(/started task \S+ \(no task cgroup \(--no-task-cgroup\)\)/);
      expect(off.stdout).not.toContain(parent);
      expect(off.stdout).toContain("parent=\n");
      expect(testCgroups(parent)).toEqual([]);
    },
    60_000,
  );

  it.skipIf(process.getuid?.() !== 0)(
    "run --cpu, --memory and --memory-max give the task those resources: its NOMAD_* limits and its cgroup's limits (reference driver, root)",
    async () => {
      // The task reads its own memory and cpu cgroups' limits, which the driver's executor wrote.
      const task = join(dir, "resources-task.json");
      const script = [
        'echo "$NOMAD_CPU_LIMIT $NOMAD_MEMORY_LIMIT $NOMAD_MEMORY_MAX_LIMIT"',
        "if [ -f /sys/fs/cgroup/cgroup.controllers ]; then d=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup); cat $d/memory.max $d/memory.low $d/cpu.weight",
        "else for c in memory cpu; do eval $c=/sys/fs/cgroup/$c$(sed -n \"s/^[0-9]*:[^:]*\\b$c\\b[^:]*://p\" /proc/self/cgroup); done; cat $memory/memory.limit_in_bytes $memory/memory.soft_limit_in_bytes $cpu/cpu.shares; fi",
      ].join("\n");
      writeFileSync(task, JSON.stringify({ command: "/bin/sh", args: ["-c", script] }));
      const r = await nomadkit("run", rawexec, "--task-config", task, "--cpu", "250", "--memory", "64", "--memory-max", "96");
      expect(r.code, r.stderr).toBe(0);
      const [vars, hard, soft, cpu] = r.stdout.split("\n");
      expect(vars).toBe("250 64 96");
      // memory_max is the hard limit, memory the soft one, as Nomad's executor writes them.
      expect(hard).toBe(String(96 * 1024 * 1024));
      expect(soft).toBe(String(64 * 1024 * 1024));
      // v2: cpu.weight from the shares, as Nomad's executor converts them (1 + (250 - 2) * 9999 / 262142).
      expect(cpu).toBe(v2Host ? "10" : "250");
    },
    60_000,
  );

  it.skipIf(process.getuid?.() !== 0)(
    "run --cores runs the task on those CPUs only, in its own cpuset cgroup of Nomad's reserve partition (reference driver, root)",
    async (ctx) => {
      const usable = readFileSync(v2Host ? "/sys/fs/cgroup/cpuset.cpus.effective" : "/sys/fs/cgroup/cpuset/cpuset.cpus", "utf8").trim();
      const last = Number(/(\d+)$/.exec(usable)![1]);
      if (usable === String(last)) return ctx.skip("one CPU: nothing to reserve apart");
      const task = join(dir, "cores-task.json");
      writeFileSync(task, JSON.stringify({ command: "/bin/sh", args: ["-c", 'echo "cores=$NOMAD_CPU_CORES"; grep Cpus_allowed_list /proc/self/status'] }));
      const r = await nomadkit("run", rawexec, "--task-config", task, "--name", "pinned", "--cores", String(last));
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toBe(`cores=${last}\nCpus_allowed_list:\t${last}\n`);
      const [, path] = /started task \S+ \(cpuset_cgroup (\S+)\)/.exec(r.stderr) ?? [];
      expect(path).toMatch(v2Host ? /\/reserve\.slice\/[0-9a-f-]+\.pinned\.scope$/ : /\/reserve\/[0-9a-f-]+\.pinned$/);
      expect(existsSync(path!)).toBe(false);
    },
    60_000,
  );

  it("refuses configs Nomad's decoder would refuse, naming the flag, the file and the key", async () => {
    const task = join(dir, "typo-task.json");
    writeFileSync(task, JSON.stringify({ command: "/bin/true", agrs: ["x"] }));
    const r = await nomadkit("run", rawexec, "--task-config", task);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`nomadkit: --task-config ${task}: "agrs" is not declared (declared: args, cgroup_v1_override, cgroup_v2_override, command, denied_envvars, oom_score_adj, work_dir)`);
    expect(r.stderr).not.toContain("started task");

    const none = await nomadkit("run", rawexec);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain('task config (no --task-config given): "command" is required');

    const agent = join(dir, "typo-agent.json");
    writeFileSync(agent, JSON.stringify({ create_netwrok: true }));
    const fp = await nomadkit("fingerprint", rawexec, "--config", agent);
    expect(fp.code).toBe(1);
    expect(fp.stderr).toContain(`nomadkit: --config ${agent}: "create_netwrok" is not declared (declared: create_network, denied_envvars, denied_host_gids, denied_host_uids, enabled)`);
  }, 60_000);

  it("run --state lets exec and stats reach the task; Ctrl-C stops it", async () => {
    const state = join(dir, "run-state.json");
    const run = start([
      "run",
      driver,
      "--task-config",
      join(dir, "long.json"),
      "--state",
      state,
    ]);
    const [, taskId] = await run.stderrMatch(/started task (\S+)/);
    // A command to paste: with the CLI installed in the project, `nomadkit` alone is not on PATH.
    const [, hint] = await run.stderrMatch(/wrote \S+; try: (.*)\n/);
    expect(hint).toBe(`npx nomadkit exec ${state} ${taskId} -it -- /bin/sh`);
    expect(JSON.parse(readFileSync(state, "utf8"))).toMatchObject({
      kind: "nomadkit-run-state",
      taskId,
    });

    const ex = await nomadkit(
      "exec",
      state,
      taskId!,
      "--",
      "sh",
      "-c",
      "echo in-task; echo to-stderr >&2; exit 7",
    );
    expect(ex.stdout).toBe("in-task\n");
    expect(ex.stderr).toContain("to-stderr");
    expect(ex.code).toBe(7);

    const cat = await start(
      ["exec", state, taskId!, "-i", "--", "cat"],
      "piped stdin\n",
    ).done;
    expect(cat.stdout).toBe("piped stdin\n");
    expect(cat.code).toBe(0);

    const stats = await nomadkit(
      "stats",
      state,
      taskId!,
      "--count",
      "2",
      "--interval",
      "100ms",
    );
    expect(stats.code).toBe(0);
    expect(stats.stdout.trim().split("\n")).toHaveLength(2);
    expect(stats.stdout).toContain("cpu 12.5%");
    expect(stats.stdout).toContain("rss 10.0 MiB");

    // Ctrl-C ends a stats or fingerprint watch with 128 + SIGINT, as `nomadkit --help` says.
    for (const args of [["stats", state, taskId!, "--interval", "50ms"], ["fingerprint", driver, "--watch"]]) {
      const watch = start(args);
      await new Promise<void>((resolve) => watch.child.stdout.once("data", () => resolve()));
      watch.child.kill("SIGINT");
      expect([args[0], (await watch.done).code]).toEqual([args[0], 130]);
    }

    // A second run may not take the state file while this run's plugin lives.
    const second = await nomadkit("run", driver, "--task-config", join(dir, "long.json"), "--state", state);
    expect(second.code).toBe(1);
    expect(second.stderr).toMatch(/--state .*: belongs to a run whose plugin \(pid \d+\) is still running; not overwriting it\n$/);
    expect(JSON.parse(readFileSync(state, "utf8"))).toMatchObject({ taskId });
    // One whose plugin's socket is gone is stale, whatever now runs under its pid (here pid 1).
    const stale = join(dir, "stale-state.json");
    writeFileSync(stale, JSON.stringify({ kind: "nomadkit-run-state", plugin: "p", taskId: "t", reattach: { pid: 1, network: "unix", address: join(dir, "gone.sock") } }));
    const over = start(["run", driver, "--task-config", join(dir, "long.json"), "--state", stale]);
    await over.stderrMatch(/wrote /);
    over.child.kill("SIGINT");
    expect((await over.done).code).toBe(143);

    run.child.kill("SIGINT");
    const r = await run.done;
    expect(r.stderr).toContain("stopping task");
    expect(r.stderr).toMatch(/task exited with code 143 \(signal 15\)/);
    expect(r.code).toBe(143);
    expect(existsSync(state)).toBe(false);
  });

  it("run --state removes, at its end, only its own state file (not one another run wrote there since)", async () => {
    const state = join(dir, "replaced-state.json");
    const run = start(["run", driver, "--task-config", join(dir, "long.json"), "--state", state]);
    await run.stderrMatch(/wrote /);
    const other = { kind: "nomadkit-run-state", plugin: "other", taskId: "someone-else", reattach: { pid: 1 } };
    writeFileSync(state, JSON.stringify(other)); // as another run would, had it been let
    run.child.kill("SIGINT");
    expect((await run.done).code).toBe(143);
    expect(JSON.parse(readFileSync(state, "utf8"))).toEqual(other);
    rmSync(state);
  });

  it("Ctrl-C stops the task with its --kill-signal, by default none (as Nomad for a job without kill_signal)", async () => {
    let runs = 0;
    const stops = async (...flags: string[]) => {
      const log = join(dir, `stops-${runs++}.jsonl`);
      const run = start(["run", direct, "--task-config", join(dir, "long.json"), ...flags], undefined, { DIRECT_DRIVER_STOP_LOG: log });
      await run.stderrMatch(/started task /);
      run.child.kill("SIGINT");
      const r = await run.done;
      expect(r.stderr).toContain("stopping task");
      return readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l) as unknown);
    };
    // @nomadkit/server tells the driver the signal was defaulted (and makes it SIGINT, as Nomad's executor does).
    expect(await stops()).toEqual([{ signal: "SIGINT", signalDefaulted: true }]);
    expect(await stops("--kill-signal", "SIGTERM")).toEqual([{ signal: "SIGTERM", signalDefaulted: false }]);
    // Nomad's executor looks the name up exactly: other spellings are sent as the canonical name.
    expect(await stops("--kill-signal", "term")).toEqual([{ signal: "SIGTERM", signalDefaulted: false }]);
    expect(await stops("--kill-signal", "10")).toEqual([{ signal: "SIGUSR1", signalDefaulted: false }]);
  }, 90_000);

  it("a StopTask that fails at Ctrl-C says so (the task runs on); a second Ctrl-C destroys the task", async () => {
    // The driver cannot record the stop (its log is a directory): StopTask fails.
    const run = start(["run", direct, "--task-config", join(dir, "long.json")], undefined, { DIRECT_DRIVER_STOP_LOG: dir });
    await run.stderrMatch(/started task /);
    run.child.kill("SIGINT");
    await run.stderrMatch(/nomadkit: plugin \S+: Driver\.StopTask failed: .*EISDIR/);
    run.child.kill("SIGINT");
    const r = await run.done;
    expect(r.stderr).toContain("task exited with code 137 (signal 9)");
    expect(r.code).toBe(137);
  }, 60_000);

  it("a third Ctrl-C exits (130) even when WaitTask never returns, stopping the plugin", async () => {
    const mark = `wait-forever-${process.pid}`;
    const tmp = mkdtempSync(join(tmpdir(), "nk-cli-tmp-"));
    const env = { TEST_PLUGIN_MODE: "wait-forever", NOMADKIT_TEST_MARK: mark, TMPDIR: tmp };
    const run = start(["run", driver, "--task-config", "long.json"], undefined, env);
    try {
      await run.stderrMatch(/started task /);
      run.child.kill("SIGINT");
      await run.stderrMatch(/stopping task /);
      run.child.kill("SIGINT");
      await run.stderrMatch(/destroying task /);
      run.child.kill("SIGINT");
      const r = await run.done;
      expect(r.stderr).toContain("nomadkit: SIGINT: stopping what was started");
      expect(r.code).toBe(130);
      await until(() => withEnv("NOMADKIT_TEST_MARK", mark).length === 0);
      // The allocation directory and the plugin's socket directory are gone too.
      expect(readdirSync(tmp)).toEqual([]);
    } finally {
      for (const pid of withEnv("NOMADKIT_TEST_MARK", mark)) process.kill(pid, "SIGKILL");
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it("exec -it forwards the terminal size and resizes, and propagates the exit code", async () => {
    const pty = await import("node-pty");
    const state = join(dir, "pty-state.json");
    const run = start([
      "run",
      driver,
      "--task-config",
      join(dir, "long.json"),
      "--state",
      state,
    ]);
    const [, taskId] = await run.stderrMatch(/started task (\S+)/);
    await run.stderrMatch(/wrote /);
    try {
      const term = pty.spawn(
        process.execPath,
        [
          bin,
          "exec",
          state,
          taskId!,
          "-it",
          "--",
          "sh",
          "-c",
          "printf 'x\\ny\\n'; read line; echo got:$line; exit 5",
        ],
        {
          cols: 100,
          rows: 40,
          cwd: dir,
        },
      );
      let out = "";
      term.onData((d) => (out += d));
      const exit = new Promise<number>((resolve) =>
        term.onExit((e) => resolve(e.exitCode)),
      );
      // Resolves once `s` was printed; fails if nomadkit exits without printing it.
      const seen = (s: string) =>
        Promise.race([
          new Promise<void>((resolve) => {
            if (out.includes(s)) return resolve();
            const d = term.onData(() => {
              if (out.includes(s)) {
                d.dispose();
                resolve();
              }
            });
          }),
          exit.then(() => {
            if (!out.includes(s))
              throw new Error(`exec exited before printing ${s}:\n${out}`);
          }),
        ]);
      await seen("[tty 40x100]");
      term.resize(120, 50);
      await seen("[tty 50x120]");
      // The fixture runs the command on pipes (no remote pty), so send a real newline.
      term.write("abc\n");
      await seen("got:abc");
      expect(await exit).toBe(5);
      // The command's bytes as it wrote them: our terminal adds no "\r" (Nomad's alloc exec clears OPOST).
      expect(out).toContain("x\ny\n");
      expect(out).toContain("got:abc\n");
      expect(out).not.toContain("\r");
    } finally {
      run.child.kill("SIGINT");
      await run.done;
    }
  });
});

describe("a plugin killed under its running task is relaunched and recovers the task, as Nomad does (reference driver)", () => {
  /** The processes right below `pid`. */
  const children = (pid: number) =>
    spawnSync("ps", ["-o", "pid=", "--ppid", String(pid)], { encoding: "utf8" })
      .stdout.split("\n")
      .map((l) => Number(l.trim()))
      .filter((n) => n > 0);
  /** A run of a long task under `plugin`: its plugin (nomadkit's only child), executor and task. */
  const startLong = async (name: string, plugin = rawexec) => {
    const pidFile = join(dir, `${name}.pid`);
    writeFileSync(join(dir, `${name}.json`), JSON.stringify({ command: "/bin/sh", args: ["-c", `echo $$ > ${pidFile}; exec sleep 1000`] }));
    const state = join(dir, `${name}-state.json`);
    const run = start(["run", plugin, "--task-config", `${name}.json`, "--state", state]);
    const [, taskId] = await run.stderrMatch(/started task (\S+)/);
    await run.stderrMatch(/wrote /);
    await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "");
    const [pluginPid, ...others] = children(run.child.pid!);
    expect(others).toEqual([]);
    const [executor] = children(pluginPid!);
    return { run, taskId: taskId!, state, plugin: pluginPid!, executor: executor!, task: Number(readFileSync(pidFile, "utf8")) };
  };
  const kill = (...pids: number[]) => {
    for (const pid of pids) if (alive(pid)) process.kill(pid, "SIGKILL");
  };

  it("the task runs on under the relaunched plugin; Ctrl-C then stops it, its executor and the plugin", async () => {
    const r = await startLong("recover");
    try {
      process.kill(r.plugin, "SIGKILL");
      await r.run.stderrMatch(/recovered task /);
      expect(r.run.child.exitCode).toBe(null);
      expect([alive(r.executor), alive(r.task)]).toEqual([true, true]);
      // The state file names the new plugin, which manages the task (exec goes through it).
      const [relaunched] = children(r.run.child.pid!);
      expect(relaunched).not.toBe(r.plugin);
      expect(JSON.parse(readFileSync(r.state, "utf8"))).toMatchObject({ taskId: r.taskId, reattach: { pid: relaunched } });
      const ex = await nomadkit("exec", r.state, r.taskId, "--", "echo", "recovered");
      expect([ex.code, ex.stdout]).toEqual([0, "recovered\n"]);

      r.run.child.kill("SIGINT");
      const done = await r.run.done;
      expect(done.stderr).toContain(`nomadkit: plugin ${rawexec}: Driver.WaitTask: the plugin exited on signal SIGKILL`);
      expect(done.stderr).toContain("relaunching the plugin to recover task");
      expect(done.stderr).toContain("stopping task");
      expect(done.stderr).toContain("task exited with code 130 (signal 2)");
      expect(done.code).toBe(130);
      for (const pid of [r.task, r.executor, relaunched!]) await until(() => !alive(pid));
      expect(existsSync(r.state)).toBe(false);
    } finally {
      kill(r.task, r.executor);
    }
  });

  it("Ctrl-C while the plugin is being relaunched stops the task once it is recovered", async () => {
    const hold = join(dir, "hold-relaunch");
    const plugin = join(dir, "rawexec-held");
    writeFileSync(plugin, `#!/bin/sh\nwhile [ -e ${hold} ]; do sleep 0.05; done\nexec ${rawexec} "$@"\n`);
    chmodSync(plugin, 0o755);
    const r = await startLong("held", plugin);
    try {
      writeFileSync(hold, "");
      process.kill(r.plugin, "SIGKILL");
      await r.run.stderrMatch(/relaunching the plugin/);
      r.run.child.kill("SIGINT");
      await r.run.stderrMatch(/stopping task /);
      rmSync(hold);
      const done = await r.run.done;
      expect(done.stderr).toMatch(/recovered task [^]*task exited with code 130 \(signal 2\)/);
      expect(done.stderr).not.toContain("StopTask");
      expect(done.code).toBe(130);
      for (const pid of [r.task, r.executor]) await until(() => !alive(pid));
    } finally {
      kill(r.task, r.executor);
      rmSync(hold, { force: true });
    }
  });

  it("a task the relaunched plugin cannot recover (its executor died too): a clear error, nothing left running", async () => {
    const r = await startLong("unrecoverable");
    try {
      process.kill(r.executor, "SIGKILL");
      process.kill(r.plugin, "SIGKILL");
      const done = await r.run.done;
      expect(done.stderr).toContain(
        `nomadkit: cannot recover task ${r.taskId} after its plugin exited: plugin ${rawexec}: Driver.RecoverTask failed: FailedPrecondition: recover task ${r.taskId}: cannot reattach to its executor (pid ${r.executor})`,
      );
      // The driver refused the task: asking again would not help.
      expect(done.stderr).toContain("(attempt 1 of 3)");
      expect(done.stderr).not.toContain("attempt 2");
      expect(done.code).toBe(1);
      await until(() => !alive(r.task));
      expect(existsSync(r.state)).toBe(false);
    } finally {
      kill(r.task, r.executor);
    }
  });

  it("relaunches are bounded: a plugin that no longer starts ends the run with why, the task killed", async () => {
    const broken = join(dir, "broken-later");
    const plugin = join(dir, "rawexec-until-broken");
    writeFileSync(plugin, `#!/bin/sh\n[ -e ${broken} ] && { echo "plugin is broken" >&2; exit 3; }\nexec ${rawexec} "$@"\n`);
    chmodSync(plugin, 0o755);
    const r = await startLong("bounded", plugin);
    try {
      writeFileSync(broken, "");
      process.kill(r.plugin, "SIGKILL");
      const done = await r.run.done;
      expect(done.stderr).toContain("(attempt 3 of 3)");
      expect(done.stderr).not.toContain("attempt 4");
      expect(done.stderr).toMatch(new RegExp(`nomadkit: cannot recover task ${r.taskId.replace(/[/.]/g, "\\$&")} after its plugin exited: .*exited with status 3`));
      expect(done.code).toBe(1);
      // Without a plugin nothing reaches its executor; the task goes with its cgroup where there is one.
      if (/cpuset_cgroup/.test(done.stderr)) await until(() => !alive(r.task));
    } finally {
      kill(r.task, r.executor);
      rmSync(broken, { force: true });
    }
  });
});

describe("nomadkit exec holds a side that outruns the other instead of buffering it (reference driver)", () => {
  const MiB = 1024 * 1024;
  /** Far more than the pipes, HTTP/2 windows and queues between the two ends hold. */
  const LIMIT = 32 * MiB;
  const TOTAL = 128 * MiB;

  /** Runs `fn` with a task of the reference driver reachable through a state file. */
  async function withTask(name: string, fn: (state: string, taskId: string) => Promise<void>): Promise<void> {
    const state = join(dir, `${name}-state.json`);
    const run = start(["run", rawexec, "--task-config", "long.json", "--state", state, "--no-task-cgroup"]);
    const [, taskId] = await run.stderrMatch(/started task (\S+)/);
    await run.stderrMatch(/wrote /);
    try {
      await fn(state, taskId!);
    } finally {
      run.child.kill("SIGINT");
      await run.done;
    }
  }

  it("output nobody reads: the command is held, and all of it arrives once read", async () => {
    await withTask("slow-stdout", async (state, taskId) => {
      const pidFile = join(dir, "producer.pid");
      const script = `echo $$ > ${pidFile}; exec head -c ${TOTAL} /dev/zero`;
      const ex = spawn(process.execPath, [bin, "exec", state, taskId, "--", "sh", "-c", script], { cwd: dir });
      try {
        ex.stdout.pause();
        let stderr = "";
        ex.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
        await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").endsWith("\n"));
        const producer = Number(readFileSync(pidFile, "utf8"));
        // Nothing of our stdout is read yet: what the command could write is what sits in between.
        const produced = await grownTo(() => bytesWritten(producer) ?? TOTAL, LIMIT);
        expect(produced, stderr).toBeLessThan(LIMIT);
        expect(peakRss(ex.pid!)).toBeLessThan(200 * MiB);
        let got = 0;
        let nonZero = false;
        ex.stdout.on("data", (d: Buffer) => {
          got += d.length;
          nonZero ||= d.some((b) => b !== 0);
        });
        ex.stdout.resume();
        const code = await new Promise((resolve) => ex.once("close", resolve));
        expect(code, stderr).toBe(0);
        expect(got).toBe(TOTAL);
        expect(nonZero).toBe(false);
      } finally {
        ex.kill("SIGKILL");
      }
    });
  });

  it("input the command does not read: nomadkit stops reading it, and all of it arrives once read", async () => {
    await withTask("slow-stdin", async (state, taskId) => {
      const go = join(dir, "stdin-go");
      const script = `echo ready; while [ ! -e ${go} ]; do sleep 0.05; done; exec wc -c`;
      const ex = spawn(process.execPath, [bin, "exec", state, taskId, "-i", "--", "sh", "-c", script], { cwd: dir });
      try {
        let stdout = "";
        let stderr = "";
        ex.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
        ex.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
        // The command runs: nomadkit reads its stdin from now on.
        await until(() => stdout.startsWith("ready\n") || ex.exitCode !== null);
        // What the pipe into nomadkit took: it holds 64 KiB, the rest nomadkit read.
        let accepted = 0;
        const chunk = Buffer.alloc(64 * 1024);
        void (async () => {
          for (let offered = 0; offered < TOTAL; offered += chunk.length) {
            if (!ex.stdin.write(chunk, (err) => err || (accepted += chunk.length))) await once(ex.stdin, "drain");
          }
          ex.stdin.end();
        })().catch(() => {});
        const taken = await grownTo(() => accepted, LIMIT);
        expect(taken, stderr).toBeLessThan(LIMIT);
        expect(peakRss(ex.pid!)).toBeLessThan(200 * MiB);
        writeFileSync(go, "");
        const code = await new Promise((resolve) => ex.once("close", resolve));
        expect(code, stderr).toBe(0);
        expect(stdout).toBe(`ready\n${TOTAL}\n`);
      } finally {
        ex.kill("SIGKILL");
      }
    });
  });
});

describe("nomadkit errors name the plugin, file or flag at fault", () => {
  it("missing plugin file", async () => {
    const r = await nomadkit("info", "./no-such-driver");
    expect(r.code).toBe(1);
    expect(r.stderr).toBe("nomadkit: plugin ./no-such-driver: no such file\n");
  });

  it("plugin that is not executable", async () => {
    const r = await nomadkit("info", join(dir, "not-executable"));
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("not executable");
  });

  it("TypeScript source: says to compile or bundle it, not to chmod it", async () => {
    for (const ext of [".ts", ".mts", ".cts"]) {
      const src = join(dir, `main${ext}`);
      writeFileSync(src, "export {};\n");
      const r = await nomadkit("info", src);
      expect(r.code).toBe(1);
      expect(r.stderr).toBe(`nomadkit: plugin ${src}: TypeScript source: compile it (tsc) or bundle it (npx nomadkit bundle ${src}) and pass the output\n`);
    }
  });

  it("missing, broken and non-object config files", async () => {
    const missing = await nomadkit("run", driver, "--config", "missing.json");
    expect(missing.stderr).toBe(
      "nomadkit: --config missing.json: no such file\n",
    );
    expect(missing.code).toBe(1);
    const broken = await nomadkit(
      "run",
      driver,
      "--task-config",
      "broken.json",
    );
    expect(broken.stderr).toMatch(
      /^nomadkit: --task-config broken\.json: not valid JSON/,
    );
    const arr = await nomadkit("fingerprint", driver, "--config", "array.json");
    expect(arr.stderr).toBe(
      "nomadkit: --config array.json: expected a JSON object, got an array\n",
    );
  });

  it("run --state refuses, before starting anything, a path it would lose data at or could not use", async () => {
    const precious = join(dir, "precious.json");
    writeFileSync(precious, '{"important":"data"}\n');
    const taken = await nomadkit("run", driver, "--task-config", "task.json", "--state", precious);
    expect(taken.code).toBe(1);
    expect(taken.stderr).toBe(
      `nomadkit: --state ${precious}: exists and is not a state file of "nomadkit run"; not overwriting it\n`,
    );
    expect(readFileSync(precious, "utf8")).toBe('{"important":"data"}\n');
    // Its own task config, given twice by mistake.
    const self = await nomadkit("run", driver, "--task-config", "task.json", "--state", "task.json");
    expect(self.stderr).toContain("--state task.json: exists and is not a state file");
    expect(readFileSync(join(dir, "task.json"), "utf8")).toContain("command");
    const nodir = await nomadkit("run", driver, "--task-config", "task.json", "--state", "nodir/run.json");
    expect(nodir.code).toBe(1);
    expect(nodir.stderr).toMatch(/^nomadkit: --state nodir\/run\.json: cannot write in .*nodir: ENOENT\n$/);
    const suffix = await nomadkit("run", driver, "--task-config", "task.json", "--state", "run.state");
    expect(suffix.stderr).toContain("--state run.state: must end in .json");
    for (const r of [taken, self, nodir, suffix]) expect(r.stderr).not.toContain("started task");
  });

  it("a signal stops what was started: a plugin still handshaking (SIGINT, exit 130)", async () => {
    const pidFile = join(dir, "silent.pid");
    writeFileSync(
      join(dir, "silent.mjs"),
      `import { writeFileSync } from "node:fs"; writeFileSync(${JSON.stringify(pidFile)}, String(process.pid)); setInterval(() => {}, 1e6);\n`,
    );
    const info = start(["info", "silent.mjs"]);
    await until(() => existsSync(pidFile));
    info.child.kill("SIGINT");
    const r = await info.done;
    expect(r.code).toBe(130);
    expect(r.stderr).toContain("nomadkit: SIGINT: stopping what was started");
    const pid = Number(readFileSync(pidFile, "utf8"));
    await until(() => !alive(pid));
  });

  it("a signal stops what was started: a running task, its executor and plugin (SIGTERM, exit 143)", async () => {
    const pidFile = join(dir, "task.pid");
    writeFileSync(
      join(dir, "pid-task.json"),
      JSON.stringify({ command: "/bin/sh", args: ["-c", `echo $$ > ${pidFile}; exec sleep 1000`] }),
    );
    const run = start(["run", rawexec, "--task-config", "pid-task.json"]);
    const [, taskId] = await run.stderrMatch(/started task (\S+)/);
    await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "");
    const taskPid = Number(readFileSync(pidFile, "utf8"));
    // The plugin and the task's executor (the task itself runs under the executor).
    const started = descendants(run.child.pid!);
    expect(started.length).toBeGreaterThanOrEqual(2);
    run.child.kill("SIGTERM");
    const r = await run.done;
    expect(r.code).toBe(143);
    expect(alive(taskPid), `task ${taskId}`).toBe(false);
    for (const pid of started) await until(() => !alive(pid));
  });

  it("a signal stops the plugin even when its DestroyTask never answers (SIGTERM, exit 143)", async () => {
    // The clean-up after a signal is bounded as a whole, and destroying the task comes before
    // stopping the plugin: a DestroyTask that never answered used all of it, and the run exited
    // with the plugin (and the task under it) left running.
    const pidFile = join(dir, "hang-destroy-task.pid");
    writeFileSync(
      join(dir, "hang-destroy-task.json"),
      JSON.stringify({ command: "/bin/sh", args: ["-c", `echo $$ > ${pidFile}; exec sleep 1000`] }),
    );
    const run = start(["run", driver, "--task-config", "hang-destroy-task.json"], undefined, { TEST_PLUGIN_MODE: "hang-destroy" });
    await run.stderrMatch(/started task (\S+)/);
    await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "");
    const taskPid = Number(readFileSync(pidFile, "utf8"));
    const [pluginPid] = descendants(run.child.pid!).filter((pid) => pid !== taskPid);
    try {
      run.child.kill("SIGTERM");
      const r = await run.done;
      expect(r.code).toBe(143);
      expect(alive(pluginPid!), "plugin").toBe(false);
      expect(r.stderr).toContain("did not answer within 10000 ms; stopping the plugin");
    } finally {
      // The test driver's tasks are its plain children: a driver that never destroys one leaves it.
      if (alive(taskPid)) process.kill(taskPid, "SIGKILL");
      if (pluginPid !== undefined && alive(pluginPid)) process.kill(pluginPid, "SIGKILL");
    }
  });

  it.skipIf(process.getuid?.() !== 0)(
    "a second signal exits at once and still kills what is in the task's cgroup and removes it (root)",
    async () => {
      // Exiting at once (while the clean-up waits for a DestroyTask that never answers) left the
      // task's cgroup directories, and the processes in them, on the host.
      const parent = `nomadkit-test-${process.pid}-exit`;
      const pidFile = join(dir, "exit-at-once.pid");
      // The test driver's tasks are its plain children: this one joins its cgroups itself, as an executor would.
      const join_ = `for d in /sys/fs/cgroup/${parent}/share.slice/*.scope /sys/fs/cgroup/cpuset/${parent}/share /sys/fs/cgroup/*/${parent}/*.task; do [ -d "$d" ] && echo $$ > "$d/cgroup.procs"; done`;
      writeFileSync(join(dir, "exit-at-once.json"), JSON.stringify({ command: "/bin/sh", args: ["-c", `${join_}; echo $$ > ${pidFile}; exec sleep 1000`] }));
      // The allocation directory and the plugin's socket directory go there.
      const tmp = mkdtempSync(join(tmpdir(), "nk-cli-tmp-"));
      const run = start(["run", driver, "--task-config", "exit-at-once.json", "--cgroup-parent", parent], undefined, { TEST_PLUGIN_MODE: "hang-destroy", TMPDIR: tmp });
      let started: number[] = [];
      try {
        const [, path] = await run.stderrMatch(/started task \S+ \(cpuset_cgroup (\S+)\)/);
        await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "");
        const taskPid = Number(readFileSync(pidFile, "utf8"));
        expect(readFileSync(join(path!, "cgroup.procs"), "utf8")).toContain(`${taskPid}\n`);
        started = descendants(run.child.pid!);
        run.child.kill("SIGTERM");
        await run.stderrMatch(/stopping what was started \(again to exit at once\)/);
        // The clean-up now waits up to 10 s for DestroyTask.
        run.child.kill("SIGTERM");
        const r = await run.done;
        expect(r.code).toBe(143);
        expect(r.stderr).not.toContain("did not answer within");
        // Killed by the exit; reaped once its parent, the plugin, is gone too (by init then).
        await until(() => !alive(taskPid));
        expect(existsSync(path!), path).toBe(false);
        expect(testCgroups(parent)).toEqual([]);
        // The plugin is killed too, and the allocation and socket directories removed.
        for (const pid of started) await until(() => !alive(pid));
        expect(readdirSync(tmp)).toEqual([]);
      } finally {
        for (const pid of started) if (alive(pid)) process.kill(pid, "SIGKILL");
        if (run.child.exitCode === null) run.child.kill("SIGKILL");
        for (const d of testCgroups(parent)) removeCgroupTree(d);
        rmSync(pidFile, { force: true });
        rmSync(tmp, { recursive: true, force: true });
      }
    },
    60_000,
  );

  it("a run whose task exited ends, with the task's status, when DestroyTask never answers", async () => {
    // It waited for DestroyTask without a bound: the run never ended (nor said how the task did).
    const run = start(["run", driver, "--task-config", JSON.stringify({ command: "/bin/sh", args: ["-c", "exit 3"] })], undefined, {
      TEST_PLUGIN_MODE: "hang-destroy",
    });
    await run.stderrMatch(/started task (\S+)/);
    const [pluginPid] = descendants(run.child.pid!);
    // A hang is what this test looks for: give up well past the bound (10 s) instead of at the test's timeout.
    let timer: NodeJS.Timeout | undefined;
    const hung = new Promise<"hung">((r) => (timer = setTimeout(() => r("hung"), 40_000)));
    try {
      const r = await Promise.race([run.done, hung]);
      expect(r, "nomadkit run still running 40 s after its task exited").not.toBe("hung");
      if (r === "hung") return;
      expect(r.code).toBe(3);
      expect(r.stderr).toContain("did not answer within 10000 ms; stopping the plugin");
      expect(r.stderr).toContain("nomadkit: task exited with code 3");
      expect(alive(pluginPid!), "plugin").toBe(false);
    } finally {
      clearTimeout(timer);
      // Still hung: a signal's clean-up removes what the run made (the plugin too, once it has).
      if (run.child.exitCode === null) {
        run.child.kill("SIGTERM");
        await run.done;
      }
    }
  });

  it("a task config the driver rejects names the RPC and the file", async () => {
    const r = await nomadkit("run", driver, "--task-config", "agent.json");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      "Driver.StartTask failed: InvalidArgument: task config: command is required",
    );
    expect(r.stderr).toContain("--task-config agent.json");
  });

  it("a StartTask failure says whether Nomad would retry it (RecoverableError)", async () => {
    const task = JSON.stringify({ command: "/bin/true" });
    const retry = await start(["run", direct, "--task-config", task], undefined, { DIRECT_DRIVER_START_ERROR: "recoverable" }).done;
    expect(retry.code).toBe(1);
    expect(retry.stderr).toContain(
      `nomadkit: plugin ${direct}: Driver.StartTask failed: registry unreachable (recoverable: Nomad restarts the task as its restart policy allows) (task config from --task-config)`,
    );
    const fatal = await start(["run", direct, "--task-config", task], undefined, { DIRECT_DRIVER_START_ERROR: "unrecoverable" }).done;
    expect(fatal.code).toBe(1);
    expect(fatal.stderr).toContain(
      `nomadkit: plugin ${direct}: Driver.StartTask failed: no such image (not recoverable: Nomad fails the task without restarting it) (task config from --task-config)`,
    );
  });

  it("a plugin that dies under a call: its exit status and last stderr lines", async () => {
    const r = await start(["run", driver, "--task-config", "task.json"], undefined, { TEST_PLUGIN_MODE: "crash-on-start" }).done;
    expect(r.stderr).toContain(
      `nomadkit: plugin ${driver}: Driver.StartTask: the plugin exited with status 2 (task config from --task-config task.json)\n--- plugin stderr (most recent last) ---\n`,
    );
    expect(r.stderr.endsWith("\npanic: runtime error: disk on fire\ngoroutine 1 [running]:\n"), r.stderr).toBe(true);
    expect(r.code).toBe(1);
  });

  it("bad flag values", async () => {
    const level = await nomadkit("--log-level", "loud", "info", driver);
    expect(level.code).not.toBe(0);
    expect(level.stderr).toContain("--log-level");
    const interval = await nomadkit(
      "stats",
      driver,
      "t1",
      "--interval",
      "soon",
    );
    expect(interval.stderr).toContain("--interval");
    const huge = await nomadkit("stats", driver, "t1", "--interval", "99999999999999s");
    expect(huge.code).toBe(1);
    expect(huge.stderr).toBe('nomadkit: --interval "99999999999999s": must be at most 315576000000s\n');
    const noCommand = await nomadkit("exec", driver, "t1");
    expect(noCommand.code).not.toBe(0);
    expect(noCommand.stderr).toContain("command");
    for (const name of ["..", "a/b"]) {
      const badName = await nomadkit("run", driver, "--name", name);
      expect(badName.code).toBe(1);
      expect(badName.stderr).toContain(`nomadkit: --name ${JSON.stringify(name)}: use letters`);
    }
  });

  it("run refuses a --name the filesystem cannot take before starting the plugin, and leaves nothing behind", async () => {
    const tmp = mkdtempSync(join(tmpdir(), "nk-cli-tmp-"));
    const mark = `long-name-${process.pid}`;
    try {
      const name = "a".repeat(300);
      const r = await start(["run", rawexec, "--task-config", "long.json", "--name", name], undefined, { TMPDIR: tmp, NOMADKIT_TEST_MARK: mark }).done;
      expect(r.stderr).toBe(`nomadkit: --name ${JSON.stringify(name)}: cannot create the task's directory: ENAMETOOLONG\n`);
      expect(r.code).toBe(1);
      expect(withEnv("NOMADKIT_TEST_MARK", mark)).toEqual([]);
      expect(readdirSync(tmp)).toEqual([]);
    } finally {
      for (const pid of withEnv("NOMADKIT_TEST_MARK", mark)) process.kill(pid, "SIGKILL");
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it("Ctrl-C during a StartTask that never answers stops the plugin and removes what the run made", async () => {
    const tmp = mkdtempSync(join(tmpdir(), "nk-cli-tmp-"));
    const mark = `hang-start-${process.pid}`;
    const entered = join(dir, `hang-start-${process.pid}`);
    try {
      const run = start(["run", driver, "--task-config", "task.json", "--no-task-cgroup"], undefined, {
        TMPDIR: tmp,
        NOMADKIT_TEST_MARK: mark,
        TEST_PLUGIN_MODE: "hang-start",
        TEST_RELEASE_FILE: entered,
      });
      await until(() => existsSync(entered)); // StartTask is in flight
      run.child.kill("SIGINT");
      // Before: the clean-up waited for the StartTask until its 30 s limit, then left the plugin running.
      const r = await run.done;
      expect(r.code, r.stderr).toBe(130);
      expect(withEnv("NOMADKIT_TEST_MARK", mark)).toEqual([]);
      expect(readdirSync(tmp)).toEqual([]);
    } finally {
      for (const pid of withEnv("NOMADKIT_TEST_MARK", mark)) process.kill(pid, "SIGKILL");
      rmSync(tmp, { recursive: true, force: true });
      rmSync(entered, { force: true });
    }
  }, 25_000);

  /** `nomadkit run` of the test driver with `flags`, checking that no process it started is left. */
  async function runMarked(mark: string, ...flags: string[]): Promise<Result> {
    try {
      const r = await start(["run", driver, "--task-config", "task.json", ...flags], undefined, { NOMADKIT_TEST_MARK: mark }).done;
      expect(withEnv("NOMADKIT_TEST_MARK", mark)).toEqual([]);
      return r;
    } finally {
      for (const pid of withEnv("NOMADKIT_TEST_MARK", mark)) process.kill(pid, "SIGKILL");
    }
  }

  it("run refuses a --kill-signal that is not a signal before starting the plugin", async () => {
    const r = await runMarked(`kill-signal-${process.pid}`, "--kill-signal", "SIGFOO");
    expect(r.stderr).toBe('nomadkit: --kill-signal "SIGFOO": not a signal (a name such as SIGTERM, or a number)\n');
    expect(r.code).toBe(1);
    const n = await runMarked(`kill-signal-n-${process.pid}`, "--kill-signal", "99");
    expect(n.stderr).toBe('nomadkit: --kill-signal "99": not a signal (a name such as SIGTERM, or a number)\n');
  });

  it("run refuses resources Nomad would refuse in a job, or that are not numbers, naming the flag, before starting the plugin", async () => {
    const cases: [string[], string][] = [
      [["--memory", "lots"], '--memory "lots": expected a whole number of MB'],
      [["--memory", "5"], "--memory 5: must be a whole number of MB, at least 10 (Nomad's minimum)"],
      [["--cpu", "1.5"], '--cpu "1.5": expected a whole number of MHz'],
      [["--cpu", "0"], "--cpu 0: must be a whole number of MHz, at least 1 (Nomad's minimum)"],
      [["--memory-max", "-2"], "--memory-max -2: must be a whole number of MB (0: none, -1: no hard limit)"],
      [["--memory-max", "128"], `--memory-max 128: below the task's memory, 300 MB (the default); Nomad refuses it: "MemoryMaxMB value (128) should be larger than MemoryMB value (300)"`],
      [["--memory", "256", "--memory-max", "128"], `--memory-max 128: below the task's memory, 256 MB (--memory); Nomad refuses it: "MemoryMaxMB value (128) should be larger than MemoryMB value (256)"`],
      [["--cpu", "500", "--cores", "0"], `--cpu and --cores: a task asks for one or the other; Nomad refuses both: "Task can only ask for 'cpu' or 'cores' resource, not both."`],
      [["--cores", "0-x"], '--cores "0-x": "0-x" is not a CPU number or a low-high span (a cpuset list such as 0-1,3)'],
      [["--cores", "3-1"], '--cores "3-1": "3-1" is not a CPU number or a low-high span (a cpuset list such as 0-1,3)'],
      [["--cores", ""], '--cores "": names no CPU (a cpuset list such as 0-1,3)'],
      [["--cores", "0", "--no-task-cgroup"], "--cores 0: reserved cores need the task's cgroup, which --no-task-cgroup turns off"],
    ];
    for (const [flags, message] of cases) {
      const r = await runMarked(`resources-${process.pid}`, ...flags);
      expect(r.stderr, flags.join(" ")).toBe(`nomadkit: ${message}\n`);
      expect(r.code).toBe(1);
    }
  });

  it.skipIf(process.getuid?.() !== 0)("run refuses --cores this host's CPUs do not have, naming the flag, and leaves nothing behind (root)", async () => {
    const r = await runMarked(`cores-missing-${process.pid}`, "--cores", "4000");
    expect(r.stderr).toMatch(/^nomadkit: --cores 4000: cores 4000: not among the CPUs of \/sys\/fs\/cgroup\/\S+ \([\d,-]+\)\n$/);
    expect(r.code).toBe(1);
  });

  it.skipIf(process.getuid?.() !== 0)("run --cores where the host cannot make the task's cgroup (a user who is not root) says so, and starts no task", () => {
    const mark = `cores-no-cgroup-${process.pid}`;
    try {
      // As nobody: the run falls back to no task cgroup, which reserved cores cannot do without.
      const r = spawnSync(process.execPath, [bin, "run", rawexec, "--task-config", '{"command":"/bin/echo","args":["ran"]}', "--cores", "0"], {
        cwd: "/",
        uid: 65534,
        gid: 65534,
        env: { ...process.env, NOMADKIT_TEST_MARK: mark, TMPDIR: "/tmp" },
        encoding: "utf8",
        timeout: 60_000,
      });
      expect(r.stderr).toMatch(/^nomadkit: --cores 0: reserved cores need the task's cgroup, which this host cannot make: not root: EACCES: .*\n$/);
      expect(r.stdout).toBe("");
      expect(r.status).toBe(1);
      expect(withEnv("NOMADKIT_TEST_MARK", mark)).toEqual([]);
    } finally {
      for (const pid of withEnv("NOMADKIT_TEST_MARK", mark)) process.kill(pid, "SIGKILL");
    }
  });

  it("run refuses a --cgroup-parent that is not below the root before starting the plugin", async () => {
    for (const parent of ["/", "../x", "a/../../b"]) {
      const r = await runMarked(`cgroup-parent-${process.pid}`, "--cgroup-parent", parent);
      expect(r.stderr).toBe(`nomadkit: --cgroup-parent ${JSON.stringify(parent)}: must name a cgroup below the root, without ".."\n`);
      expect(r.code).toBe(1);
    }
  });

  it("a plugin that is not a go-plugin plugin", async () => {
    writeFileSync(
      join(dir, "chatty.mjs"),
      'console.log("hello, I am not a plugin");\n',
    );
    const r = await nomadkit("info", join(dir, "chatty.mjs"));
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("chatty.mjs");
    expect(r.stderr).toContain("not a go-plugin handshake");
  });
});

describe("nomadkit ends quietly when its output is closed, stopping what it started", () => {
  /** Starts nomadkit and closes its stdout once it has written something; resolves with its end. */
  function closeOutputAfterFirstWrite(args: string[], onFirst: (pid: number) => void = () => {}) {
    const child = spawn(process.execPath, [bin, ...withTestCgroupParent(args)], { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    // Like `| head -c 600`: the reader goes away and the next write gets EPIPE.
    child.stdout.once("data", () => {
      onFirst(child.pid!);
      child.stdout.destroy();
    });
    return new Promise<{ code: number | null; signal: string | null; stderr: string }>((resolve) =>
      child.once("close", (code, signal) => resolve({ code, signal, stderr })),
    );
  }

  it("stats --json | head: exit 141, no EPIPE stack", async () => {
    const state = join(dir, "epipe-state.json");
    const run = start(["run", driver, "--task-config", join(dir, "long.json"), "--state", state]);
    const [, taskId] = await run.stderrMatch(/started task (\S+)/);
    await run.stderrMatch(/wrote /);
    try {
      const r = await closeOutputAfterFirstWrite(["stats", state, taskId!, "--json", "--interval", "20ms"]);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(141);
      // The task and its run go on: stats only disconnected from the plugin.
      expect(run.child.exitCode).toBe(null);
    } finally {
      run.child.kill("SIGINT");
      await run.done;
    }
  });

  /**
   * Runs nomadkit with its stdout closed before anything is written; every process it starts is
   * marked through the environment (`mark`). Resolves with its exit status and stderr.
   */
  async function withOutputClosed(args: string[], mark: string): Promise<{ code: unknown; stderr: string }> {
    const child = spawn(process.execPath, [bin, ...withTestCgroupParent(args)], {
      cwd: dir,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, NOMADKIT_TEST_MARK: mark },
    });
    child.stdout.destroy();
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise((resolve) => child.once("close", resolve));
    return { code, stderr };
  }

  it("run | true: exit 141 and the task, its executor and the plugin stopped", async () => {
    const pidFile = join(dir, "yes.pid");
    writeFileSync(
      join(dir, "yes-task.json"),
      JSON.stringify({ command: "/bin/sh", args: ["-c", `echo $$ > ${pidFile}; exec yes`] }),
    );
    const mark = `epipe-${process.pid}-${Date.now()}`;
    // The reader is gone before the first line, which arrives while StartTask is still in flight.
    const { code, stderr } = await withOutputClosed(["run", rawexec, "--task-config", "yes-task.json"], mark);
    expect(stderr).not.toMatch(/EPIPE|Error|unexpected/);
    expect(code).toBe(141);
    const taskPid = Number(readFileSync(pidFile, "utf8"));
    await until(() => !alive(taskPid));
    await until(() => withEnv("NOMADKIT_TEST_MARK", mark).length === 0);
  }, 60_000);

  it("capabilities with its output closed: exit 141, and the plugin stopped, not orphaned mid-release", async () => {
    const mark = `epipe-caps-${process.pid}-${Date.now()}`;
    const { code, stderr } = await withOutputClosed(["capabilities", rawexec], mark);
    expect(stderr).not.toMatch(/EPIPE|Error|unexpected/);
    expect(code).toBe(141);
    // Gone when nomadkit exits: it waited for the plugin's stop it had begun.
    expect(withEnv("NOMADKIT_TEST_MARK", mark)).toEqual([]);
  }, 60_000);

  it("output lost as the command ends still exits 141, not 0", async () => {
    expect((await withOutputClosed(["conformance", "--list"], `epipe-list-${process.pid}`)).code).toBe(141);
  });
});

describe("a second signal exits at once, killing the plugin the command launched and removing its temporary directories", () => {
  // Exiting at once left the plugin running for good (reparented to init) with its socket
  // directory, and `run` its allocation directory and state file too.
  const KILLED = /nomadkit: plugin \S+ \(pid (\d+)\) and the processes it started killed \(SIGKILL\): exiting before they were stopped\n/;

  /**
   * Runs `args` against the test driver in `mode`, with a TMPDIR of its own (the plugin's socket
   * directory, `run`'s allocation directory); once `ready`, SIGTERM, and once `stopping` is on
   * stderr (the clean-up waits for the plugin then) SIGTERM again. The plugin must be gone and
   * TMPDIR empty.
   */
  async function exitAtOnce(args: string[], mode: string, ready: (cmd: ReturnType<typeof start>) => Promise<unknown>, stopping: RegExp) {
    const tmp = mkdtempSync(join(tmpdir(), "nk-cli-tmp-"));
    const cmd = start(["--log-level", "info", ...args], undefined, { TEST_PLUGIN_MODE: mode, TMPDIR: tmp });
    let plugin: number | undefined;
    try {
      await ready(cmd);
      // The command's only child.
      [plugin] = descendants(cmd.child.pid!);
      expect(plugin).toBeDefined();
      cmd.child.kill("SIGTERM");
      await cmd.stderrMatch(stopping);
      expect(cmd.child.kill("SIGTERM")).toBe(true);
      const r = await cmd.done;
      expect(r.code, r.stderr).toBe(143);
      await until(() => !alive(plugin!));
      expect(readdirSync(tmp)).toEqual([]);
      // Said, with the pid: it was the exit's kill, not the clean-up's stop, that ended it.
      expect(Number(KILLED.exec(r.stderr)?.[1]), r.stderr).toBe(plugin);
      return r;
    } finally {
      if (plugin !== undefined && alive(plugin)) process.kill(plugin, "SIGKILL");
      if (cmd.child.exitCode === null) cmd.child.kill("SIGKILL");
      rmSync(tmp, { recursive: true, force: true });
    }
  }

  it("run whose DestroyTask never answers: also its allocation directory and --state file", async () => {
    const pidFile = join(dir, "exit-at-once-run.pid");
    const state = join(dir, "exit-at-once-state.json");
    const task = JSON.stringify({ command: "/bin/sh", args: ["-c", `echo $$ > ${pidFile}; exec sleep 1000`] });
    try {
      await exitAtOnce(
        ["run", driver, "--task-config", task, "--no-task-cgroup", "--state", state],
        "hang-destroy",
        async (run) => {
          await run.stderrMatch(/wrote /);
          await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "");
        },
        // The clean-up now waits up to 10 s for DestroyTask.
        /stopping what was started \(again to exit at once\)/,
      );
      expect(existsSync(state), state).toBe(false);
    } finally {
      // The test driver's tasks are its plain children (no cgroup here): killing the plugin leaves this one.
      const taskPid = existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8")) : 0;
      if (taskPid > 0 && alive(taskPid)) process.kill(taskPid, "SIGKILL");
      rmSync(pidFile, { force: true });
      rmSync(state, { force: true });
    }
  }, 60_000);

  // A plugin whose Driver.Shutdown never answers (the stop waits 2 s for it) and which never exits
  // after GRPCController.Shutdown (2 s more, then SIGKILL): its stop takes 4 s.
  const STUCK = "hang-driver-shutdown,ignore-shutdown";

  it("fingerprint", async () => {
    await exitAtOnce(
      ["fingerprint", driver, "--watch"],
      `silent-fingerprint,abort-listeners,${STUCK}`,
      // Logged by its SetConfig: the command has the plugin.
      (cmd) => cmd.stderrMatch(/shutdown signal listeners/),
      /Driver\.Shutdown called/,
    );
  }, 60_000);

  it("exec", async () => {
    const pidFile = join(dir, "exit-at-once-exec.pid");
    try {
      await exitAtOnce(
        ["exec", driver, "t1", "--", "/bin/sh", "-c", `echo $$ > ${pidFile}; exec sleep 1000`],
        STUCK,
        () => until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== ""),
        /Driver\.Shutdown called/,
      );
    } finally {
      // The test driver's exec sessions are its plain children.
      const pid = existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8")) : 0;
      if (pid > 0 && alive(pid)) process.kill(pid, "SIGKILL");
      rmSync(pidFile, { force: true });
    }
  }, 60_000);
});

describe("a signal that kills the plugin during its launch exits 128+N in every command", () => {
  /** A plugin that never completes the handshake and dies of SIGINT, writing its pid to `pidFile`. */
  function silentPlugin(name: string): { plugin: string; pidFile: string } {
    const pidFile = join(dir, `${name}.pid`);
    rmSync(pidFile, { force: true });
    const plugin = join(dir, `${name}.mjs`);
    writeFileSync(
      plugin,
      `#!/usr/bin/env node\nimport { writeFileSync } from "node:fs"; writeFileSync(${JSON.stringify(pidFile)}, String(process.pid)); setInterval(() => {}, 1e6);\n`,
      { mode: 0o755 },
    );
    return { plugin, pidFile };
  }
  const pidIn = async (pidFile: string) => {
    await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8") !== "");
    return Number(readFileSync(pidFile, "utf8"));
  };
  const STOPPING = "nomadkit: SIGINT: stopping what was started (again to exit at once)\n";

  // Ctrl-C signals the plugin as well as nomadkit, and nomadkit may see the plugin die before its
  // own SIGINT: here the signal reaches only the plugin, the order that exited 1 with "plugin exited
  // on signal SIGINT before completing the handshake".
  const commands: [string, (plugin: string) => string[]][] = [
    ["info", (p) => ["info", p]],
    ["fingerprint", (p) => ["fingerprint", p, "--config", "{}"]],
    ["capabilities", (p) => ["capabilities", p]],
    ["run", (p) => ["run", p, "--task-config", "long.json"]],
    ["stats", (p) => ["stats", p, "t1"]],
    ["exec", (p) => ["exec", p, "t1", "--", "/bin/sh"]],
    ["conformance", (p) => ["conformance", p, "--checks", "handshake"]],
    ["bundle", (p) => ["bundle", p, "--out", "interrupted-bundle"]],
  ];
  for (const [command, args] of commands) {
    it(command, async () => {
      const { plugin, pidFile } = silentPlugin(`launch-${command}`);
      const cmd = start(args(plugin));
      process.kill(await pidIn(pidFile), "SIGINT");
      const r = await cmd.done;
      expect(r.stderr.startsWith(STOPPING), r.stderr).toBe(true);
      // What the plugin's launch error said is shown too: perhaps nobody pressed Ctrl-C.
      if (command !== "conformance") expect(r.stderr).toContain("exited on signal SIGINT before completing the go-plugin handshake");
      expect(r.code).toBe(130);
    });
  }

  it("SIGTERM: 143", async () => {
    const { plugin, pidFile } = silentPlugin("launch-sigterm");
    const cmd = start(["fingerprint", plugin]);
    process.kill(await pidIn(pidFile), "SIGTERM");
    const r = await cmd.done;
    expect(r.stderr.startsWith("nomadkit: SIGTERM: stopping what was started (again to exit at once)\n"), r.stderr).toBe(true);
    expect(r.stderr).toContain("exited on signal SIGTERM before completing the go-plugin handshake");
    expect(r.code).toBe(143);
  });

  it("Ctrl-C in a terminal (the whole process group): 130, the same signal arriving twice is one", async () => {
    const { plugin, pidFile } = silentPlugin("launch-group");
    for (let i = 0; i < 3; i++) {
      rmSync(pidFile, { force: true });
      const child = spawn(process.execPath, [bin, "fingerprint", plugin], { cwd: dir, detached: true, stdio: ["ignore", "ignore", "pipe"] });
      let stderr = "";
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      const pid = await pidIn(pidFile);
      process.kill(-child.pid!, "SIGINT");
      const code = await new Promise((resolve) => child.once("close", resolve));
      // Which death nomadkit notices first is a race: the plugin's launch error may follow.
      expect(stderr.startsWith(STOPPING), stderr).toBe(true);
      expect(code).toBe(130);
      await until(() => !alive(pid));
    }
  });

  it("a plugin killed otherwise is still a launch failure (exit 1)", async () => {
    const { plugin, pidFile } = silentPlugin("launch-sigkill");
    const cmd = start(["info", plugin]);
    process.kill(await pidIn(pidFile), "SIGKILL");
    const r = await cmd.done;
    expect(r.stderr).toContain("exited on signal SIGKILL before completing the go-plugin handshake");
    expect(r.code).toBe(1);
  });
});

describe("--config, --task-config and --plugin-config take JSON inline or a file, in every command", () => {
  it("run and fingerprint take inline JSON", async () => {
    const r = await nomadkit(
      "run",
      driver,
      "--config",
      "{}",
      "--task-config",
      JSON.stringify({ command: "sh", args: ["-c", "echo inline; exit 3"] }),
    );
    expect(r.stdout).toBe("inline\n");
    expect(r.code).toBe(3);
    const fp = await nomadkit("fingerprint", driver, "--config", " {}");
    expect(fp.stderr).toBe("");
    expect(fp.code).toBe(0);
    expect(fp.stdout).toContain("health: HEALTHY");
  });

  it("errors name the flag (and the file when it is one)", async () => {
    const broken = await nomadkit("run", driver, "--config", "{nope");
    expect(broken.code).toBe(1);
    expect(broken.stderr).toMatch(/^nomadkit: --config: "\{nope" is neither a file nor valid JSON \(.+\)\n$/);
    const empty = await nomadkit("fingerprint", driver, "--config", "");
    expect(empty.stderr).toBe("nomadkit: --config: empty; give a JSON object or the path of a JSON file\n");
    const array = await nomadkit("fingerprint", driver, "--config", "[1]");
    expect(array.stderr).toBe("nomadkit: --config: expected a JSON object, got an array\n");
    const taskArray = await nomadkit("run", driver, "--task-config", "[]");
    expect(taskArray.stderr).toBe("nomadkit: --task-config: expected a JSON object, got an array\n");
    // The same reader as conformance --plugin-config: a path is a file.
    const missing = await nomadkit("conformance", driver, "--plugin-config", "missing.json");
    expect(missing.stderr).toBe("nomadkit: --plugin-config missing.json: no such file\n");
    // Checked against the plugin's schemas like a file's config.
    const typo = await nomadkit("fingerprint", rawexec, "--config", '{"create_netwrok":true}');
    expect(typo.code).toBe(1);
    expect(typo.stderr).toContain('nomadkit: --config: "create_netwrok" is not declared (declared: create_network, denied_envvars, denied_host_gids, denied_host_uids, enabled)');
    const taskTypo = await nomadkit("run", rawexec, "--task-config", '{"command":"/bin/true","agrs":[]}');
    expect(taskTypo.stderr).toContain('nomadkit: --task-config: "agrs" is not declared');
    expect(taskTypo.stderr).not.toContain("started task");
    // A file whose name starts with { is still a file.
    writeFileSync(join(dir, "{odd}.json"), '{"command":"sh","args":["-c","echo from-file"]}');
    const odd = await nomadkit("run", driver, "--task-config", "{odd}.json");
    expect(odd.stdout).toBe("from-file\n");
  }, 60_000);
});
