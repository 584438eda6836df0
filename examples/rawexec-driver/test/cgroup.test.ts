// The cgroup Nomad's client makes for a task (resources.linux_resources.cpuset_cgroup), made here by
// @nomadkit/client's createTaskCgroup: the driver's executor runs the task inside it, exec'd
// commands too, and it is gone, with nothing left in it, after DestroyTask and its removal.
import { existsSync, readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { alive, CGROUP_PARENT, cgroupsUnavailable, cleanup, execStream, isRoot, newTask, sh, start, startPlugin, until } from "./helpers.js";

afterEach(cleanup);

const v2 = existsSync("/sys/fs/cgroup/cgroup.controllers");

/** The lines of /proc/<pid>/cgroup that name the task's cgroup for this host's mode. */
function expectedLines(t: { allocId: string; name: string }): string[] {
  const leaf = `${t.allocId}.${t.name}`;
  if (v2) return [`0::/${CGROUP_PARENT}/share.slice/${leaf}.scope`];
  return [`:cpuset:/${CGROUP_PARENT}/share/${leaf}`, `:freezer:/${CGROUP_PARENT}/${leaf}`];
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
    for (const d of t.cgroup!.paths) expect(existsSync(d), d).toBe(false);
  }, 120_000);
});
