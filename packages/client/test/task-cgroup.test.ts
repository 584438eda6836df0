// createTaskCgroup on this host's real cgroups (and on a cgroup2 mount of the test's own): Nomad's
// layout for the host's mode, a real process accepted, destroy killing it and removing the
// directories, and a clear refusal where cgroups cannot be made. Root only; every cgroup is named
// nomadkit-test-<pid>… and removed after each test, whatever happened.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { CGROUP_ROOT, canMakeCgroups, mountCgroup2, removeCgroupTree, testCgroups, v2Host } from "./cgroup-fixtures.js";
import { createTaskCgroup, createTaskDirs, parseCpuList, DEFAULT_CGROUP_PARENTS, nomadTaskConfig, TaskCgroupUnavailableError, type TaskCgroup } from "../src/index.js";

const ROOT = CGROUP_ROOT;
const canCgroup = canMakeCgroups;
const tag = `nomadkit-test-${process.pid}`;

const cgroups: TaskCgroup[] = [];
const children: ChildProcess[] = [];
const cleanups: (() => void)[] = [];

afterEach(async () => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
  for (const cg of cgroups.splice(0)) await cg.destroy().catch(() => undefined);
  for (const f of cleanups.splice(0).reverse()) f();
  // Whatever a failed test left: the test's cgroups under every hierarchy.
  for (const d of testCgroups(tag)) removeCgroupTree(d);
});

function make(o: Parameters<typeof createTaskCgroup>[0]): TaskCgroup {
  const cg = createTaskCgroup(o);
  cgroups.push(cg);
  return cg;
}

/** A `sleep` to move into cgroups; resolves `exited` with its signal. */
function sleeper(): { pid: number; exited: Promise<NodeJS.Signals | null> } {
  const child = spawn("sleep", ["1000"], { stdio: "ignore" });
  children.push(child);
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on("exit", (_code, signal) => resolve(signal)));
  return { pid: child.pid!, exited };
}

function cgroupOf(pid: number): string {
  return readFileSync(`/proc/${pid}/cgroup`, "utf8");
}

/** Dead: gone, or a zombie its parent (this process, between two turns of the event loop) has not reaped. */
function dead(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return true;
  }
}

/** A cpuset list ("0-2,5") as CPU numbers, ascending. */
const cpuList = parseCpuList;

/** The CPUs the kernel lets `pid` run on. */
function cpusAllowed(pid: number): number[] {
  return cpuList(/^Cpus_allowed_list:\s*(.*)$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]!);
}

/** Puts `pid` in every directory of the task (on v1 one per controller). */
function enter(cg: TaskCgroup, pid: number): void {
  for (const p of cg.paths) writeFileSync(join(p, "cgroup.procs"), `${pid}\n`);
}

/** The task's own directories, which destroy kills through and removes: not a cpuset cgroup it shares with other tasks (v1). */
function ownDirs(cg: TaskCgroup): string[] {
  return cg.paths.filter((p) => !(cg.shared && p === cg.path));
}

/**
 * The parent levels above the task's own directories: `<parent>/share(.slice)` and `<parent>` above
 * (or, shared, at) `path`, `<parent>` above the others.
 */
function levelsOf(cg: TaskCgroup): string[] {
  return cg.paths.flatMap((p) => (p !== cg.path ? [dirname(p)] : cg.shared ? [p, dirname(p)] : [dirname(p), dirname(dirname(p))]));
}

describe.skipIf(!canCgroup)("createTaskCgroup on this host", () => {
  it(`makes Nomad's ${v2Host ? "v2" : "v1"} layout, which takes a real process; destroy kills it and removes every directory`, async () => {
    const parent = `${tag}-layout`;
    const cg = make({ allocId: "alloc1", task: "web", parent });
    const sleep = sleeper();
    if (v2Host) {
      expect(cg.version).toBe(2);
      expect(cg.path).toBe(`${ROOT}/${parent}/share.slice/alloc1.web.scope`);
      expect(cg.paths).toEqual([cg.path]);
      expect(cg.shared).toBe(false);
      writeFileSync(join(cg.path, "cgroup.procs"), `${sleep.pid}\n`);
      expect(cgroupOf(sleep.pid)).toContain(`0::/${parent}/share.slice/alloc1.web.scope\n`);
    } else {
      expect(cg.version).toBe(1);
      // Nomad's LinuxResourcesPath for a task without reserved cores: the cpuset cgroup all such tasks share.
      expect(cg.path).toBe(`${ROOT}/cpuset/${parent}/share`);
      expect(cg.shared).toBe(true);
      const others = ["freezer", "cpu", "memory"].filter((c) => existsSync(`${ROOT}/${c}/cgroup.procs`));
      expect(others).toContain("freezer"); // this host's; the kill needs it
      expect(cg.paths).toEqual([cg.path, ...others.map((c) => `${ROOT}/${c}/${parent}/alloc1.web`)]);
      // What a new cpuset cgroup lacks, and Nomad gives it: its parent's CPUs and memory nodes.
      for (const file of ["cpuset.cpus", "cpuset.mems"]) {
        expect(readFileSync(join(cg.path, file), "utf8").trim()).toBe(readFileSync(`${ROOT}/cpuset/${file}`, "utf8").trim());
      }
      for (const p of cg.paths) writeFileSync(join(p, "cgroup.procs"), `${sleep.pid}\n`);
      expect(cgroupOf(sleep.pid)).toContain(`:cpuset:/${parent}/share\n`);
      expect(cgroupOf(sleep.pid)).toContain(`:freezer:/${parent}/alloc1.web\n`);
    }
    // A process in a sub-cgroup the task made goes too (on v1 in the freezer hierarchy: the cpuset one would need CPUs).
    const nested = sleeper();
    const sub = join(cg.paths[cg.paths.length === 1 ? 0 : cg.paths.findIndex((p) => p.includes("/freezer/"))]!, "sub");
    mkdirSync(sub);
    writeFileSync(join(sub, "cgroup.procs"), `${nested.pid}\n`);

    await cg.destroy();
    expect(await sleep.exited).toBe("SIGKILL");
    expect(await nested.exited).toBe("SIGKILL");
    for (const p of [...cg.paths, sub]) expect(existsSync(p), p).toBe(false);
    // The parent levels this call made are gone too.
    const tops = v2Host ? [`${ROOT}/${parent}`] : ["cpuset", ...cg.paths.slice(1).map((p) => p.split("/")[4]!)].map((c) => `${ROOT}/${c}/${parent}`);
    for (const p of tops) expect(existsSync(p), p).toBe(false);
    await cg.destroy(); // idempotent
  });

  it("shares the parent between tasks: destroying one keeps it, the last removes it; a parent that existed before is kept", async () => {
    const parent = `${tag}-shared`;
    const a = make({ allocId: "alloc1", task: "a", parent });
    const b = make({ allocId: "alloc1", task: "b", parent });
    const top = v2Host ? `${ROOT}/${parent}` : `${ROOT}/cpuset/${parent}`;
    await a.destroy();
    for (const p of ownDirs(a)) expect(existsSync(p), p).toBe(false);
    for (const p of b.paths) expect(existsSync(p), p).toBe(true);
    await b.destroy();
    expect(existsSync(top)).toBe(false);

    // Someone else's parent (a Nomad agent's, say) stays; the share level made for the task goes.
    const own = v2Host ? `${ROOT}/${tag}-theirs` : `${ROOT}/cpuset/${tag}-theirs`;
    mkdirSync(own);
    if (!v2Host) for (const f of ["cpuset.cpus", "cpuset.mems"]) writeFileSync(join(own, f), readFileSync(`${ROOT}/cpuset/${f}`, "utf8").trim());
    const c = make({ allocId: "alloc2", task: "c", parent: `${tag}-theirs` });
    const sleep = sleeper();
    enter(c, sleep.pid);
    await c.destroy();
    expect(await sleep.exited).toBe("SIGKILL");
    expect(existsSync(own)).toBe(true);
    expect(readdirSync(own).some((d) => d.startsWith("share"))).toBe(false);
  });

  it("destroySync does it synchronously: the task killed, its cgroups and the parent levels this process made removed, a level another task holds kept", async () => {
    const parent = `${tag}-sync`;
    const a = make({ allocId: "alloc1", task: "a", parent });
    const b = make({ allocId: "alloc2", task: "b", parent });
    const sleep = sleeper();
    enter(a, sleep.pid);
    const other = sleeper();
    enter(b, other.pid);
    // A process in a sub-cgroup the task made (on v1 in the freezer hierarchy, as above).
    const nested = sleeper();
    const sub = join(a.paths.find((p) => p.includes("/freezer/")) ?? a.path, "sub");
    mkdirSync(sub);
    writeFileSync(join(sub, "cgroup.procs"), `${nested.pid}\n`);
    expect(() => a.destroySync({ timeoutMs: -1 })).toThrow(/timeoutMs -1 is not a number of milliseconds/);
    expect(a.pids().sort()).toEqual([sleep.pid, nested.pid].sort());

    a.destroySync();
    // Done when it returns: nothing awaited in between.
    expect(dead(sleep.pid)).toBe(true);
    expect(dead(nested.pid)).toBe(true);
    for (const p of [...ownDirs(a), sub]) expect(existsSync(p), p).toBe(false);
    expect(a.pids()).toEqual([]);
    // The parent levels still hold b's cgroups, and b's task runs on.
    for (const p of [...b.paths, ...levelsOf(b)]) expect(existsSync(p), p).toBe(true);
    expect(dead(other.pid)).toBe(false);
    expect(b.pids()).toEqual([other.pid]);

    b.destroySync({ timeoutMs: 2_000 });
    expect(dead(other.pid)).toBe(true);
    for (const p of [...b.paths, ...levelsOf(b)]) expect(existsSync(p), p).toBe(false);
    a.destroySync(); // idempotent
    expect(await sleep.exited).toBe("SIGKILL");
    expect(await nested.exited).toBe("SIGKILL");
    expect(await other.exited).toBe("SIGKILL");
  });

  it.skipIf(v2Host)("on cgroup v1, tasks without reserved cores share one cpuset cgroup, as in Nomad; destroy kills and removes only the task's own cgroups", async () => {
    const parent = `${tag}-cpushare`;
    const a = make({ allocId: "alloc1", task: "a", parent });
    const b = make({ allocId: "alloc2", task: "b", parent });
    expect(b.path).toBe(a.path);
    expect(b.path).toBe(`${ROOT}/cpuset/${parent}/share`);
    // Each task's own cgroups, in the other controllers: <controller>/<parent>/<alloc>.<task>.
    expect(ownDirs(a).length).toBeGreaterThan(0);
    for (const p of ownDirs(a)) expect(p).toMatch(new RegExp(`^${ROOT}/[^/]+/${parent}/alloc1\\.a$`));
    const sa = sleeper();
    enter(a, sa.pid);
    const sb = sleeper();
    enter(b, sb.pid);
    // In the shared cpuset cgroup only: another task's helper, say, or a Nomad agent's task.
    const stranger = sleeper();
    writeFileSync(join(a.path, "cgroup.procs"), `${stranger.pid}\n`);
    expect(a.pids()).toEqual([sa.pid]);
    expect(b.pids()).toEqual([sb.pid]);

    await a.destroy();
    expect(await sa.exited).toBe("SIGKILL");
    expect(dead(sb.pid)).toBe(false);
    expect(dead(stranger.pid)).toBe(false);
    for (const p of ownDirs(a)) expect(existsSync(p), p).toBe(false);
    for (const p of b.paths) expect(existsSync(p), p).toBe(true);
    expect(cgroupOf(sb.pid)).toContain(`:cpuset:/${parent}/share\n`);

    b.destroySync();
    expect(dead(sb.pid)).toBe(true);
    expect(dead(stranger.pid)).toBe(false);
    // The shared level still holds a process: kept.
    expect(existsSync(a.path)).toBe(true);
    expect(readFileSync(join(a.path, "cgroup.procs"), "utf8")).toBe(`${stranger.pid}\n`);
    writeFileSync(`${ROOT}/cpuset/cgroup.procs`, `${stranger.pid}\n`);
    // Empty, yet another process's task (its own freezer cgroup beside it) may still join it: kept.
    const neighbour = `${ROOT}/freezer/${parent}/alloc3.c`;
    mkdirSync(neighbour, { recursive: true }); // with the parent level b's destroy removed
    b.destroySync();
    expect(existsSync(a.path)).toBe(true);
    rmdirSync(neighbour);
    rmdirSync(dirname(neighbour));
    // Once nothing uses it, the level this process made goes with the next destroy.
    b.destroySync();
    expect(existsSync(a.path)).toBe(false);
    expect(existsSync(`${ROOT}/cpuset/${parent}`)).toBe(false);
    expect(await sb.exited).toBe("SIGKILL");
  });

  it.skipIf(v2Host || cpus().length < 2)("on cgroup v1, reserved cores get Nomad's reserve/<alloc>.<task> cpuset cgroup and leave share until the last task holding them is gone", async () => {
    const parent = `${tag}-cores`;
    const all = readFileSync(`${ROOT}/cpuset/cpuset.cpus`, "utf8").trim();
    const last = Math.max(...cpuList(all));
    const rest = cpuList(all).filter((c) => c !== last);
    const plain = make({ allocId: "alloc1", task: "plain", parent });
    const sharing = sleeper();
    enter(plain, sharing.pid);
    expect(cpusAllowed(sharing.pid)).toEqual(cpuList(all));

    const pinned = make({ allocId: "alloc2", task: "pinned", parent, cores: [last] });
    // Nomad's LinuxResourcesPath for a task with reserved cores: its own cpuset cgroup.
    expect(pinned.path).toBe(`${ROOT}/cpuset/${parent}/reserve/alloc2.pinned`);
    expect(pinned.shared).toBe(false);
    expect(pinned.cores).toEqual([last]);
    const others = ["freezer", "cpu", "memory"].filter((c) => existsSync(`${ROOT}/${c}/cgroup.procs`));
    expect(pinned.paths).toEqual([pinned.path, ...others.map((c) => `${ROOT}/${c}/${parent}/alloc2.pinned`)]);
    // The partition: reserve holds the core, share (and the task already in it) lost it.
    expect(cpuList(readFileSync(`${ROOT}/cpuset/${parent}/reserve/cpuset.cpus`, "utf8"))).toEqual([last]);
    expect(cpuList(readFileSync(join(plain.path, "cpuset.cpus"), "utf8"))).toEqual(rest);
    expect(cpusAllowed(sharing.pid)).toEqual(rest);
    const reserved = sleeper();
    enter(pinned, reserved.pid);
    expect(cgroupOf(reserved.pid)).toContain(`:cpuset:/${parent}/reserve/alloc2.pinned\n`);
    expect(cpusAllowed(reserved.pid)).toEqual([last]);
    expect(pinned.pids()).toEqual([reserved.pid]);

    // Another task holding the same core (a replacement placed before the old one stopped): the core stays reserved until both are gone.
    const again = make({ allocId: "alloc3", task: "pinned", parent, cores: [last] });
    await pinned.destroy();
    expect(await reserved.exited).toBe("SIGKILL");
    for (const p of pinned.paths) expect(existsSync(p), p).toBe(false);
    expect(cpusAllowed(sharing.pid)).toEqual(rest);
    expect(cpuList(readFileSync(`${ROOT}/cpuset/${parent}/reserve/cpuset.cpus`, "utf8"))).toEqual([last]);
    // Another process's task holding it (what it wrote is all there is to go by): still reserved after ours are gone.
    const foreign = `${ROOT}/cpuset/${parent}/reserve/alloc9.theirs`;
    mkdirSync(foreign);
    writeFileSync(join(foreign, "cpuset.mems"), readFileSync(`${ROOT}/cpuset/cpuset.mems`, "utf8").trim());
    writeFileSync(join(foreign, "cpuset.cpus"), String(last));
    again.destroySync();
    expect(cpusAllowed(sharing.pid)).toEqual(rest);
    expect(existsSync(`${ROOT}/cpuset/${parent}/reserve`)).toBe(true);
    rmdirSync(foreign);
    again.destroySync(); // idempotent: gives back what nobody holds any more
    // The last one gives it back, and the reserve level this process made goes.
    expect(cpuList(readFileSync(join(plain.path, "cpuset.cpus"), "utf8"))).toEqual(cpuList(all));
    expect(cpusAllowed(sharing.pid)).toEqual(cpuList(all));
    expect(existsSync(`${ROOT}/cpuset/${parent}/reserve`)).toBe(false);
    expect(dead(sharing.pid)).toBe(false);

    // A task without reserved cores set up while a core is reserved does not get it back in share.
    const third = make({ allocId: "alloc4", task: "pinned", parent, cores: [last] });
    await plain.destroy();
    expect(await sharing.exited).toBe("SIGKILL");
    const late = make({ allocId: "alloc5", task: "late", parent });
    expect(cpuList(readFileSync(join(late.path, "cpuset.cpus"), "utf8"))).toEqual(rest);
    await third.destroy();
    expect(cpuList(readFileSync(join(late.path, "cpuset.cpus"), "utf8"))).toEqual(cpuList(all));
    await late.destroy();
    expect(existsSync(`${ROOT}/cpuset/${parent}`)).toBe(false);
  });

  it.skipIf(v2Host)("on cgroup v1, a task with reserved cores does not keep share in use: the last task's destroy leaves no level behind", async () => {
    const parent = `${tag}-coresorder`;
    const plain = make({ allocId: "alloc1", task: "plain", parent });
    const pinned = make({ allocId: "alloc2", task: "pinned", parent, cores: [0] });
    // The task without reserved cores goes first: share has no user left (the other never joins it).
    await plain.destroy();
    expect(existsSync(plain.path)).toBe(false);
    await pinned.destroy();
    expect(testCgroups(tag)).toEqual([]);
  });

  it.skipIf(v2Host || cpus().length < 2)("on cgroup v1, a set-up that fails after its cores were reserved gives them back to share", () => {
    const parent = `${tag}-coresfail`;
    const plain = make({ allocId: "alloc1", task: "plain", parent });
    const last = cpus().length - 1;
    // The task's cgroup is there already (a leftover), with a child on CPU `last`: v1 cpusets hold
    // their children's CPUs, so writing the task's own (0) fails after the partition took CPU 0.
    const mems = readFileSync(`${ROOT}/cpuset/cpuset.mems`, "utf8").trim();
    let dir = `${ROOT}/cpuset/${parent}`;
    for (const level of ["reserve", "alloc2.web", "child"]) {
      dir = join(dir, level);
      mkdirSync(dir);
      writeFileSync(join(dir, "cpuset.mems"), mems);
      writeFileSync(join(dir, "cpuset.cpus"), String(last));
    }
    let err: unknown;
    try {
      make({ allocId: "alloc2", task: "web", parent, cores: [0] });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TaskCgroupUnavailableError);
    // CPU 0 is back in share; `last` stays reserved while the leftover cgroup holds it.
    expect(cpuList(readFileSync(join(plain.path, "cpuset.cpus"), "utf8"))).toEqual(cpus().map((_, i) => i).filter((c) => c !== last));
  });

  it("refuses cores that are not CPU numbers, or not the parent's, leaving nothing behind", () => {
    const parent = `${tag}-badcores`;
    for (const cores of [[-1], [1.5], [Number.NaN]]) {
      expect(() => createTaskCgroup({ allocId: "alloc1", task: "web", parent, cores }), JSON.stringify(cores)).toThrow(/^cores: .* is not a CPU number/);
    }
    const err = (() => {
      try {
        createTaskCgroup({ allocId: "alloc1", task: "web", parent, cores: [0, 4096] });
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(RangeError);
    expect((err as Error).message).toMatch(new RegExp(`^cores 4096: not among the CPUs of .*/${parent} \\(`));
    expect(testCgroups(tag)).toEqual([]);
  });

  it("destroySync throws naming what it could not remove in time, and may be called again", () => {
    const parent = `${tag}-busy`;
    const cg = make({ allocId: "alloc1", task: "web", parent });
    // A mount point cannot be removed: EBUSY, however long destroySync retries.
    const sub = join(ownDirs(cg)[0]!, "mnt");
    mkdirSync(sub);
    execFileSync("mount", ["-t", "tmpfs", "none", sub]);
    let mounted = true;
    cleanups.push(() => mounted && execFileSync("umount", [sub]));
    expect(() => cg.destroySync({ timeoutMs: 50 })).toThrow(`cannot remove the task's cgroups: ${sub}: EBUSY`);
    expect(existsSync(cg.path)).toBe(true);
    execFileSync("umount", [sub]);
    mounted = false;
    cg.destroySync({ timeoutMs: 0 });
    for (const p of cg.paths) expect(existsSync(p), p).toBe(false);
    for (const p of levelsOf(cg)) expect(existsSync(p), p).toBe(false);
  });

  it("reuses a cgroup that exists (a task started again) and refuses ids and names that are not one directory name", async () => {
    const parent = `${tag}-again`;
    const first = make({ allocId: "alloc1", task: "web", parent });
    const again = make({ allocId: "alloc1", task: "web", parent });
    expect(again.path).toBe(first.path);
    await again.destroy();
    expect(existsSync(first.path)).toBe(false);
    for (const task of ["", ".", "..", "a/b", "a\0"]) {
      expect(() => createTaskCgroup({ allocId: "alloc1", task, parent }), JSON.stringify(task)).toThrow(/cannot name a cgroup directory/);
    }
    expect(() => createTaskCgroup({ allocId: "x/..", task: "web", parent })).toThrow(/allocId/);
    for (const bad of ["/", "a/../b", "", "."]) {
      expect(() => createTaskCgroup({ allocId: "alloc1", task: "web", parent: bad }), JSON.stringify(bad)).toThrow(/must name a cgroup below the root/);
    }
    // Nomad's cgroup_parent as written in its v1 default, `/nomad`: the leading slash is not a path from /.
    const slashed = make({ allocId: "alloc2", task: "web", parent: `/${parent}` });
    expect(slashed.path).toBe(first.path.replace("/alloc1.web", "/alloc2.web"));
    // The parent as the client's config names it, for NOMAD_PARENT_CGROUP.
    expect([first.parent, slashed.parent]).toEqual([parent, `/${parent}`]);
  });

  it("says why when it cannot: a read-only cgroup filesystem, no cgroup filesystem; nothing is left behind", () => {
    const root = mkdtempSync(join(tmpdir(), "nk-cgro-"));
    cleanups.push(() => rmSync(root, { recursive: true, force: true }));
    let err: unknown;
    try {
      createTaskCgroup({ allocId: "alloc1", task: "web", root });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TaskCgroupUnavailableError);
    expect((err as TaskCgroupUnavailableError).reason).toMatch(/no cgroup v1 cpuset controller is mounted at .*\/cpuset/);
    expect(() => createTaskCgroup({ allocId: "alloc1", task: "web", root: join(root, "missing") })).toThrow(/no cgroup filesystem at/);

    // The host's hierarchy, mounted read-only as in a container.
    const hierarchy = v2Host ? ROOT : `${ROOT}/cpuset`;
    const ro = v2Host ? join(root, "ro") : join(root, "cpuset");
    mkdirSync(ro);
    execFileSync("mount", ["--bind", hierarchy, ro]);
    cleanups.push(() => execFileSync("umount", [ro]));
    execFileSync("mount", ["-o", "remount,bind,ro", ro]);
    err = undefined;
    try {
      createTaskCgroup({ allocId: "alloc1", task: "web", root: v2Host ? ro : root, parent: `${tag}-ro` });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TaskCgroupUnavailableError);
    expect((err as TaskCgroupUnavailableError).reason).toMatch(/^read-only: .*EROFS/);
    expect(existsSync(`${hierarchy}/${tag}-ro`)).toBe(false);
  });
});

describe("createTaskCgroup on cgroup v2", () => {
  it("makes <parent>/share.slice/<alloc>.<task>.scope, which takes a real process; destroy kills it (cgroup.kill) and removes it", async (t) => {
    const mnt = canCgroup ? mountCgroup2(cleanups, tag) : undefined;
    if (!mnt) return t.skip();
    const parent = `${tag}.slice`;
    const cg = make({ allocId: "alloc1", task: "web", parent, root: mnt });
    expect(cg.version).toBe(2);
    expect(cg.path).toBe(`${mnt}/${parent}/share.slice/alloc1.web.scope`);
    // Controllers enabled down to the scope are the ones the kernel offers this hierarchy (none on a hybrid host).
    const offered = readFileSync(join(mnt, "cgroup.controllers"), "utf8").trim().split(/\s+/).filter(Boolean);
    const enabled = readFileSync(`${mnt}/${parent}/share.slice/cgroup.subtree_control`, "utf8").trim().split(/\s+/).filter(Boolean);
    expect(enabled).toEqual(["cpuset", "cpu", "io", "memory", "pids"].filter((c) => offered.includes(c)));
    const sleep = sleeper();
    writeFileSync(join(cg.path, "cgroup.procs"), `${sleep.pid}\n`);
    expect(cgroupOf(sleep.pid)).toContain(`0::/${parent}/share.slice/alloc1.web.scope\n`);
    await cg.destroy();
    expect(await sleep.exited).toBe("SIGKILL");
    expect(existsSync(cg.path)).toBe(false);
    expect(existsSync(`${mnt}/${parent}`)).toBe(false);
  });

  it("with reserved cores, makes <parent>/reserve.slice/<alloc>.<task>.scope, which takes a real process; its cores leave share.slice while it lives", async (t) => {
    const mnt = canCgroup ? mountCgroup2(cleanups, tag) : undefined;
    if (!mnt) return t.skip();
    const parent = `${tag}-cores.slice`;
    const plain = make({ allocId: "alloc1", task: "plain", parent, root: mnt });
    const cg = make({ allocId: "alloc2", task: "web", parent, root: mnt, cores: [0] });
    expect(cg.path).toBe(`${mnt}/${parent}/reserve.slice/alloc2.web.scope`);
    expect([cg.paths, cg.shared, cg.cores]).toEqual([[cg.path], false, [0]]);
    const sleep = sleeper();
    writeFileSync(join(cg.path, "cgroup.procs"), `${sleep.pid}\n`);
    expect(cgroupOf(sleep.pid)).toContain(`0::/${parent}/reserve.slice/alloc2.web.scope\n`);
    // Only a hierarchy with the cpuset controller (not the unified one of a hybrid host) has CPUs to partition.
    const usable = existsSync(`${mnt}/${parent}/cpuset.cpus.effective`) ? cpuList(readFileSync(`${mnt}/${parent}/cpuset.cpus.effective`, "utf8")) : [];
    if (usable.length > 1) {
      expect(cpuList(readFileSync(`${mnt}/${parent}/reserve.slice/cpuset.cpus`, "utf8"))).toEqual([0]);
      expect(cpuList(readFileSync(`${mnt}/${parent}/share.slice/cpuset.cpus`, "utf8"))).toEqual(usable.filter((c) => c !== 0));
      expect(cpusAllowed(sleep.pid)).toEqual([0]);
    }
    await cg.destroy();
    expect(await sleep.exited).toBe("SIGKILL");
    expect(existsSync(`${mnt}/${parent}/reserve.slice`)).toBe(false);
    if (usable.length > 1) expect(cpuList(readFileSync(`${mnt}/${parent}/share.slice/cpuset.cpus`, "utf8"))).toEqual(usable);
    await plain.destroy();
    expect(existsSync(`${mnt}/${parent}`)).toBe(false);
  });

  it("destroySync kills with cgroup.kill and removes the scope and its parent levels before it returns", async (t) => {
    const mnt = canCgroup ? mountCgroup2(cleanups, tag) : undefined;
    if (!mnt) return t.skip();
    const parent = `${tag}-sync.slice`;
    const cg = make({ allocId: "alloc1", task: "web", parent, root: mnt });
    const sleep = sleeper();
    writeFileSync(join(cg.path, "cgroup.procs"), `${sleep.pid}\n`);
    cg.destroySync({ timeoutMs: 2_000 });
    expect(dead(sleep.pid)).toBe(true);
    expect(existsSync(cg.path)).toBe(false);
    expect(existsSync(`${mnt}/${parent}`)).toBe(false);
    expect(await sleep.exited).toBe("SIGKILL");
  });
});

describe("the cgroup test fixtures", () => {
  it("find a prefix's own cgroups only: another process's whose pid starts with the same digits is not theirs", () => {
    // Fake hierarchies: a directory with a cgroup.procs file is all testCgroups looks for.
    const root = mkdtempSync(join(tmpdir(), "nk-cgfix-"));
    cleanups.push(() => rmSync(root, { recursive: true, force: true }));
    mkdirSync(join(root, "cpuset"));
    writeFileSync(join(root, "cpuset", "cgroup.procs"), "");
    const names = ["nomadkit-test-12", "nomadkit-test-12-run", "nomadkit-test-12.slice", "nomadkit-test-123", "nomadkit-test-123-run", "nomadkit-test-12x"];
    for (const n of names) mkdirSync(join(root, "cpuset", n));
    expect(testCgroups("nomadkit-test-12", root).sort()).toEqual(names.slice(0, 3).map((n) => join(root, "cpuset", n)).sort());
  });
});

describe("nomadTaskConfig", () => {
  it("names the task's cgroup in resources.linux_resources.cpuset_cgroup when given one", () => {
    const alloc = mkdtempSync(join(tmpdir(), "nk-taskcg-"));
    cleanups.push(() => rmSync(alloc, { recursive: true, force: true }));
    const dirs = createTaskDirs(alloc, "web");
    const o = { name: "web", dirs, msgpackDriverConfig: new Uint8Array(), stdoutPath: "/o", stderrPath: "/e" };
    const path = `/sys/fs/cgroup/cpuset/${DEFAULT_CGROUP_PARENTS.v1}/share`;
    expect(nomadTaskConfig({ ...o, cpusetCgroup: path }).resources?.linuxResources?.cpusetCgroup).toBe(path);
    expect(nomadTaskConfig(o).resources?.linuxResources).not.toHaveProperty("cpusetCgroup");
  });

  it("sets NOMAD_PARENT_CGROUP to the cgroup parent when given one, as Nomad's task env builder does", () => {
    const alloc = mkdtempSync(join(tmpdir(), "nk-taskcg-"));
    cleanups.push(() => rmSync(alloc, { recursive: true, force: true }));
    const o = { name: "web", dirs: createTaskDirs(alloc, "web"), msgpackDriverConfig: new Uint8Array(), stdoutPath: "/o", stderrPath: "/e", hostEnv: {} };
    expect(nomadTaskConfig({ ...o, cgroupParent: "custom.slice" }).env?.NOMAD_PARENT_CGROUP).toBe("custom.slice");
    expect(nomadTaskConfig(o).env).not.toHaveProperty("NOMAD_PARENT_CGROUP");
  });

  it("with reserved cores, lists them in linux_resources.cpuset_cpus and NOMAD_CPU_CORES and charges their compute, as Nomad's task runner", () => {
    const alloc = mkdtempSync(join(tmpdir(), "nk-taskcores-"));
    cleanups.push(() => rmSync(alloc, { recursive: true, force: true }));
    const o = { name: "web", dirs: createTaskDirs(alloc, "web"), msgpackDriverConfig: new Uint8Array(), stdoutPath: "/o", stderrPath: "/e", hostEnv: {}, totalComputeMhz: 8000 };
    const pinned = nomadTaskConfig({ ...o, cores: [5, 0, 1, 2] });
    // buildTaskConfig joins ReservedCores in order; the env builder writes them as an idset.
    expect(pinned.resources?.linuxResources?.cpusetCpus).toBe("5,0,1,2");
    expect(pinned.env?.NOMAD_CPU_CORES).toBe("0-2,5");
    const shares = BigInt(Math.floor(8000 / cpus().length) * 4);
    expect(pinned.resources?.allocatedResources?.cpu?.cpuShares).toBe(shares);
    expect(pinned.resources?.linuxResources?.cpuShares).toBe(shares);
    expect(pinned.env?.NOMAD_CPU_LIMIT).toBe(String(shares));
    expect(nomadTaskConfig({ ...o, cores: [1], cpuMhz: 700 }).resources?.linuxResources?.cpuShares).toBe(700n);
    const plain = nomadTaskConfig(o);
    expect(plain.resources?.linuxResources).not.toHaveProperty("cpusetCpus");
    expect(plain.env).not.toHaveProperty("NOMAD_CPU_CORES");
    expect(() => nomadTaskConfig({ ...o, cores: [-1] })).toThrow(/cores: -1 is not a CPU number/);
  });

  it("with memory_max, the hard limit is the larger of the two and the reservation stays memory (Nomad's buildTaskConfig)", () => {
    const alloc = mkdtempSync(join(tmpdir(), "nk-taskmem-"));
    cleanups.push(() => rmSync(alloc, { recursive: true, force: true }));
    const o = { name: "web", dirs: createTaskDirs(alloc, "web"), msgpackDriverConfig: new Uint8Array(), stdoutPath: "/o", stderrPath: "/e", memoryMb: 256 };
    const over = nomadTaskConfig({ ...o, memoryMaxMb: 1024 });
    expect(over.resources?.allocatedResources?.memory).toMatchObject({ memoryMb: 256n, memoryMaxMb: 1024n });
    expect(over.resources?.linuxResources?.memoryLimitBytes).toBe(1024n * 1024n * 1024n);
    expect(over.env).toMatchObject({ NOMAD_MEMORY_LIMIT: "256", NOMAD_MEMORY_MAX_LIMIT: "1024" });
    const plain = nomadTaskConfig(o);
    expect(plain.resources?.linuxResources?.memoryLimitBytes).toBe(256n * 1024n * 1024n);
    expect(plain.env).not.toHaveProperty("NOMAD_MEMORY_MAX_LIMIT");
  });
});
