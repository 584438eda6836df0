import { execFileSync, spawn, spawnSync } from "node:child_process";
import { chmodSync, chownSync, closeSync, constants, existsSync, lstatSync, mkdirSync, mkdtempSync, openSync, rmSync, writeSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createTaskDirs, openTaskLogs, type TaskLogs } from "../src/index.js";

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
    // As under Nomad, no reader is left for a writer that comes back after EOF.
    expect(() => openSync(logs.stdoutPath, constants.O_WRONLY | constants.O_NONBLOCK)).toThrow(/ENXIO/);
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
