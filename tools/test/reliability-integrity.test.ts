// Data integrity of exec (issue 8), through the reference driver (nomadkit-rawexec: the driver
// forwards the raw stream to the task's executor process, two hops) and through the fixture driver
// (runExecCommand in the plugin itself):
// - 256 MiB of a deterministic keystream (AES-128-CTR from openssl, recomputed here) arrives byte
//   for byte and in order, read with pauses (a slow reader), the exit code comes last, after both
//   close markers, and the driver's and executor's memory stay bounded;
// - 8 MiB of seeded random stdin, sent in random-sized chunks, reaches the process exactly
//   (sha256sum and byte count computed in the task);
// - 20 exec sessions at once, half echoing distinct stdin, half streaming distinct keystreams;
// - without a tty, stdout and stderr each keep their own order (50,000 numbered lines written
//   alternately to both).
// The in-plugin 256 MiB bounded-memory stream is packages/server/test/exec.test.ts.
import { createCipheriv, createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { PluginClient } from "@nomadkit/client";
import { encode } from "@msgpack/msgpack";
import { descendantsOf, launchRawexec, launchRelDriver, rawexecTask, rng, until } from "../reliability/helpers.js";
import { RequestQueue } from "@nomadkit/client";

const MiB = 1024 * 1024;

/** A keystream: openssl's output for (key, iv) and the same bytes computed here. */
function keystream(seed: number): { key: string; iv: string; command(bytes: number): string; sha256(bytes: number): string } {
  const r = rng(seed);
  const key = r.bytes(16).toString("hex");
  const iv = r.bytes(16).toString("hex");
  return {
    key,
    iv,
    command: (bytes) => `openssl enc -aes-128-ctr -K ${key} -iv ${iv} -nosalt -in /dev/zero 2>/dev/null | head -c ${bytes}`,
    sha256(bytes) {
      const c = createCipheriv("aes-128-ctr", Buffer.from(key, "hex"), Buffer.from(iv, "hex"));
      const h = createHash("sha256");
      const zero = Buffer.alloc(MiB);
      for (let done = 0; done < bytes; done += zero.length) h.update(c.update(zero.subarray(0, Math.min(zero.length, bytes - done))));
      return h.digest("hex");
    },
  };
}

interface ExecOutcome {
  stdoutSha256: string;
  stdoutBytes: number;
  stdout: Buffer | undefined;
  stderr: string;
  exitCode: number | undefined;
  /** Protocol order violations seen (data after close, anything after exited, ...). */
  violations: string[];
}

/**
 * One ExecTaskStreaming call. Checks the protocol's ordering on the way: no data after a stream's
 * close marker, one close marker each, exactly one exited message, and it comes last.
 */
async function execRun(
  plugin: PluginClient,
  taskId: string,
  command: string[],
  opts: { stdin?: Buffer; chunks?: (n: number) => number; keepStdout?: boolean; pauseEveryBytes?: number; pauseMs?: number; onChunk?: () => void } = {},
): Promise<ExecOutcome> {
  const requests = new RequestQueue<object>();
  requests.push({ setup: { taskId, command, tty: false } });
  if (opts.stdin) {
    for (let off = 0; off < opts.stdin.length; ) {
      const n = Math.min(opts.chunks ? opts.chunks(off) : 64 * 1024, opts.stdin.length - off);
      requests.push({ stdin: { data: opts.stdin.subarray(off, off + n) } });
      off += n;
    }
    requests.push({ stdin: { close: true } });
  }
  const hash = createHash("sha256");
  const kept: Buffer[] = [];
  let bytes = 0;
  let nextPause = opts.pauseEveryBytes ?? Infinity;
  let stderr = "";
  const closes = { stdout: 0, stderr: 0 };
  let exited = 0;
  let exitCode: number | undefined;
  const violations: string[] = [];
  try {
    for await (const m of plugin.driver.execTaskStreaming(requests)) {
      if (exited > 0) violations.push("a message after exited");
      if (m.stdout !== undefined) {
        if (m.stdout.data.length > 0) {
          if (closes.stdout > 0) violations.push("stdout data after its close marker");
          hash.update(m.stdout.data);
          if (opts.keepStdout) kept.push(Buffer.from(m.stdout.data));
          bytes += m.stdout.data.length;
          if (bytes >= nextPause) {
            nextPause += opts.pauseEveryBytes!;
            opts.onChunk?.();
            await sleep(opts.pauseMs ?? 10);
          }
        }
        if (m.stdout.close) closes.stdout++;
      }
      if (m.stderr !== undefined) {
        if (m.stderr.data.length > 0) {
          if (closes.stderr > 0) violations.push("stderr data after its close marker");
          stderr += Buffer.from(m.stderr.data).toString();
        }
        if (m.stderr.close) closes.stderr++;
      }
      if (m.exited) {
        exited++;
        exitCode = m.result?.exitCode;
        if (closes.stdout !== 1 || closes.stderr !== 1) violations.push(`exited before both close markers (${JSON.stringify(closes)})`);
      }
    }
  } finally {
    requests.end();
  }
  if (exited !== 1) violations.push(`${exited} exited messages`);
  return { stdoutSha256: hash.digest("hex"), stdoutBytes: bytes, stdout: opts.keepStdout ? Buffer.concat(kept) : undefined, stderr, exitCode, violations };
}

function memoryKiB(pid: number): { rss: number; hwm: number } {
  const text = readFileSync(`/proc/${pid}/status`, "utf8");
  const field = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? NaN);
  return { rss: field("VmRSS"), hwm: field("VmHWM") };
}

interface Target {
  name: string;
  plugin: PluginClient;
  taskId: string;
  /** Processes whose memory must stay bounded (driver, executor). */
  pids: number[];
  cleanup(): Promise<void>;
}

const targets: Target[] = [];

beforeAll(async () => {
  const [rx, rel] = await Promise.all([launchRawexec(), launchRelDriver({ NOMADKIT_LOG_LEVEL: "info" })]);
  const task = rawexecTask({ command: "/bin/sleep", args: ["3600"] });
  const res = await rx.plugin.driver.startTask({ task: task.config }).catch(async (err: unknown) => {
    await task.cleanup(); // no target holds it yet
    throw err;
  });
  const state = JSON.parse(Buffer.from(res.handle!.driverState).toString()) as { executor: { pid: number } };
  targets.push({
    name: "nomadkit-rawexec (driver -> executor)",
    plugin: rx.plugin,
    taskId: task.id,
    pids: [rx.plugin.pid, state.executor.pid],
    async cleanup() {
      try {
        await rx.plugin.driver.destroyTask({ taskId: task.id, force: true });
        expect(await rx.plugin.kill()).toEqual({ code: 0, signal: null });
      } finally {
        // The task's cgroup (and what is left in it) goes whatever failed above.
        await task.cleanup();
      }
    },
  });
  await rel.plugin.driver.startTask({ task: { id: "t", msgpackDriverConfig: encode({ command: "none" }) } });
  targets.push({
    name: "fixture driver (runExecCommand in the plugin)",
    plugin: rel.plugin,
    taskId: "t",
    pids: [rel.plugin.pid],
    async cleanup() {
      expect(await rel.plugin.kill()).toEqual({ code: 0, signal: null });
    },
  });
});

afterAll(async () => {
  // Every target's, even after one failed; the first failure is reported.
  const failed = (await Promise.allSettled(targets.splice(0).map((t) => t.cleanup()))).find((r) => r.status === "rejected");
  if (failed) throw failed.reason;
});

describe("256 MiB through the reference driver's exec", () => {
  it("arrives byte for byte and in order to a slow reader; the exit code comes last; memory stays bounded", async () => {
    const t = targets[0]!;
    const size = 256 * MiB;
    const ks = keystream(0x256);
    const before = t.pids.map(memoryKiB);
    let peak = before.map((m) => m.rss);
    const started = performance.now();
    const r = await execRun(t.plugin, t.taskId, ["sh", "-c", `${ks.command(size)}; echo done >&2; exit 3`], {
      // The slow reader: a pause every MiB, so the producer outruns it and backpressure has to hold.
      pauseEveryBytes: MiB,
      pauseMs: 5,
      onChunk: () => (peak = t.pids.map((pid, i) => Math.max(peak[i]!, memoryKiB(pid).rss))),
    });
    const seconds = (performance.now() - started) / 1000;
    expect(r.violations).toEqual([]);
    expect(r.stdoutBytes).toBe(size);
    expect(r.stdoutSha256).toBe(ks.sha256(size));
    expect(r.stderr).toBe("done\n");
    expect(r.exitCode).toBe(3);
    const growthMiB = t.pids.map((pid, i) => (Math.max(memoryKiB(pid).hwm, peak[i]!) - before[i]!.hwm) / 1024);
    console.log(`integrity: 256 MiB via driver+executor in ${seconds.toFixed(1)} s; peak RSS growth MiB driver/executor: ${growthMiB.map((g) => g.toFixed(1)).join("/")}`);
    for (const g of growthMiB) expect(g).toBeLessThan(128);
  }, 600_000);
});

describe.each([
  { index: 0, label: "nomadkit-rawexec (driver -> executor)" },
  { index: 1, label: "the fixture driver (in-plugin)" },
])("exec data integrity through $label", ({ index }) => {
  it("8 MiB of random stdin in random-sized chunks reaches the process exactly", async () => {
    const t = targets[index]!;
    const r0 = rng(0x8 + index);
    const input = r0.bytes(8 * MiB);
    const r = await execRun(t.plugin, t.taskId, ["sha256sum"], {
      stdin: input,
      chunks: () => r0.int(1, 256 * 1024),
      keepStdout: true,
    });
    expect(r.violations, t.name).toEqual([]);
    expect(r.stdout!.toString().split(/\s+/)[0], t.name).toBe(createHash("sha256").update(input).digest("hex"));
    expect(r.exitCode).toBe(0);
    // And echoed back unchanged, chunk boundaries and all.
    const echo = await execRun(t.plugin, t.taskId, ["cat"], { stdin: input, chunks: () => r0.int(1, 64 * 1024), keepStdout: true });
    expect(echo.violations).toEqual([]);
    expect(echo.stdout!.equals(input), `${t.name}: cat echoed ${echo.stdoutBytes} bytes`).toBe(true);
  }, 300_000);

  it("20 exec sessions at once: each gets exactly its own bytes", async () => {
    const t = targets[index]!;
    const sessions = Array.from({ length: 20 }, (_, i) => i);
    const results = await Promise.all(
      sessions.map(async (i) => {
        if (i % 2 === 0) {
          const input = rng(0x2000 + i).bytes(MiB + i * 4099);
          const r = await execRun(t.plugin, t.taskId, ["cat"], { stdin: input, keepStdout: true });
          return { i, ok: r.violations.length === 0 && r.stdout!.equals(input) && r.exitCode === 0, detail: r.violations };
        }
        const ks = keystream(0x3000 + i);
        const bytes = 4 * MiB + i * 4099;
        const r = await execRun(t.plugin, t.taskId, ["sh", "-c", `${ks.command(bytes)}; exit ${i}`]);
        return { i, ok: r.violations.length === 0 && r.stdoutBytes === bytes && r.stdoutSha256 === ks.sha256(bytes) && r.exitCode === i, detail: r.violations };
      }),
    );
    expect(results.filter((r) => !r.ok), t.name).toEqual([]);
  }, 300_000);

  it("without a tty, stdout and stderr each keep their order (50,000 lines written alternately)", async () => {
    const t = targets[index]!;
    const n = 50_000;
    const program = `BEGIN { for (i = 0; i < ${n}; i++) { print "out " i; fflush(); print "err " i > "/dev/stderr"; fflush("/dev/stderr") } }`;
    const r = await execRun(t.plugin, t.taskId, ["awk", program], { keepStdout: true });
    expect(r.violations).toEqual([]);
    const check = (text: string, prefix: string) => {
      const lines = text.split("\n");
      expect(lines.pop()).toBe("");
      expect(lines.length, `${t.name} ${prefix} lines`).toBe(n);
      const bad = lines.findIndex((l, i) => l !== `${prefix} ${i}`);
      expect(bad, `${t.name}: first ${prefix} line out of order: ${lines[bad]}`).toBe(-1);
    };
    check(r.stdout!.toString(), "out");
    check(r.stderr, "err");
  }, 300_000);

  it("leaves no exec process behind", async () => {
    const t = targets[index]!;
    // The rawexec task's own process (sleep) lives under the executor; count only exec'd commands.
    const execs = () => t.pids.flatMap((pid) => descendantsOf(pid)).filter((p) => !readCmd(p.pid).startsWith("/bin/sleep") && !readCmd(p.pid).includes("executor"));
    await until(`${t.name}: exec processes to be gone`, () => execs().length === 0, () => execs().map((p) => `${p.pid} ${readCmd(p.pid)}`));
  });
});

function readCmd(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").trim();
  } catch {
    return "";
  }
}
