// argv[0] of a command exec'd into a task, through the real wire: Nomad's executor runs it with Go's
// exec.Command(name, args...), which resolves only the path and keeps Args[0] = the name as typed.
// Every exec form (buffered ExecTask, streaming without and with a tty) and every way the executor
// starts it (plain, through the cgroup gate, as another user) must keep it too.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import type { PluginClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  cgroupsUnavailable,
  cleanup,
  execStream,
  isRoot,
  newAlloc,
  newTask,
  sh,
  start,
  startPlugin,
  type TestTask,
} from "./helpers.js";

let p: PluginClient;
const started: TestTask[] = [];
const namespaces: string[] = [];
const hasIp = spawnSync("ip", ["-V"]).status === 0;

beforeAll(async () => {
  p = await startPlugin();
});
afterAll(async () => {
  for (const t of started)
    await p.driver
      .destroyTask({ taskId: t.id, force: true })
      .catch(() => undefined);
  await cleanup();
  for (const name of namespaces) spawnSync("ip", ["netns", "delete", name]);
});

async function run(
  extra: Parameters<typeof newTask>[1],
  plugin = p,
): Promise<TestTask> {
  const t = newTask(sh("exec sleep 600"), extra);
  await start(plugin, t);
  started.push(t);
  return t;
}

/** The command line the exec'd process sees, its NULs as spaces (cat prints /proc/self/cmdline). */
async function cmdlines(
  t: TestTask,
  command: string[],
  plugin = p,
): Promise<{ buffered: string; streamed: string; tty: string }> {
  const res = await plugin.driver.execTask({
    taskId: t.id,
    command,
    timeout: { seconds: 30n },
  });
  const buffered = Buffer.from(res.stdout).toString();
  const streamed = (
    await execStream(plugin, [{ setup: { taskId: t.id, command } }])
  ).stdout;
  const tty = (
    await execStream(plugin, [{ setup: { taskId: t.id, command, tty: true } }])
  ).stdout;
  const show = (s: string) => s.replaceAll("\0", " ").trim();
  return { buffered: show(buffered), streamed: show(streamed), tty: show(tty) };
}

const typed = ["cat", "/proc/self/cmdline"];
const asTyped = {
  buffered: "cat /proc/self/cmdline",
  streamed: "cat /proc/self/cmdline",
  tty: "cat /proc/self/cmdline",
};

describe("argv[0] of an exec'd command is the name as typed, as Nomad's exec.Command keeps it", () => {
  it("without cgroups", async () => {
    const t = await run({ cgroup: false });
    expect(await cmdlines(t, typed)).toEqual(asTyped);
  });

  it.skipIf(cgroupsUnavailable() !== undefined)(
    "inside the task's cgroups (behind the cgroup gate)",
    async () => {
      const t = await run({ cgroup: true });
      expect(await cmdlines(t, typed)).toEqual(asTyped);
    },
  );

  it.skipIf(cgroupsUnavailable() !== undefined)(
    "inside the task's cgroups behind the shell gate (NOMADKIT_GATE=sh, as where perl is missing)",
    async () => {
      const shGate = await startPlugin(
        {},
        { ...process.env, NOMADKIT_GATE: "sh" },
      );
      const t = await run({ cgroup: true }, shGate);
      expect(await cmdlines(t, typed, shGate)).toEqual(asTyped);
      await shGate.driver.destroyTask({ taskId: t.id, force: true });
    },
  );

  it.skipIf(!isRoot || !hasIp)(
    "in the allocation's network namespace (behind nsenter)",
    async () => {
      const alloc = newAlloc();
      expect(spawnSync("ip", ["netns", "add", alloc.allocId]).status).toBe(0);
      namespaces.push(alloc.allocId);
      const t = await run({
        alloc,
        cgroup: false,
        networkIsolationSpec: {
          mode: 1,
          path: `/var/run/netns/${alloc.allocId}`,
        },
      });
      expect(await cmdlines(t, typed)).toEqual(asTyped);
    },
  );

  it.skipIf(!isRoot)(
    "as the task's user (behind setpriv), in its cgroups where there are any",
    async () => {
      const t = await run({ user: "nobody" });
      expect(await cmdlines(t, typed)).toEqual(asTyped);
    },
  );

  it.skipIf(!isRoot)(
    "as the task's user with a loader variable set (behind setpriv and env)",
    async () => {
      // LD_LIBRARY_PATH reaches the command after the user switch, through coreutils' env.
      const t = await run({
        user: "nobody",
        cgroup: false,
        env: { PATH: "/usr/bin:/bin", LD_LIBRARY_PATH: "/nonexistent" },
      });
      expect(await cmdlines(t, typed)).toEqual(asTyped);
    },
  );

  it("keeps a relative name with a slash as typed, and an absolute one", async () => {
    const t = await run({ cgroup: false });
    // The task directory is the session's working directory: ../../../../ climbs to / from it.
    const cat = existsSync("/usr/bin/cat") ? "/usr/bin/cat" : "/bin/cat";
    const rel = `${"../".repeat(t.taskDir.split("/").length)}${cat.slice(1)}`;
    expect(await cmdlines(t, [rel, "/proc/self/cmdline"])).toEqual({
      buffered: `${rel} /proc/self/cmdline`,
      streamed: `${rel} /proc/self/cmdline`,
      tty: `${rel} /proc/self/cmdline`,
    });
    expect((await cmdlines(t, [cat, "/proc/self/cmdline"])).streamed).toBe(
      `${cat} /proc/self/cmdline`,
    );
  });
});
