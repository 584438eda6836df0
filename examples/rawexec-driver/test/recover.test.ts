// Tasks outlive the plugin: SIGKILL the plugin, start a new one, RecoverTask with the persisted
// handle, and the task is the same process, still counting, and fully controllable.
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { PluginShutdownError, restoredTaskHandle } from "@nomadkit/client";
import { decodeExecutorState, reattachExecutor } from "@nomadkit/server/executor";
import { afterAll, describe, expect, it } from "vitest";
import { alive, cleanup, execStream, isRoot, newAlloc, newTask, read, sh, start, startPlugin, until } from "./helpers.js";

afterAll(cleanup);

/** The counter file's lines as numbers. */
function counts(path: string): number[] {
  return read(path)
    .split("\n")
    .filter(Boolean)
    .map(Number);
}

function driverState(handle: { driverState: Uint8Array }): { executor: { pid: number }; driver: { pid: number; startedAt: string } } {
  return JSON.parse(new TextDecoder().decode(handle.driverState)) as never;
}

/** A task (`sleep 600`) started by a plugin that then dies hard: its handle and driver state. */
async function orphanedTask() {
  const first = await startPlugin();
  const t = newTask(sh("exec sleep 600"));
  const handle = await start(first, t);
  process.kill(first.pid, "SIGKILL");
  await first.exited;
  return { t, handle, state: driverState(handle) };
}

describe("recover after a plugin crash", () => {
  it("re-attaches to the running task: it never stopped, and Wait / exec / Stop work", async () => {
    const first = await startPlugin();
    // Appends 1, 2, 3, ... to ./counter: a restart would start again at 1.
    const t = newTask(sh("i=0; while :; do i=$((i+1)); echo $i >> counter; sleep 0.1; done"));
    const counter = join(t.taskDir, "counter");
    const handle = await start(first, t);
    const state = driverState(handle);
    expect(alive(state.executor.pid)).toBe(true);
    expect(alive(state.driver.pid)).toBe(true);
    const startedAt = (await first.driver.inspectTask({ taskId: t.id })).task!.startedAt!;
    await until(() => counts(counter).length >= 3, "the task to count");

    // The agent's plugin dies hard; the executor and the task must not notice.
    process.kill(first.pid, "SIGKILL");
    await first.exited;
    const atCrash = counts(counter).length;
    expect(alive(state.executor.pid)).toBe(true);

    const second = await startPlugin();
    expect(second.pid).not.toBe(first.pid);
    await second.driver.recoverTask({ taskId: t.id, handle });
    await until(() => counts(counter).length >= atCrash + 3, "the task to keep counting after the restart");
    const seq = counts(counter);
    expect(seq).toEqual(seq.map((_, i) => i + 1)); // one unbroken sequence: the task never restarted

    const insp = await second.driver.inspectTask({ taskId: t.id });
    expect(insp.task?.state).toBe(1);
    expect(insp.task?.startedAt).toEqual(startedAt);
    expect(insp.driver?.attributes.pid).toBe(String(state.driver.pid));

    // A second RecoverTask for a known task is a no-op, as Nomad expects.
    await second.driver.recoverTask({ taskId: t.id, handle });

    const buffered = await second.driver.execTask({ taskId: t.id, command: ["/bin/sh", "-c", "tail -n 1 counter"], timeout: { seconds: 30n } });
    expect(buffered.result?.exitCode).toBe(0);
    expect(Number(Buffer.from(buffered.stdout).toString().trim())).toBeGreaterThan(atCrash);
    const streamed = await execStream(second, [{ setup: { taskId: t.id, command: ["/bin/sh", "-c", "echo recovered; exit 5"] } }]);
    expect(streamed).toMatchObject({ stdout: "recovered\n", exitCode: 5, exited: 1 });

    const waiting = second.driver.waitTask({ taskId: t.id });
    await second.driver.stopTask({ taskId: t.id, signal: "SIGTERM", timeout: { seconds: 30n } });
    expect((await waiting).result).toMatchObject({ signal: 15, exitCode: 143 });
    expect(alive(state.driver.pid)).toBe(false);
    await second.driver.destroyTask({ taskId: t.id, force: false });
    await until(() => !alive(state.executor.pid), "the executor to exit after destroy");
  });

  it("re-attaches after an agent restart, from a handle without the config block (Nomad's state database drops it)", async () => {
    const { t, handle, state } = await orphanedTask();
    const second = await startPlugin();
    // The reference driver's `command` is required: decoding the missing block would fail the recovery.
    await second.driver.recoverTask({ taskId: t.id, handle: restoredTaskHandle(handle) });
    expect((await second.driver.inspectTask({ taskId: t.id })).task?.state).toBe(1);
    const streamed = await execStream(second, [{ setup: { taskId: t.id, command: ["/bin/sh", "-c", "echo recovered"] } }]);
    expect(streamed).toMatchObject({ stdout: "recovered\n", exitCode: 0 });
    const waiting = second.driver.waitTask({ taskId: t.id });
    await second.driver.stopTask({ taskId: t.id, signal: "SIGTERM", timeout: { seconds: 30n } });
    expect((await waiting).result).toMatchObject({ signal: 15 });
    expect(alive(state.driver.pid)).toBe(false);
    await second.driver.destroyTask({ taskId: t.id, force: false });
  });

  it("reports the exit time the executor saw, not the re-attach time, for a task that ended while the plugin was down", async () => {
    const first = await startPlugin();
    const t = newTask(sh("exit 3"));
    const handle = await start(first, t);
    process.kill(first.pid, "SIGKILL");
    await first.exited;
    // The executor's own record of the exit (Nomad's ProcessState.Time), asked on a side connection.
    const side = await reattachExecutor(decodeExecutorState(handle.driverState).executor);
    const { process: ps } = await side.client.wait({});
    side.close();
    const exitedAt = Number(ps!.time!.seconds) * 1000 + Math.floor(ps!.time!.nanos / 1e6);
    // A later millisecond than the exit before re-attaching: a re-attach time could not equal it.
    await until(() => Date.now() > exitedAt, "the clock to pass the exit time");

    const second = await startPlugin();
    await second.driver.recoverTask({ taskId: t.id, handle });
    expect((await second.driver.waitTask({ taskId: t.id })).result?.exitCode).toBe(3);
    const { task } = await second.driver.inspectTask({ taskId: t.id });
    const c = task!.completedAt!;
    expect(Number(c.seconds) * 1000 + Math.floor(c.nanos / 1e6)).toBe(exitedAt);
    await second.driver.destroyTask({ taskId: t.id, force: true });
  });

  it("reports an error (and keeps serving) when the task's executor is gone", async () => {
    const { t, handle, state } = await orphanedTask();
    // Both the executor and its task die while no plugin runs.
    process.kill(state.executor.pid, "SIGKILL");
    process.kill(state.driver.pid, "SIGKILL");
    await until(() => !alive(state.executor.pid) && !alive(state.driver.pid), "the executor and task to die");

    const second = await startPlugin();
    let err: Error | undefined;
    try {
      await second.driver.recoverTask({ taskId: t.id, handle });
    } catch (e) {
      err = e as Error;
    }
    expect(err?.message).toContain(`cannot reattach to its executor (pid ${state.executor.pid})`);
    expect((err as Error & { code?: number }).code).toBe(9); // FailedPrecondition
    expect((await second.health.check({ service: "plugin" })).status).toBe(1);
    const bad = { ...handle, driverState: new TextEncoder().encode("{nope") };
    const badErr = await second.driver.recoverTask({ taskId: t.id, handle: bad }).then(
      () => undefined,
      (e: Error & { code?: number }) => e,
    );
    expect(badErr?.code).toBe(3);
    expect(badErr?.message).toContain("driver_state");
  });

  it.skipIf(!isRoot || !existsSync("/proc/sys/kernel/ns_last_pid"))(
    "a failed recovery of a dead task's handle leaves alone a sibling task's process that got its pid",
    async () => {
      // Nomad recovers every task with a saved handle after an agent restart, dead ones included
      // ("RecoverTask should fail if the Task wasn't running"): the prestart task's pid may be a
      // sibling's by then. Same allocation, so NOMAD_ALLOC_ID alone cannot tell them apart.
      const first = await startPlugin();
      const alloc = newAlloc();
      const init = newTask(sh("exit 0"), { alloc, name: "init", cgroup: false });
      const hi = await start(first, init);
      const initPid = driverState(hi).driver.pid;
      await first.driver.waitTask({ taskId: init.id });
      await first.driver.destroyTask({ taskId: init.id, force: true });
      await until(() => !alive(driverState(hi).executor.pid) && !alive(initPid), "init and its executor to be gone");
      // The main task forks a worker that gets init's pid (ns_last_pid makes the reuse happen now).
      const main = newTask(
        sh(`for i in 1 2 3 4 5 6 7 8 9 10; do echo ${initPid - 1} > /proc/sys/kernel/ns_last_pid; sleep 600 & if [ $! = ${initPid} ]; then echo worker=$!; break; fi; kill $!; done; wait`),
        { alloc, name: "main", cgroup: false },
      );
      const hm = await start(first, main);
      const worker = Number(await until(() => /worker=(\d+)/.exec(read(main.stdoutPath))?.[1], "the worker to get init's pid"));
      expect(worker).toBe(initPid);

      await first.kill(); // the agent restarts
      const second = await startPlugin();
      await second.driver.recoverTask({ taskId: main.id, handle: restoredTaskHandle(hm) });
      const err = await second.driver.recoverTask({ taskId: init.id, handle: restoredTaskHandle(hi) }).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(err?.message).toContain("cannot reattach to its executor");
      expect(err?.message).not.toContain("was killed");
      expect(alive(worker)).toBe(true); // before: SIGKILLed with its process group
      await second.driver.destroyTask({ taskId: main.id, force: true });
    },
    60_000,
  );

  it("a WaitTask in flight when the plugin is stopped gets no exit (Nomad would start the task again beside it)", async () => {
    const first = await startPlugin();
    const tasks = [newTask(sh("exec sleep 600")), newTask(sh("exec sleep 600"))];
    const handles = [];
    for (const t of tasks) handles.push(await start(first, t));
    const waits = tasks.map((t) => first.driver.waitTask({ taskId: t.id }).then((r) => r, (e: unknown) => e));
    await new Promise((r) => setTimeout(r, 200)); // the waits reach the plugin
    await first.kill(); // go-plugin's Kill, as Nomad's agent does when it stops
    // Before: exit 1, "executor: error waiting on process: ... closed", for running tasks.
    for (const w of await Promise.all(waits)) expect(w).toBeInstanceOf(PluginShutdownError);
    const second = await startPlugin();
    for (const [i, t] of tasks.entries()) {
      await second.driver.recoverTask({ taskId: t.id, handle: handles[i]! });
      expect(alive(driverState(handles[i]!).driver.pid)).toBe(true);
      await second.driver.destroyTask({ taskId: t.id, force: true });
    }
  });

  it("when the executor dies under a running task, the task is ended, not left running beside a restart", async () => {
    const p = await startPlugin();
    const t = newTask(sh("exec sleep 600"));
    const state = driverState(await start(p, t));
    const wait = p.driver.waitTask({ taskId: t.id });
    process.kill(state.executor.pid, "SIGKILL");
    const r = await wait;
    expect(r.err).toContain(`its task, pid ${state.driver.pid}, was killed`);
    // Nomad's raw_exec words it so (handleWait): operators search for that text.
    expect(r.err).toMatch(/^executor: error waiting on process: /);
    // Nomad's raw_exec reports an executor failure as exit code -1 (#25453, Nomad 1.10), not a task's exit status.
    expect(r.result?.exitCode).toBe(-1);
    await until(() => !alive(state.driver.pid), "the orphaned task to die");
    await p.driver.destroyTask({ taskId: t.id, force: true });

    // The same while no plugin runs: recovery fails, and the task does not run on.
    const { t: u, handle, state: s2 } = await orphanedTask();
    process.kill(s2.executor.pid, "SIGKILL");
    await until(() => !alive(s2.executor.pid), "the executor to die");
    expect(alive(s2.driver.pid)).toBe(true);
    const second = await startPlugin();
    const err = await second.driver.recoverTask({ taskId: u.id, handle }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toContain(`its task (pid ${s2.driver.pid}) was killed`);
    await until(() => !alive(s2.driver.pid), "the orphaned task to die");
  });

  it("exec into a task whose executor died, or running when it dies, is FailedPrecondition naming the executor, not 'plugin is shut down'", async () => {
    const p = await startPlugin();
    const t = newTask(sh("exec sleep 600"));
    const state = driverState(await start(p, t));
    // A session running when the executor dies (the OOM killer, kill -9).
    const running = execStream(p, [{ setup: { taskId: t.id, command: ["/bin/sh", "-c", "echo $$ > exec.pid; read x"] } }]).then(
      () => undefined,
      (e: Error & { code?: number }) => e,
    );
    await until(() => read(join(t.taskDir, "exec.pid")).trim(), "the exec session to start");
    process.kill(state.executor.pid, "SIGKILL");
    await p.driver.waitTask({ taskId: t.id });
    const gone = `its executor (pid ${state.executor.pid}) is gone`;
    const midSession = await running;
    expect(midSession?.code).toBe(9); // FailedPrecondition
    expect(midSession?.message).toContain(gone);
    // And the two forms of exec afterwards.
    const buffered = await p.driver.execTask({ taskId: t.id, command: ["/bin/true"], timeout: { seconds: 30n } }).then(
      () => undefined,
      (e: Error & { code?: number }) => e,
    );
    expect(buffered?.code).toBe(9);
    expect(buffered?.message).toContain(gone);
    const streamed = await execStream(p, [{ setup: { taskId: t.id, command: ["/bin/true"] } }]).then(
      () => undefined,
      (e: Error & { code?: number }) => e,
    );
    expect(streamed?.code).toBe(9);
    expect(streamed?.message).toContain(gone);
    await p.driver.destroyTask({ taskId: t.id, force: true });
  });

  it("recovers handles of every earlier build: pidStart a string of digits (a1f5acd's era), a number, or absent", async () => {
    for (const pidStart of ["string", "number", "absent"] as const) {
      const { t, handle, state } = await orphanedTask();
      const raw = JSON.parse(new TextDecoder().decode(handle.driverState)) as { driver: { pidStart?: number | string } };
      expect(typeof raw.driver.pidStart).toBe("number");
      if (pidStart === "string") raw.driver.pidStart = String(raw.driver.pidStart);
      if (pidStart === "absent") delete raw.driver.pidStart;
      const old = { ...handle, driverState: new TextEncoder().encode(JSON.stringify(raw)) };
      const second = await startPlugin();
      await second.driver.recoverTask({ taskId: t.id, handle: old });
      expect((await second.driver.inspectTask({ taskId: t.id })).driver?.attributes.pid, pidStart).toBe(String(state.driver.pid));
      await second.driver.destroyTask({ taskId: t.id, force: true });
      await until(() => !alive(state.driver.pid) && !alive(state.executor.pid), "the task and its executor to be gone");
    }
  });

  it("a failed recovery kills the orphaned task of a handle whose pidStart is a string (written before the upgrade)", async () => {
    const { t, handle, state } = await orphanedTask();
    const raw = JSON.parse(new TextDecoder().decode(handle.driverState)) as { driver: { pidStart?: number | string; bootId?: string } };
    raw.driver.pidStart = String(raw.driver.pidStart);
    delete raw.driver.bootId; // those builds did not record it: the task's environment tells it from another boot's process
    const old = { ...handle, driverState: new TextEncoder().encode(JSON.stringify(raw)) };
    process.kill(state.executor.pid, "SIGKILL");
    await until(() => !alive(state.executor.pid), "the executor to die");
    const second = await startPlugin();
    const err = await second.driver.recoverTask({ taskId: t.id, handle: old }).then(
      () => undefined,
      (e: Error & { code?: number }) => e,
    );
    expect(err?.code).toBe(9); // FailedPrecondition
    // Before: "1234" !== 1234, so the task was taken for another process and ran on.
    expect(err?.message).toContain(`its task (pid ${state.driver.pid}) was killed`);
    await until(() => !alive(state.driver.pid), "the orphaned task to die");
  });

  it("a malformed driver part of driver_state is InvalidArgument naming the field, and its task does not run on beside a restart", async () => {
    for (const [driver, field] of [
      ["x", "driver_state: driver must be an object"],
      [{ startedAt: "2026-01-01T00:00:00.000Z", pid: "12x" }, "driver_state: driver.pid must be a process id"],
      [{ startedAt: "2026-01-01T00:00:00.000Z", pid: 1, pidStart: "soon" }, "driver_state: driver.pidStart must be a process start time"],
      [{ startedAt: 5, pid: 1 }, "driver_state: driver.startedAt must be a time"],
      [{ startedAt: "2026-01-01T00:00:00.000Z", pid: 1, bootId: 7 }, "driver_state: driver.bootId must be a boot id"],
      [{ startedAt: "2026-01-01T00:00:00.000Z", pid: 1, cgroups: { cpusetCgroup: 7 } }, "driver_state: driver.cgroups.cpusetCgroup must be a string"],
      [{ startedAt: "2026-01-01T00:00:00.000Z", pid: 1, cgroups: { cgroupV1Override: { freezer: 1 } } }, "driver_state: driver.cgroups.cgroupV1Override must map controllers"],
    ] as const) {
      const { t, handle, state } = await orphanedTask();
      const raw = JSON.parse(new TextDecoder().decode(handle.driverState)) as { driver: unknown };
      raw.driver = driver;
      const bad = { ...handle, driverState: new TextEncoder().encode(JSON.stringify(raw)) };
      const second = await startPlugin();
      const err = await second.driver.recoverTask({ taskId: t.id, handle: bad }).then(
        () => undefined,
        (e: Error & { code?: number }) => e,
      );
      expect(err?.code, field).toBe(3); // InvalidArgument
      expect(err?.message).toContain(field);
      // Nomad starts the task again: the one the handle's executor runs is stopped, and the executor.
      await until(() => !alive(state.driver.pid) && !alive(state.executor.pid), "the task and its executor to be stopped");
      expect((await second.health.check({ service: "plugin" })).status).toBe(1);
      await second.kill();
    }
  });

  it("when the executor runs on but cannot be reached, a failed recovery ends it with its task", async () => {
    const { t, handle, state } = await orphanedTask();
    const address = (JSON.parse(new TextDecoder().decode(handle.driverState)) as { executor: { address: string } }).executor.address;
    rmSync(address); // its socket gone (a tmp cleaner, an operator): alive, unreachable
    const second = await startPlugin();
    const err = await second.driver.recoverTask({ taskId: t.id, handle }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toContain(`its task (pid ${state.driver.pid}) was killed`);
    await until(() => !alive(state.driver.pid), "the orphaned task to die");
    // Before: the executor stayed, serving nothing, for as long as the host ran.
    await until(() => !alive(state.executor.pid), "its executor to die");
  });

  it("and so when its task has already ended", async () => {
    const first = await startPlugin();
    const t = newTask(sh("exit 3"));
    const handle = await start(first, t);
    const state = driverState(handle);
    await first.driver.waitTask({ taskId: t.id });
    process.kill(first.pid, "SIGKILL");
    await first.exited;
    const address = (JSON.parse(new TextDecoder().decode(handle.driverState)) as { executor: { address: string } }).executor.address;
    rmSync(address);
    expect(alive(state.executor.pid)).toBe(true); // executors outlive their tasks (as Nomad's)
    const second = await startPlugin();
    const err = await second.driver.recoverTask({ taskId: t.id, handle }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toContain("cannot reattach to its executor");
    await until(() => !alive(state.executor.pid), "its executor to die");
  });
  it("ends the task when its executor dies even if the task cleared its environment (env -i; setproctitle as nginx, postgres, ruby do)", async () => {
    /** A task whose process no longer shows NOMAD_ALLOC_ID in /proc/<pid>/environ. */
    const envCleared = async (p: Awaited<ReturnType<typeof startPlugin>>) => {
      const t = newTask(sh("exec env -i /bin/sleep 600"));
      const handle = await start(p, t);
      const state = driverState(handle);
      await until(() => readFileSync(`/proc/${state.driver.pid}/cmdline`, "utf8").startsWith("/bin/sleep"), "the task to exec without its environment");
      expect(readFileSync(`/proc/${state.driver.pid}/environ`, "latin1")).not.toContain("NOMAD_ALLOC_ID=");
      return { t, handle, state };
    };

    // While the plugin runs: the Wait reports the executor's death and the task is ended.
    const p = await startPlugin();
    const { t, state } = await envCleared(p);
    const wait = p.driver.waitTask({ taskId: t.id });
    process.kill(state.executor.pid, "SIGKILL");
    // Before: not killed (its environment did not name the allocation), and it ran on beside the restart.
    expect((await wait).err).toContain(`its task, pid ${state.driver.pid}, was killed`);
    await until(() => !alive(state.driver.pid), "the orphaned task to die");
    await p.driver.destroyTask({ taskId: t.id, force: true });

    // After a plugin restart: the failed recovery ends it.
    const first = await startPlugin();
    const o = await envCleared(first);
    process.kill(first.pid, "SIGKILL");
    await first.exited;
    process.kill(o.state.executor.pid, "SIGKILL");
    await until(() => !alive(o.state.executor.pid), "the executor to die");
    const second = await startPlugin();
    const err = await second.driver.recoverTask({ taskId: o.t.id, handle: o.handle }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toContain(`its task (pid ${o.state.driver.pid}) was killed`);
    await until(() => !alive(o.state.driver.pid), "the orphaned task to die");
  });

  it("a failed recovery of a handle from an earlier boot of the host kills nothing (its pid and start time may be another process's now)", async () => {
    const { t, handle, state } = await orphanedTask();
    const raw = JSON.parse(new TextDecoder().decode(handle.driverState)) as { driver: { bootId?: string } };
    expect(raw.driver.bootId).toBe(readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim());
    raw.driver.bootId = "00000000-0000-0000-0000-000000000000";
    const rebooted = { ...handle, driverState: new TextEncoder().encode(JSON.stringify(raw)) };
    process.kill(state.executor.pid, "SIGKILL");
    await until(() => !alive(state.executor.pid), "the executor to die");
    const second = await startPlugin();
    const err = await second.driver.recoverTask({ taskId: t.id, handle: rebooted }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toContain("cannot reattach to its executor");
    expect(err?.message).not.toContain("was killed");
    expect(alive(state.driver.pid)).toBe(true);
    process.kill(state.driver.pid, "SIGKILL");
  });
});
