// The cgroup Nomad's client makes for a task (resources.linux_resources.cpuset_cgroup), made here by
// @nomadkit/client's createTaskCgroup: the driver's executor runs the task inside it, exec'd
// commands too, and it is gone, with nothing left in it, after DestroyTask and its removal.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { parseCpuList } from "@nomadkit/client";
import { alive, CGROUP_PARENT, cgroupsUnavailable, cleanup, execStream, isRoot, newTask, read, sh, start, startPlugin, until } from "./helpers.js";

afterEach(cleanup);

const v2 = existsSync("/sys/fs/cgroup/cgroup.controllers");

/** A cpuset list ("0-2,5") as CPU numbers, ascending. */
const cpuList = parseCpuList;

/** The CPUs the kernel lets `pid` run on. */
function cpusAllowed(pid: number): number[] {
  return cpuList(/^Cpus_allowed_list:\s*(.*)$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]!);
}

/** The lines of /proc/<pid>/cgroup that name the task's cgroup for this host's mode. */
function expectedLines(t: { allocId: string; name: string }): string[] {
  const leaf = `${t.allocId}.${t.name}`;
  if (v2) return [`0::/${CGROUP_PARENT}/share.slice/${leaf}.scope`];
  // Nomad's v1 layout: the cpuset cgroup all tasks without reserved cores share, the task's own freezer one.
  return [`:cpuset:/${CGROUP_PARENT}/share`, `:freezer:/${CGROUP_PARENT}/${leaf}`];
}

describe("the task's cgroup, made as Nomad's client makes it", () => {
  it("holds the task and what exec runs in it; DestroyTask and the cgroup's removal leave nothing", async (ctx) => {
    const why = isRoot ? cgroupsUnavailable() : "not root";
    if (why) return ctx.skip(why);
    const p = await startPlugin();
    const t = newTask(sh("exec sleep 600"), { cgroup: true });
    expect(t.config.resources?.linuxResources?.cpusetCgroup).toBe(t.cgroup!.path);
    const handle = await start(p, t);
    const { driver } = JSON.parse(new TextDecoder().decode(handle.driverState)) as { driver: { pid: number } };
    const pid = driver.pid;
    const lines = readFileSync(`/proc/${pid}/cgroup`, "utf8");
    for (const l of expectedLines(t)) expect(lines).toContain(`${l}\n`);
    expect(t.cgroup!.pids()).toContain(pid);

    // A command exec'd into the task joins it too.
    const out = await execStream(p, [{ setup: { taskId: t.id, command: ["/bin/cat", "/proc/self/cgroup"] } }]);
    expect(out.exitCode).toBe(0);
    for (const l of expectedLines(t)) expect(out.stdout).toContain(`${l}\n`);

    await p.driver.destroyTask({ taskId: t.id, force: true });
    await until(() => !alive(pid), `task pid ${pid} to be killed`);
    await t.cgroup!.destroy();
    // The task's own; on cgroup v1 the cpuset cgroup is shared (other tasks of the parent, the probe's here) and stays.
    for (const d of t.cgroup!.paths) if (!(t.cgroup!.shared && d === t.cgroup!.path)) expect(existsSync(d), d).toBe(false);
  }, 120_000);

  it("with reserved cores, the task runs in its own reserve cpuset cgroup on those cores only, which the tasks without them lose meanwhile", async (ctx) => {
    const why = isRoot ? cgroupsUnavailable() : "not root";
    if (why) return ctx.skip(why);
    const usable = cpuList(readFileSync(v2 ? "/sys/fs/cgroup/cpuset.cpus.effective" : "/sys/fs/cgroup/cpuset/cpuset.cpus", "utf8"));
    if (usable.length < 2) return ctx.skip("fewer than two CPUs to partition");
    const last = usable[usable.length - 1]!;
    const p = await startPlugin();
    const t = newTask(sh("exec sleep 600"), { cgroup: true, cores: [last] });
    expect(t.config.resources?.linuxResources?.cpusetCpus).toBe(String(last));
    const handle = await start(p, t);
    const { driver } = JSON.parse(new TextDecoder().decode(handle.driverState)) as { driver: { pid: number } };
    const leaf = `${t.allocId}.${t.name}`;
    const lines = readFileSync(`/proc/${driver.pid}/cgroup`, "utf8");
    expect(lines).toContain(v2 ? `0::/${CGROUP_PARENT}/reserve.slice/${leaf}.scope\n` : `:cpuset:/${CGROUP_PARENT}/reserve/${leaf}\n`);
    expect(cpusAllowed(driver.pid)).toEqual([last]);
    // A task without reserved cores started meanwhile runs on the others.
    const other = newTask(sh("exec sleep 600"), { cgroup: true });
    const otherHandle = await start(p, other);
    const otherPid = (JSON.parse(new TextDecoder().decode(otherHandle.driverState)) as { driver: { pid: number } }).driver.pid;
    expect(cpusAllowed(otherPid)).toEqual(usable.filter((c) => c !== last));

    await p.driver.destroyTask({ taskId: t.id, force: true });
    await until(() => !alive(driver.pid), `task pid ${driver.pid} to be killed`);
    await t.cgroup!.destroy();
    for (const d of t.cgroup!.paths) expect(existsSync(d), d).toBe(false);
    // The core is back for the tasks without reserved cores.
    expect(cpusAllowed(otherPid)).toEqual(usable);
  }, 120_000);

  it("when the task's executor is killed, WaitTask and DestroyTask still end everything in the cgroup: exec'd commands and children that left the task's group", async (ctx) => {
    const why = isRoot ? cgroupsUnavailable() : "not root";
    if (why) return ctx.skip(why);
    const p = await startPlugin();
    // A child in a session of its own (out of the task's process group), then the task itself.
    const t = newTask(sh("setsid sleep 600 & echo $! > escapee; exec sleep 600"), { cgroup: true });
    const handle = await start(p, t);
    const { executor, driver } = JSON.parse(new TextDecoder().decode(handle.driverState)) as { executor: { pid: number }; driver: { pid: number } };
    const escapee = Number(await until(() => read(join(t.taskDir, "escapee")).trim(), "the escapee's pid"));
    // An exec session (no tty) still running: its command is the executor's child, in a group of its own.
    const session = execStream(p, [{ setup: { taskId: t.id, command: ["/bin/sh", "-c", "echo $$ > exec.pid; exec sleep 600"] } }]).catch((err: Error) => err);
    const execPid = Number(await until(() => read(join(t.taskDir, "exec.pid")).trim(), "the exec'd command's pid"));
    await until(() => [driver.pid, escapee, execPid].every((pid) => t.cgroup!.pids().includes(pid)), "all three in the task's cgroup");

    // The executor dies (the OOM killer, an operator's kill -9): nothing is left to stop what runs in the cgroup.
    process.kill(executor.pid, "SIGKILL");
    const wait = await p.driver.waitTask({ taskId: t.id });
    expect(wait.result?.exitCode).toBe(-1);
    // The exit is reported once nothing of the task runs on, as when the executor stops it.
    expect(t.cgroup!.pids()).toEqual([]);
    expect(alive(escapee) || alive(execPid)).toBe(false);
    await session;
    await p.driver.destroyTask({ taskId: t.id, force: true });
  }, 120_000);

  it("so do DestroyTask after the executor died with the task already exited, and a RecoverTask that finds it gone", async (ctx) => {
    const why = isRoot ? cgroupsUnavailable() : "not root";
    if (why) return ctx.skip(why);
    const cases = ["destroy", "recover"] as const;
    for (const how of cases) {
      const p = await startPlugin();
      // Exits at once, leaving a child in a session of its own in the cgroup (the executor's Shutdown ends it).
      const t = newTask(sh("setsid sleep 600 & echo $! > escapee"), { cgroup: true });
      const handle = await start(p, t);
      const { executor } = JSON.parse(new TextDecoder().decode(handle.driverState)) as { executor: { pid: number } };
      expect((await p.driver.waitTask({ taskId: t.id })).result?.exitCode).toBe(0);
      const escapee = Number(await until(() => read(join(t.taskDir, "escapee")).trim(), "the escapee's pid"));
      expect(t.cgroup!.pids()).toContain(escapee);
      if (how === "destroy") {
        process.kill(executor.pid, "SIGKILL");
        await until(() => !alive(executor.pid), "the executor to die");
        await p.driver.destroyTask({ taskId: t.id, force: false });
      } else {
        // The agent restarts, and the executor died meanwhile: recovery fails, Nomad starts the task again.
        process.kill(p.pid, "SIGKILL");
        process.kill(executor.pid, "SIGKILL");
        await until(() => !alive(executor.pid), "the executor to die");
        const q = await startPlugin();
        await expect(q.driver.recoverTask({ taskId: t.id, handle })).rejects.toThrow(/cannot reattach/);
      }
      expect(t.cgroup!.pids(), how).toEqual([]);
      expect(alive(escapee), how).toBe(false);
    }
  }, 120_000);
});
