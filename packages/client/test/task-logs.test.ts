import { execFileSync, spawn, spawnSync } from "node:child_process";
import { chmodSync, chownSync, closeSync, constants, existsSync, lstatSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, writeSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createTaskDirs, openTaskLogs, type LateOutput, type TaskLogs } from "../src/index.js";

const made: string[] = [];
const open: TaskLogs[] = [];
afterEach(async () => {
  for (const l of open.splice(0)) await l.close(0);
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});
function logsFor(name: string, opts?: Parameters<typeof openTaskLogs>[2]) {
  const d = mkdtempSync(join(tmpdir(), "nk-tasklogs-"));
  made.push(d);
  const dirs = createTaskDirs(d, name);
  const logs = openTaskLogs(dirs, name, opts);
  open.push(logs);
  return { dirs, logs };
}

describe("openTaskLogs", () => {
  it("makes logmon's FIFOs in alloc/logs, 0600, with a reader already there", () => {
    const { dirs, logs } = logsFor("web");
    expect(logs.stdoutPath).toBe(join(dirs.logsDir, ".web.stdout.fifo"));
    expect(logs.stderrPath).toBe(join(dirs.logsDir, ".web.stderr.fifo"));
    expect(logs.stdoutFile).toBe(join(dirs.logsDir, "web.stdout.0"));
    for (const p of [logs.stdoutPath, logs.stderrPath]) {
      const st = lstatSync(p);
      expect(st.isFIFO(), p).toBe(true);
      expect((st.mode & 0o777).toString(8)).toBe("600");
      // A driver opening it for writing without blocking succeeds only when a reader is there.
      closeSync(openSync(p, constants.O_WRONLY | constants.O_NONBLOCK));
    }
  });

  it("copies what the task writes until EOF, and holds no write end of its own", async () => {
    const seen: string[] = [];
    const { logs } = logsFor("web", { onStderr: (d) => seen.push(d.toString()) });
    // The task, as a driver starts it: its stdout and stderr are the FIFOs.
    const out = openSync(logs.stdoutPath, "a");
    const err = openSync(logs.stderrPath, "a");
    const child = spawn("/bin/sh", ["-c", "echo one; echo two >&2; echo three"], { stdio: ["ignore", out, err] });
    closeSync(out);
    closeSync(err);
    await once(child, "exit");
    // EOF with no close(): nothing but the task held the write ends.
    await logs.ended;
    expect(logs.stdout()).toBe("one\nthree\n");
    expect(logs.stderr()).toBe("two\n");
    expect(seen.join("")).toBe("two\n");
    expect(logs.lateOutput()).toEqual([]);
  });

  it("keeps a read end after EOF, as logmon does: a writer that comes back opens at once, and what it writes is reported, not collected", async () => {
    const late: LateOutput[] = [];
    const seen: string[] = [];
    const { logs } = logsFor("web", { onStdout: (d) => seen.push(d.toString()), onLateOutput: (l) => late.push(l) });
    const w = openSync(logs.stdoutPath, "a");
    writeSync(w, "one\n");
    closeSync(w);
    closeSync(openSync(logs.stderrPath, "a"));
    await logs.ended;
    // Not blocking (a blocking open would wait here forever without a reader), nor ENXIO.
    const again = openSync(logs.stdoutPath, constants.O_WRONLY | constants.O_NONBLOCK);
    writeSync(again, "lost\n");
    // Noticed as it is written (the first time only), or by lateOutput() at the latest.
    const now = logs.lateOutput();
    writeSync(again, "more\n");
    closeSync(again);
    expect(now).toEqual([{ fifo: logs.stdoutPath, bytes: 5, message: expect.any(String) }]);
    expect(now[0]!.message).toBe(
      `5 bytes were written to ${logs.stdoutPath} after every writer had closed it: Nomad's logmon would never collect it ` +
        "(it stops copying a FIFO at its first end of file, and a writer blocks once 64 KiB pile up); open the FIFO once and keep it open for as long as the task writes (driver guide §3)",
    );
    expect(late).toEqual(now);
    await logs.close(0);
    // Counted, neither kept nor passed on.
    expect(logs.lateOutput()).toEqual([{ fifo: logs.stdoutPath, bytes: 10, message: expect.stringContaining("10 bytes were written to") }]);
    expect(late).toHaveLength(1);
    expect(logs.stdout()).toBe("one\n");
    expect(seen.join("")).toBe("one\n");
  });

  it("reads output after EOF as it comes: its writer never blocks on a full pipe, and onLateOutput tells at once", async () => {
    let told: (l: LateOutput) => void;
    const noticed = new Promise<LateOutput>((r) => (told = r));
    const { logs } = logsFor("web", { onLateOutput: (l) => told(l) });
    closeSync(openSync(logs.stdoutPath, "a"));
    closeSync(openSync(logs.stderrPath, "a"));
    await logs.ended;
    // More than a pipe holds (64 KiB), by a process of its own that opens the FIFO as a shell does.
    const child = spawn("/bin/sh", ["-c", 'head -c 200000 /dev/zero >> "$0"', logs.stdoutPath], { stdio: "ignore" });
    const [code] = (await once(child, "exit")) as [number];
    expect(code).toBe(0);
    // Before close() or lateOutput(): seen as it was written.
    expect((await noticed).fifo).toBe(logs.stdoutPath);
    await logs.close(0);
    expect(logs.lateOutput().map((l) => [l.fifo, l.bytes])).toEqual([[logs.stdoutPath, 200000]]);
    expect(logs.stdout()).toBe("");
  });

  it("agentRestart() reads again after RecoverTask, as logmon's Start after an agent restart: a writer that reopens then is collected", async () => {
    const late: LateOutput[] = [];
    const seen: string[] = [];
    const { logs } = logsFor("web", { onStdout: (d) => seen.push(d.toString()), onLateOutput: (l) => late.push(l) });
    // The plugin holds the write end.
    const plugin = openSync(logs.stdoutPath, "a");
    writeSync(plugin, "before\n");
    closeSync(openSync(logs.stderrPath, "a"));
    let again = -1;
    const r = await logs.agentRestart(async () => {
      // It dies with the agent: EOF.
      closeSync(plugin);
      await logs.ended;
      // The new plugin's RecoverTask opens the FIFO again (a blocking open: a read end is there)
      // and writes, before the fresh reader: it waits in the pipe, as under Nomad. The pause lets
      // a reader that should not be there take it.
      again = openSync(logs.stdoutPath, "a");
      writeSync(again, "recovered\n");
      await new Promise((r) => setTimeout(r, 100));
      return 42;
    });
    expect(r).toBe(42);
    writeSync(again, "after\n");
    closeSync(again);
    // The fresh readers' EOF, once a writer came and went (stderr's too, read again as well).
    closeSync(openSync(logs.stderrPath, "a"));
    await logs.ended;
    expect(logs.stdout()).toBe("before\nrecovered\nafter\n");
    expect(seen.join("")).toBe("before\nrecovered\nafter\n");
    await logs.close(0);
    expect(logs.lateOutput()).toEqual([]);
    expect(late).toEqual([]);
  });

  it("agentRestart() leaves late what was written after EOF before it, and what a writer left and closed before the fresh reader", async () => {
    const { logs } = logsFor("web");
    closeSync(openSync(logs.stdoutPath, "a"));
    closeSync(openSync(logs.stderrPath, "a"));
    await logs.ended;
    const w = openSync(logs.stdoutPath, constants.O_WRONLY | constants.O_NONBLOCK);
    writeSync(w, "lost1\n");
    closeSync(w);
    expect(logs.lateOutput().map((l) => l.bytes)).toEqual([6]);
    await logs.agentRestart(async () => {
      // Written and closed while the agent is down: logmon closes its old read end, the last one,
      // before it opens the fresh one, and the kernel drops what the pipe held.
      const gone = openSync(logs.stdoutPath, constants.O_WRONLY | constants.O_NONBLOCK);
      writeSync(gone, "lost22\n");
      closeSync(gone);
    });
    // The fresh reader waits for a writer, as logmon's blocking open: this one's output is collected.
    const next = openSync(logs.stdoutPath, constants.O_WRONLY | constants.O_NONBLOCK);
    writeSync(next, "kept\n");
    closeSync(next);
    closeSync(openSync(logs.stderrPath, "a"));
    await logs.ended;
    await logs.close(0);
    expect(logs.stdout()).toBe("kept\n");
    expect(logs.lateOutput().map((l) => [l.fifo, l.bytes])).toEqual([[logs.stdoutPath, 13]]);
  });

  it("agentRestart() of a FIFO still being written changes nothing, and the fresh readers come even when the restart throws", async () => {
    const { logs } = logsFor("web");
    // The task holds both write ends across the restart: no EOF, nothing to reopen under Nomad.
    const out = openSync(logs.stdoutPath, "a");
    const err = openSync(logs.stderrPath, "a");
    writeSync(out, "one\n");
    await expect(
      logs.agentRestart(async () => {
        writeSync(out, "two\n");
        throw new Error("RecoverTask failed");
      }),
    ).rejects.toThrow("RecoverTask failed");
    writeSync(out, "three\n");
    writeSync(err, "e\n");
    closeSync(out);
    closeSync(err);
    await logs.ended;
    expect(logs.stdout()).toBe("one\ntwo\nthree\n");
    expect(logs.stderr()).toBe("e\n");
    expect(logs.lateOutput()).toEqual([]);
  });

  it("close() releases every descriptor it holds, also after EOF and output after it", async () => {
    const fds = () => readdirSync("/proc/self/fd").length;
    const before = fds();
    const { logs } = logsFor("web");
    closeSync(openSync(logs.stdoutPath, "a"));
    closeSync(openSync(logs.stderrPath, "a"));
    await logs.ended;
    const again = openSync(logs.stdoutPath, constants.O_WRONLY | constants.O_NONBLOCK);
    writeSync(again, "late\n");
    closeSync(again);
    // Fresh readers too, the old ones gone.
    await logs.agentRestart(async () => undefined);
    await logs.close(0);
    expect(fds()).toBe(before);
    // No reader is left: a writer that comes now is refused rather than kept waiting.
    expect(() => openSync(logs.stdoutPath, constants.O_WRONLY | constants.O_NONBLOCK)).toThrow(/ENXIO/);
    expect(() => openSync(logs.stderrPath, constants.O_WRONLY | constants.O_NONBLOCK)).toThrow(/ENXIO/);
  });

  it("close() drains what was written and ends at once when no writer is left", async () => {
    const { logs } = logsFor("db");
    const w = openSync(logs.stdoutPath, constants.O_WRONLY);
    writeSync(w, "buffered\n");
    closeSync(w);
    // stderr was never opened by anyone: close() must not wait for it (no grace given is needed).
    await logs.close(60_000);
    expect(logs.stdout()).toBe("buffered\n");
    expect(logs.stderr()).toBe("");
  });

  // Run as nobody, who must be able to read this checkout's built code (not so under /root, say).
  const built = fileURLToPath(new URL("../dist/esm/index.js", import.meta.url));
  const nobodyReads = () => spawnSync("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "test", "-r", built]).status === 0;
  it.skipIf(process.getuid?.() !== 0 || !existsSync("/usr/bin/setpriv") || !nobodyReads())(
    "a FIFO it cannot open for reading fails without leaving the log file open",
    () => {
      // As another user: a task's FIFO a root run left behind (0600, root's) cannot be opened.
      const d = mkdtempSync(join(tmpdir(), "nk-tasklogs-"));
      made.push(d);
      chmodSync(d, 0o755);
      const logsDir = join(d, "logs");
      mkdirSync(logsDir);
      chownSync(logsDir, 65534, 65534);
      execFileSync("mkfifo", ["-m", "600", join(logsDir, ".web.stdout.fifo")]);
      const script = `
        import { readdirSync } from "node:fs";
        const { openTaskLogs } = await import(${JSON.stringify(built)});
        const fds = () => readdirSync("/proc/self/fd").length;
        const before = fds();
        let error;
        try { openTaskLogs({ logsDir: ${JSON.stringify(logsDir)} }, "web"); } catch (err) { error = err.code; }
        console.log(JSON.stringify({ error, leaked: fds() - before }));`;
      const r = spawnSync("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, "--input-type=module", "-e", script], {
        encoding: "utf8",
        timeout: 30_000,
      });
      expect(r.stderr).toBe("");
      expect(JSON.parse(r.stdout)).toEqual({ error: "EACCES", leaked: 0 });
    },
  );

  it("refuses task names that are not a file name", () => {
    const d = mkdtempSync(join(tmpdir(), "nk-tasklogs-"));
    made.push(d);
    const dirs = createTaskDirs(d, "x");
    expect(() => openTaskLogs(dirs, "a/b")).toThrow(/task name "a\/b" cannot name a file in/);
  });
});
