// Network isolation (root only): with create_network the driver owns the group namespace
// (CreateNetwork / DestroyNetwork); either way a task given a network_isolation_spec runs inside it.
import { spawnSync } from "node:child_process";
import { existsSync, readlinkSync, statSync } from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { cleanup, execStream, isRoot, newAlloc, newTask, read, sh, start, startPlugin, until } from "./helpers.js";

const hasIp = spawnSync("ip", ["-V"]).status === 0;
const leftovers: string[] = [];

afterAll(async () => {
  await cleanup();
  for (const name of leftovers) spawnSync("ip", ["netns", "delete", name]);
});

/** The interfaces a process in the task sees (/proc/net/dev is per network namespace). */
function interfaces(procNetDev: string): string[] {
  return procNetDev
    .split("\n")
    .slice(2)
    .map((l) => l.split(":")[0]!.trim())
    .filter(Boolean)
    .sort();
}

describe.skipIf(!isRoot || !hasIp)("network namespaces (root)", () => {
  it("create_network: must_create_network, idempotent CreateNetwork, tasks inside, DestroyNetwork", async () => {
    const p = await startPlugin({ create_network: true });
    const { capabilities } = await p.driver.capabilities({});
    expect(capabilities?.mustCreateNetwork).toBe(true);
    expect(capabilities?.networkIsolationModes).toContain(1); // GROUP

    const alloc = newAlloc();
    leftovers.push(alloc.allocId);
    const created = await p.driver.createNetwork({ allocId: alloc.allocId, hostname: "web-1" });
    expect(created.created).toBe(true);
    const spec = created.isolationSpec!;
    expect(spec.mode).toBe(1); // GROUP
    expect(spec.path).toBe(`/var/run/netns/${alloc.allocId}`);
    expect(spec.hostsConfig?.hostname).toBe("web-1");
    const again = await p.driver.createNetwork({ allocId: alloc.allocId, hostname: "web-1" });
    expect(again.created).toBe(false);
    expect(again.isolationSpec?.path).toBe(spec.path);

    const ns = `net:[${statSync(spec.path).ino}]`;
    const t = newTask(sh("readlink /proc/self/ns/net; exec sleep 600"), { alloc, networkIsolationSpec: spec });
    await start(p, t);
    await until(() => read(t.stdoutPath).includes("net:["), "the task to report its namespace");
    expect(read(t.stdoutPath).trim()).toBe(ns);
    expect(ns).not.toBe(readlinkSync("/proc/self/ns/net"));
    // exec runs in the task's namespace too: only loopback there.
    const o = await execStream(p, [{ setup: { taskId: t.id, command: ["cat", "/proc/net/dev"] } }]);
    expect(interfaces(o.stdout)).toEqual(["lo"]);

    await p.driver.stopTask({ taskId: t.id, signal: "SIGTERM", timeout: { seconds: 30n } });
    await p.driver.waitTask({ taskId: t.id });
    await p.driver.destroyTask({ taskId: t.id, force: true });
    await p.driver.destroyNetwork({ allocId: alloc.allocId, isolationSpec: spec });
    expect(existsSync(spec.path)).toBe(false);
    await p.driver.destroyNetwork({ allocId: alloc.allocId, isolationSpec: spec }); // idempotent
  });

  it("without create_network, a task given Nomad's namespace runs inside it", async () => {
    const p = await startPlugin();
    expect((await p.driver.capabilities({})).capabilities?.mustCreateNetwork).toBe(false);
    const alloc = newAlloc();
    // Nomad's own network hook made this namespace.
    expect(spawnSync("ip", ["netns", "add", alloc.allocId]).status).toBe(0);
    leftovers.push(alloc.allocId);
    const path = `/var/run/netns/${alloc.allocId}`;
    const t = newTask(sh("readlink /proc/self/ns/net"), { alloc, networkIsolationSpec: { mode: 1, path } });
    await start(p, t);
    expect((await p.driver.waitTask({ taskId: t.id })).result?.exitCode).toBe(0);
    expect(read(t.stdoutPath).trim()).toBe(`net:[${statSync(path).ino}]`);
    await p.driver.destroyTask({ taskId: t.id, force: false });
  });
});
