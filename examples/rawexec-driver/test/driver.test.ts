// nomadkit-rawexec through the real wire: the plugin_dir executable launched by launchPlugin,
// exactly as Nomad launches it, driven with the generated client.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { encode } from "@msgpack/msgpack";
import type { PluginClient } from "@nomadkit/client";
import { executorBinPath } from "@nomadkit/server/executor";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PLUGIN_NAME, PLUGIN_VERSION } from "../src/driver.js";
import { PLUGIN, alive, cleanup, execStream, isRoot, newTask, read, sh, start, startPlugin, stdin, until, type TestTask } from "./helpers.js";

let p: PluginClient;
const started: TestTask[] = [];

beforeAll(async () => {
  p = await startPlugin();
});
afterAll(async () => {
  for (const t of started) await p.driver.destroyTask({ taskId: t.id, force: true }).catch(() => undefined);
  await cleanup();
});

async function run(driverConfig: Record<string, unknown>, extra: Parameters<typeof newTask>[1] = {}): Promise<TestTask> {
  const t = newTask(driverConfig, extra);
  await start(p, t);
  started.push(t);
  return t;
}

function code(err: unknown): number | undefined {
  return (err as { code?: number }).code;
}

async function failure(fn: () => Promise<unknown>): Promise<Error & { code?: number }> {
  try {
    await fn();
  } catch (err) {
    return err as Error & { code?: number };
  }
  throw new Error("expected the call to fail");
}

describe("plugin identity and schemas", () => {
  it("answers PluginInfo, ConfigSchema, TaskConfigSchema and Capabilities as a Nomad driver", async () => {
    const info = await p.basePlugin.pluginInfo({});
    expect(info).toMatchObject({ type: 2 /* DRIVER */, name: PLUGIN_NAME, pluginVersion: PLUGIN_VERSION, pluginApiVersions: ["v0.1.0"] });
    const cfg = await p.basePlugin.configSchema({});
    expect(cfg.spec?.block.case).toBe("object");
    expect(Object.keys((cfg.spec?.block.value as { attributes: object }).attributes)).toEqual(["enabled", "create_network", "denied_host_uids", "denied_host_gids", "denied_envvars"]);
    const task = await p.driver.taskConfigSchema({});
    expect(Object.keys((task.spec?.block.value as { attributes: object }).attributes)).toEqual(["command", "args", "cgroup_v2_override", "cgroup_v1_override", "oom_score_adj", "work_dir", "denied_envvars"]);
    const { capabilities } = await p.driver.capabilities({});
    expect(capabilities).toMatchObject({ sendSignals: true, exec: true, mustCreateNetwork: false });
    expect(capabilities?.networkIsolationModes).toEqual([0, 1]); // HOST, GROUP
  });

  it("reports a healthy fingerprint with its attributes at once", async () => {
    const ac = new AbortController();
    for await (const fp of p.driver.fingerprint({}, { signal: ac.signal })) {
      expect(fp.health).toBe(2);
      expect(Object.keys(fp.attributes)).toContain(`driver.${PLUGIN_NAME}`);
      break;
    }
    ac.abort();
  });

  it("rejects bad plugin and task config with InvalidArgument naming the field", async () => {
    const bad = await failure(() => p.basePlugin.setConfig({ msgpackConfig: encode({ create_network: "yes" }) }));
    expect(code(bad)).toBe(3);
    expect(bad.message).toContain("create_network");
    await p.basePlugin.setConfig({ msgpackConfig: encode({ create_network: false }) });

    const t = newTask({});
    t.config.msgpackDriverConfig = encode({ command: null, args: [] });
    const noCommand = await failure(() => p.driver.startTask({ task: t.config }));
    expect(code(noCommand)).toBe(3);
    expect(noCommand.message).toContain("command");

    const missing = newTask({ command: "/no/such/binary" });
    const notFound = await failure(() => p.driver.startTask({ task: missing.config }));
    expect(notFound.message).toContain("/no/such/binary");
    // The plugin survived all of it.
    expect((await p.health.check({ service: "plugin" })).status).toBe(1);
  });
});

describe("task lifecycle", () => {
  it("runs a task in its task dir with its env, output into Nomad's FIFOs, and reports its exit code", async () => {
    const t = newTask(sh('echo "cwd=$PWD"; echo "var=$MY_VAR"; echo oops >&2; exit 7'), { env: { PATH: process.env.PATH!, MY_VAR: "hello" } });
    // Nomad's log collector reads FIFOs; `cat` plays that part.
    for (const f of [t.stdoutPath, t.stderrPath]) expect(spawnSync("mkfifo", [f]).status).toBe(0);
    const readers = [t.stdoutPath, t.stderrPath].map((f) => {
      const c = spawn("cat", [f]);
      let s = "";
      c.stdout.on("data", (b: Buffer) => (s += b.toString()));
      return new Promise<string>((resolve) => c.on("close", () => resolve(s)));
    });
    await start(p, t);
    started.push(t);
    const res = await p.driver.waitTask({ taskId: t.id });
    expect(res.result).toMatchObject({ exitCode: 7, signal: 0 });
    const [out, err] = await Promise.all(readers);
    expect(out).toBe(`cwd=${t.taskDir}\nvar=hello\n`);
    expect(err).toBe("oops\n");
    const insp = await p.driver.inspectTask({ taskId: t.id });
    expect(insp.task?.state).toBe(2); // EXITED
    expect(insp.task?.result?.exitCode).toBe(7);
  });

  it("inspects, signals by name, stops with a signal and waits for the exit", async () => {
    const t = await run(sh("trap 'echo got-hup' HUP; echo ready; while :; do sleep 0.1; done"));
    const waiting = p.driver.waitTask({ taskId: t.id });
    await until(() => read(t.stdoutPath).includes("ready"), "the task to start");
    const insp = await p.driver.inspectTask({ taskId: t.id });
    expect(insp.task).toMatchObject({ id: t.id, name: "web", state: 1 });
    const pid = Number(insp.driver?.attributes.pid);
    expect(alive(pid)).toBe(true);

    await p.driver.signalTask({ taskId: t.id, signal: "SIGHUP" });
    await until(() => read(t.stdoutPath).includes("got-hup"), "the task to receive SIGHUP");
    const bad = await failure(() => p.driver.signalTask({ taskId: t.id, signal: "SIGNOPE" }));
    expect(code(bad)).toBe(3);

    await p.driver.stopTask({ taskId: t.id, signal: "SIGTERM", timeout: { seconds: 30n } });
    const res = await waiting;
    expect(res.result).toMatchObject({ exitCode: 143, signal: 15 });
    expect(alive(pid)).toBe(false);
    const after = await p.driver.inspectTask({ taskId: t.id });
    expect(after.task?.state).toBe(2);
    expect(after.task?.completedAt).toBeDefined();
    // FailedPrecondition, not Unknown: the task is not in a state the call can act on.
    expect(code(await failure(() => p.driver.signalTask({ taskId: t.id, signal: "SIGHUP" })))).toBe(9);

    await p.driver.destroyTask({ taskId: t.id, force: false });
    expect(code(await failure(() => p.driver.inspectTask({ taskId: t.id })))).toBe(5); // NotFound
  });

  it("stop escalates to SIGKILL when the task ignores the signal past the timeout", async () => {
    const t = await run(sh("trap '' TERM; echo ready; while :; do sleep 0.1; done"));
    await until(() => read(t.stdoutPath).includes("ready"), "the task to ignore SIGTERM");
    await p.driver.stopTask({ taskId: t.id, signal: "SIGTERM", timeout: { nanos: 300_000_000 } });
    const res = await p.driver.waitTask({ taskId: t.id });
    expect(res.result).toMatchObject({ exitCode: 137, signal: 9 });
  });

  it("destroy refuses a running task unless forced, and force kills it", async () => {
    const t = await run(sh("echo ready; exec sleep 600"));
    await until(() => read(t.stdoutPath).includes("ready"), "the task to start");
    const pid = Number((await p.driver.inspectTask({ taskId: t.id })).driver?.attributes.pid);
    const refused = await failure(() => p.driver.destroyTask({ taskId: t.id, force: false }));
    expect(refused.message).toContain("running");
    expect(code(refused)).toBe(9); // FailedPrecondition
    expect(alive(pid)).toBe(true);
    await p.driver.destroyTask({ taskId: t.id, force: true });
    expect(alive(pid)).toBe(false);
    expect(code(await failure(() => p.driver.inspectTask({ taskId: t.id })))).toBe(5);
  });

  it.skipIf(!isRoot || !existsSync("/sys/fs/cgroup/freezer/cgroup.procs"))("with cgroup_v1_override, stop and destroy kill a daemon that left the task's process group", async () => {
    const cg = `/sys/fs/cgroup/freezer/nomadkit-rawexec-test-${process.pid}`;
    mkdirSync(cg, { recursive: true });
    try {
      const t = await run({ ...sh("(setsid sleep 1000 & echo $!); echo ready; exec sleep 600"), cgroup_v1_override: { freezer: cg } });
      const daemon = Number(await until(() => read(t.stdoutPath).includes("ready") && read(t.stdoutPath).split("\n")[0], "the daemon's pid"));
      expect(readFileSync(`${cg}/cgroup.procs`, "utf8").split("\n")).toContain(String(daemon));
      await p.driver.stopTask({ taskId: t.id, signal: "SIGTERM", timeout: { seconds: 5n } });
      expect((await p.driver.waitTask({ taskId: t.id })).result).toMatchObject({ signal: 15 });
      await p.driver.destroyTask({ taskId: t.id, force: true });
      await until(() => !alive(daemon), "the daemon's death");
      expect(readFileSync(`${cg}/cgroup.procs`, "utf8")).toBe("");
    } finally {
      // A failed assertion may leave the daemon: kill it, or the cgroup cannot go (EBUSY) and that
      // error would hide the failure.
      for (const pid of readFileSync(`${cg}/cgroup.procs`, "utf8").split("\n").filter(Boolean)) alive(Number(pid)) && process.kill(Number(pid), "SIGKILL");
      await until(() => readFileSync(`${cg}/cgroup.procs`, "utf8") === "", "the test cgroup to empty");
      rmdirSync(cg);
    }
  });

  it.skipIf(!isRoot)("runs the task as its user when the plugin runs as root", async () => {
    const t = await run(sh("id -u; id -g"), { user: "nobody" });
    const res = await p.driver.waitTask({ taskId: t.id });
    expect(res.result?.exitCode).toBe(0);
    const [uid] = read(t.stdoutPath).trim().split("\n");
    expect(uid).toBe(String(spawnSync("id", ["-u", "nobody"]).stdout.toString().trim()));
  });

  it("runs an artifact from the task's local/ by bare name, made executable, as raw_exec does", async () => {
    const t = newTask({ command: "nk-artifact", args: ["x"] });
    // Unpacked without its exec bits (an artifact's archive, a template).
    writeFileSync(join(t.taskDir, "local", "nk-artifact"), '#!/bin/sh\necho "artifact $1"\n', { mode: 0o644 });
    await start(p, t);
    started.push(t);
    expect((await p.driver.waitTask({ taskId: t.id })).result?.exitCode).toBe(0);
    expect(read(t.stdoutPath)).toBe("artifact x\n");
    const missing = await failure(() => p.driver.startTask({ task: newTask({ command: "nk-nowhere" }).config }));
    expect(missing.message).toContain('cmd: executable "nk-nowhere" not found');
  });

  it("emits task events on the TaskEvents stream", async () => {
    const ac = new AbortController();
    const events: { taskId: string; message: string }[] = [];
    const reading = (async () => {
      try {
        for await (const e of p.driver.taskEvents({}, { signal: ac.signal })) events.push(e);
      } catch {
        // cancelled below
      }
    })();
    const t = await run(sh("exec sleep 600"));
    await until(() => events.find((e) => e.taskId === t.id), "a task event for the started task");
    expect(events.find((e) => e.taskId === t.id)!.message).toMatch(/^Started \/bin\/sh \(pid \d+\) under executor \d+$/);
    ac.abort();
    await reading;
    await p.driver.destroyTask({ taskId: t.id, force: true });
  });
});

describe("exec", () => {
  let t: TestTask;
  beforeAll(async () => {
    t = await run(sh("exec sleep 600"));
  });

  it("buffered exec runs in the task's dir and env and returns the exit code", async () => {
    const res = await p.driver.execTask({ taskId: t.id, command: ["/bin/sh", "-c", 'echo "$PWD $NOMAD_TASK_NAME"; echo err >&2; exit 3'], timeout: { seconds: 30n } });
    expect(res.result?.exitCode).toBe(3);
    const all = Buffer.concat([res.stdout, res.stderr]).toString();
    expect(all).toContain(`${t.taskDir} web\n`);
    expect(all).toContain("err\n");
  });

  it("streams Nomad's no-tty vector: stdout/stderr, one close each, one exited 43", async () => {
    const o = await execStream(p, [{ setup: { taskId: t.id, command: ["/bin/sh", "-c", "echo hello stdout; echo hello stderr >&2; exit 43"] } }]);
    expect(o).toEqual({ stdout: "hello stdout\n", stderr: "hello stderr\n", exitCode: 43, exited: 1, stdoutCloses: 1, stderrCloses: 1 });
  });

  it("streams Nomad's tty vector: after resizes to 50x40 and 100x100, stty size prints 100 100", async () => {
    const o = await execStream(p, [
      { setup: { taskId: t.id, command: ["/bin/sh", "-c", "read go; stty size"], tty: true } },
      { ttySize: { height: 50, width: 40 } },
      { ttySize: { height: 100, width: 100 } },
      stdin("go\n"),
    ]);
    expect(o.stdout.endsWith("100 100\r\n")).toBe(true);
    expect(o.stderr).toBe("");
    expect(o.exitCode).toBe(0);
    expect(o.exited).toBe(1);
  });

  it("ignores heartbeats and delivers stdin then EOF", async () => {
    const o = await execStream(p, [{ setup: { taskId: t.id, command: ["wc", "-c"] } }, {}, stdin("hello "), {}, stdin("world"), { stdin: { close: true } }, {}]);
    expect(o.stdout.trim()).toBe("11");
    expect(o.exitCode).toBe(0);
  });

  it("buffered exec past its timeout answers with the output so far and exit code -1, as Nomad's ExecScript", async () => {
    const res = await p.driver.execTask({ taskId: t.id, command: ["/bin/sh", "-c", "echo partial; exec sleep 30"], timeout: { nanos: 300_000_000 } });
    expect(Buffer.from(res.stdout).toString()).toBe("partial\n");
    // raw_exec's ExecTask: WaitStatus.ExitStatus() of the killed command, and no signal.
    expect(res.result).toMatchObject({ exitCode: -1, signal: 0 });
    // Any death by signal reads the same there; streamed sessions report 128+N instead (below).
    const killed = await p.driver.execTask({ taskId: t.id, command: ["/bin/sh", "-c", "kill -TERM $$"], timeout: { seconds: 30n } });
    expect(killed.result).toMatchObject({ exitCode: -1, signal: 0 });
  });

  it("refuses NUL bytes in commands, arguments and environment with InvalidArgument naming the field", async () => {
    const nul = "contains a NUL byte";
    const buffered = await failure(() => p.driver.execTask({ taskId: t.id, command: ["/bin/echo", "a\0b"] }));
    expect(code(buffered)).toBe(3);
    expect(buffered.message).toContain(`command[1]: ${nul}`);
    // With a terminal the argument used to be cut at the NUL and run (`echo a`).
    for (const tty of [false, true]) {
      const streamed = await failure(() => execStream(p, [{ setup: { taskId: t.id, command: ["/bin/echo", "a\0b"], tty } }]));
      expect(code(streamed), `tty ${tty}`).toBe(3);
      expect(streamed.message).toContain(`setup.command[1]: ${nul}`);
    }
    const badEnv = newTask(sh("true"));
    badEnv.config.env = { ...badEnv.config.env, BAD: "x\0y" };
    const env = await failure(() => p.driver.startTask({ task: badEnv.config }));
    expect(code(env)).toBe(3);
    expect(env.message).toContain(`task.env["BAD"]: ${nul}`);
    // Task config arguments reach the executor's LaunchRequest, which names its own field.
    const args = await failure(() => start(p, newTask({ command: "/bin/echo", args: ["ok", "a\0b"] })));
    expect(code(args)).toBe(3);
    expect(args.message).toContain(`args[1]: ${nul}`);
    expect((await p.health.check({ service: "plugin" })).status).toBe(1);
  });

  it("reports 128+N for a command killed by signal N, and exec into an unknown task is NotFound", async () => {
    const o = await execStream(p, [{ setup: { taskId: t.id, command: ["/bin/sh", "-c", "kill -9 $$"] } }]);
    expect(o.exitCode).toBe(137);
    const err = await failure(() => execStream(p, [{ setup: { taskId: "nope", command: ["true"] } }]));
    expect(code(err)).toBe(5);
  });
});

describe("stats", () => {
  it("samples the task's whole process tree: timestamp, cpu with total_ticks, memory, per pid", async () => {
    // A busy child under a shell: CPU shows up only if the tree, not just the root, is sampled.
    const t = await run(sh('sh -c "while :; do :; done" & wait'));
    const ac = new AbortController();
    let seen = 0;
    try {
      for await (const r of p.driver.taskStats({ taskId: t.id, collectionInterval: { nanos: 200_000_000 } }, { signal: ac.signal })) {
        const s = r.stats!;
        expect(s.timestamp).toBeDefined();
        expect(s.aggResourceUsage?.memory?.rss).toBeGreaterThan(0n);
        seen++;
        const cpu = s.aggResourceUsage!.cpu!;
        if (cpu.percent > 0 && cpu.totalTicks > 0 && Object.keys(s.resourceUsageByPid).length >= 2) break;
        if (seen > 50) throw new Error(`no CPU use seen in ${seen} samples: ${JSON.stringify(cpu)}`);
      }
    } finally {
      ac.abort();
    }
    await p.driver.destroyTask({ taskId: t.id, force: true });
  });
});

describe("stats at the collection_interval", () => {
  it("has the executor sample at the stream's interval, not every second (Nomad: executor.Stats(ctx, interval))", async () => {
    const t = await run(sh("exec sleep 600"));
    const ac = new AbortController();
    const at: number[] = [];
    try {
      for await (const r of p.driver.taskStats({ taskId: t.id, collectionInterval: { nanos: 100_000_000 } }, { signal: ac.signal })) {
        const ts = r.stats!.timestamp!;
        at.push(Number(ts.seconds) * 1000 + ts.nanos / 1e6);
        if (at.length === 8) break;
      }
    } finally {
      ac.abort();
    }
    // The executor's own timestamps: a 1 s executor stream cannot take two samples under 1 s apart.
    const gaps = at.slice(1).map((x, i) => x - at[i]!);
    expect(gaps.every((g) => g > 0), `${gaps}`).toBe(true);
    expect(gaps.some((g) => g < 1000), `${gaps}`).toBe(true);
    await p.driver.destroyTask({ taskId: t.id, force: true });
  });
});

describe("stats when the task exits", () => {
  it("ends an open stream cleanly when its task exits, and a stream opened afterwards at once (Nomad's client logs an error status at ERROR)", async () => {
    const t = await run(sh("while [ ! -e go ]; do sleep 0.05; done")); // exits when the test says so
    const samples: number[] = [];
    const open = (async () => {
      for await (const r of p.driver.taskStats({ taskId: t.id, collectionInterval: { nanos: 100_000_000 } })) samples.push(Number(r.stats!.timestamp!.seconds));
    })();
    await until(() => samples.length >= 2, "two samples");
    writeFileSync(join(t.taskDir, "go"), "");
    await p.driver.waitTask({ taskId: t.id });
    await expect(open).resolves.toBeUndefined(); // before: Unknown "task stats: the task is not running"
    const after: unknown[] = [];
    for await (const r of p.driver.taskStats({ taskId: t.id, collectionInterval: { nanos: 100_000_000 } })) after.push(r);
    expect(after).toEqual([]);
    await p.driver.destroyTask({ taskId: t.id, force: true });
  });
});

describe("stats on the agent's topology", () => {
  it("computes total_ticks in the executor from the compute Nomad's SetConfig gave, not from this host", async () => {
    const q = await startPlugin();
    // Three cores of 3000 MHz: no match for this host, whose /proc/cpuinfo the executor would read.
    const cores = [0, 1, 2].map((coreId) => ({ coreId, baseSpeed: 3000n }));
    await q.basePlugin.setConfig({
      msgpackConfig: encode({ create_network: false }),
      nomadConfig: { driver: { Topology: { cores } } } as never,
      pluginApiVersion: "v0.1.0",
    });
    const t = newTask(sh("while :; do :; done"));
    await start(q, t);
    const ac = new AbortController();
    let busy: { percent: number; totalTicks: number } | undefined;
    try {
      for await (const r of q.driver.taskStats({ taskId: t.id, collectionInterval: { nanos: 200_000_000 } }, { signal: ac.signal })) {
        const cpu = r.stats!.aggResourceUsage!.cpu!;
        if (cpu.percent > 0) {
          busy = cpu;
          break;
        }
      }
    } finally {
      ac.abort();
    }
    // Nomad: percent / 100 * TotalCompute / NumCores.
    expect(busy?.totalTicks).toBeCloseTo((busy!.percent / 100) * 3000, 6);
    await q.driver.destroyTask({ taskId: t.id, force: true });
  });
});

describe("stats, two streams on one task", () => {
  it("gives every stream every sample (two consumers at once: the agent's stats hook and a reattached `nomadkit stats`, say)", async () => {
    const t = await run(sh("exec sleep 600"));
    const ac = new AbortController();
    const collect = async () => {
      const seen: string[] = [];
      for await (const r of p.driver.taskStats({ taskId: t.id, collectionInterval: { nanos: 200_000_000 } }, { signal: ac.signal })) {
        const ts = r.stats!.timestamp!;
        seen.push(`${ts.seconds}.${ts.nanos}`);
        if (seen.length === 3) return seen;
      }
      throw new Error("stream ended");
    };
    try {
      const [a, b] = await Promise.all([collect(), collect()]);
      // One executor sample per second, shared: both streams saw the same samples, not half each.
      expect(a.filter((x) => b.includes(x)).length, `${a} vs ${b}`).toBeGreaterThanOrEqual(1);
    } finally {
      ac.abort();
    }
    await p.driver.destroyTask({ taskId: t.id, force: true });
  });
});

describe("paths", () => {
  it("keeps the executor's log next to the task", async () => {
    const t = await run(sh("exit 0"));
    await p.driver.waitTask({ taskId: t.id });
    await until(() => read(join(t.taskDir, "executor.out")).includes("task launched"), "the executor log");
  });

  /** The JS file a task's executor process runs (its command line is `node <file> <config>`). */
  async function executorFile(plugin: PluginClient, t: TestTask): Promise<string | undefined> {
    await start(plugin, t);
    const pid = Number((await plugin.driver.inspectTask({ taskId: t.id })).driver?.attributes.executor_pid);
    const file = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[1];
    await plugin.driver.destroyTask({ taskId: t.id, force: true });
    return file;
  }

  it("runs each task's executor from the executor launcher of the plugin's build (its bundle and code cache)", async () => {
    expect(await executorFile(p, newTask(sh("exec sleep 600")))).toBe(join(dirname(PLUGIN), "..", "dist", "plugin", "nomadkit-rawexec-executor"));
  });

  it("runs executors from NOMADKIT_EXECUTOR_PATH when the operator sets it", async () => {
    const installed = executorBinPath();
    expect(installed).toMatch(/dist\/cjs\/executor\/bin\.js$/);
    const other = await startPlugin({}, { NOMADKIT_EXECUTOR_PATH: installed });
    expect(await executorFile(other, newTask(sh("exec sleep 600")))).toBe(installed);
  });
});
