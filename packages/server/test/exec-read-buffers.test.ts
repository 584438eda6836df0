// Exec output read into reused buffers: the block accounting never hands out memory that a live
// chunk still uses (fast-check), output FIFOs connect the right ends, hold EOF until their writers
// let go and are reused only when drained (real child processes), and a real exec served on the
// direct path comes out byte-exact while its blocks come back for reuse (and one that spawn refuses
// closes its FIFOs).
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync, writeSync } from "node:fs";
import { PassThrough, Writable } from "node:stream";
import * as http2 from "node:http2";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Code, ConnectError } from "@connectrpc/connect";
import { DriverClient, createUnixSocketTransport } from "@nomadkit/client";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createDriverHandlers } from "../src/driver/index.js";
import { fakeDriver } from "./runtime-helpers.js";
import { runExecCommand } from "../src/exec/index.js";
import { PooledReader, RETAINS_CHUNKS, readBufferStats, releaseChunk, retainChunk } from "../src/exec/read-buffers.js";
import { openOutputPipes, outputPipeStats, type OutputPipes } from "../src/exec/output-pipes.js";
import { outputMessage } from "../src/exec/wire.js";
import { registerDriver } from "../src/gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { attachWireFrame, wireFrameOf } from "../src/runtime/wire-frame.js";
import { createPluginHandler } from "../src/runtime/adapter.js";
import { ServerRuntime } from "../src/runtime/server-runtime.js";

describe("PooledReader", () => {
  it("never gives a read room that overlaps bytes still held (random reads, holds and releases)", () => {
    type Op = { kind: "read"; n: number } | { kind: "retain"; i: number } | { kind: "release"; i: number } | { kind: "close" };
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({ kind: fc.constant("read" as const), n: fc.oneof(fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 256 * 1024 })) }),
      fc.record({ kind: fc.constant("retain" as const), i: fc.nat() }),
      fc.record({ kind: fc.constant("release" as const), i: fc.nat() }),
      fc.constant({ kind: "close" as const }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 300 }), (ops) => {
        let reader = new PooledReader();
        // Every chunk handed out, with its holds and the pattern it must keep while held.
        const chunks: { bytes: Buffer; holds: number; tag: number }[] = [];
        let tag = 0;
        const check = () => {
          for (const c of chunks) if (c.holds > 0) expect(c.bytes.every((b) => b === c.tag)).toBe(true);
        };
        for (const o of ops) {
          if (o.kind === "read") {
            const room = reader.next();
            const n = Math.min(o.n, room.length);
            expect(n).toBeGreaterThan(0);
            tag = (tag % 255) + 1;
            room.fill(tag, 0, n); // what the kernel would write
            chunks.push({ bytes: reader.chunk(n), holds: 1, tag });
          } else if (o.kind === "close") {
            reader.close();
            reader = new PooledReader();
          } else {
            const live = chunks.filter((c) => c.holds > 0);
            if (live.length === 0) continue;
            const c = live[o.i % live.length]!;
            if (o.kind === "retain") {
              retainChunk(c.bytes);
              c.holds++;
            } else {
              releaseChunk(c.bytes);
              c.holds--;
            }
          }
          check();
        }
        // Release everything: the blocks go back to the free list, bounded.
        reader.close();
        for (const c of chunks) while (c.holds-- > 0) releaseChunk(c.bytes);
        expect(readBufferStats().free).toBeLessThanOrEqual(16);
      }),
      { seed: 0x5eed, numRuns: 200 },
    );
  });

  it("ignores memory that is not from the pool", () => {
    const before = readBufferStats();
    const b = Buffer.alloc(1024);
    retainChunk(b);
    releaseChunk(b);
    releaseChunk(b);
    expect(readBufferStats()).toEqual(before);
  });
});

/** A writable that keeps what it is given (and says so: RETAINS_CHUNKS). */
function collector(into: Buffer[]): Writable {
  return Object.assign(new Writable({ write: (c: Buffer, _e, cb) => void into.push(Buffer.from(c)) ?? cb() }), { [RETAINS_CHUNKS]: true });
}

/** Run `script` with stdout and stderr on `pipes`, then wait for EOF on both (and leave them open). */
async function runInto(pipes: OutputPipes, script: string): Promise<void> {
  const child = spawn("/bin/sh", ["-c", script], { stdio: ["ignore", ...pipes.writers] });
  pipes.closeWriters();
  await new Promise((resolve, reject) => child.once("exit", resolve).once("error", reject));
  await pipes.eof;
}

describe("openOutputPipes", () => {
  it("pairs the right ends when many are opened at once, and a child writes into its own", async () => {
    const got = Array.from({ length: 8 }, () => ({ out: [] as Buffer[], err: [] as Buffer[] }));
    const pipes = await Promise.all(got.map((g) => openOutputPipes(collector(g.out), collector(g.err))));
    await Promise.all(
      pipes.map(async (p, i) => {
        await runInto(p, `printf 'out-%s' ${i}; printf 'err-%s' ${i} >&2`);
        p.close(true);
      }),
    );
    got.forEach((g, i) => {
      expect(Buffer.concat(g.out).toString()).toBe(`out-${i}`);
      expect(Buffer.concat(g.err).toString()).toBe(`err-${i}`);
    });
  });

  it("gives the child blocking stdio, though its own ends are non-blocking", async () => {
    const out: Buffer[] = [];
    const p = await openOutputPipes(collector(out), collector([]));
    await runInto(p, "grep ^flags /proc/self/fdinfo/1");
    p.close();
    const flags = parseInt(/flags:\s*([0-7]+)/.exec(Buffer.concat(out).toString())![1]!, 8);
    expect(flags & 0o4000).toBe(0); // O_NONBLOCK
  });

  it("reaches EOF only once its own write ends are closed, and the writers it handed out are gone", async () => {
    const p = await openOutputPipes(collector([]), collector([]));
    let eof = false;
    void p.eof.then(() => (eof = true));
    // Nobody has written or opened anything yet: a FIFO without writers would read as EOF right away.
    await sleep(100);
    expect(eof).toBe(false);
    const child = spawn("/bin/sh", ["-c", "sleep 0.3"], { stdio: ["ignore", ...p.writers] });
    p.closeWriters();
    await sleep(100);
    expect(eof).toBe(false);
    await new Promise((resolve) => child.once("exit", resolve));
    await p.eof;
    p.close();
  });

  it("holds 1 MiB per pipe as root, and still does when a pair serves again (perl raises it once)", async () => {
    /** Bytes a non-blocking writer gets into the pipe while nothing reads it. */
    const capacity = (fd: number) => {
      const chunk = Buffer.alloc(64 * 1024);
      let n = 0;
      for (;;) {
        try {
          n += writeSync(fd, chunk);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === "EAGAIN") return n;
          throw err;
        }
      }
    };
    const session = async () => {
      const got: Buffer[] = [];
      const p = await openOutputPipes(collector(got), collector([]));
      // Synchronously: this process's reader cannot run in between.
      const size = capacity(p.writers[0]);
      p.closeWriters();
      await p.eof;
      expect(Buffer.concat(got).length).toBe(size);
      p.close(true);
      return { dir: p.dir, size };
    };
    const first = await session();
    // Others keep Linux's default: their user's pipe budget is shared with everything they run.
    expect(first.size).toBe(process.getuid!() === 0 ? 1024 * 1024 : 64 * 1024);
    const again = await session();
    expect(again).toEqual(first);
  });

  it("removes the FIFO directories of processes that are gone (a SIGKILLed plugin cannot)", async () => {
    const built = join(dirname(fileURLToPath(import.meta.url)), "../dist/esm/exec/output-pipes.js");
    if (!existsSync(built)) throw new Error(`build first: ${built} is missing (npx turbo run build)`);
    const tmp = mkdtempSync(join(tmpdir(), "nk-pipes-root-"));
    const gone = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" }).stdout;
    const live = spawn("sleep", ["60"]);
    try {
      for (const d of [`nomadkit-pipes-${gone}-AbCdEf`, `nomadkit-pipes-${live.pid}-GhIjKl`, "nomadkit-pipes-OldFmt"]) mkdirSync(join(tmp, d, "0"), { recursive: true, mode: 0o700 });
      const script = `
        import { readdirSync } from "node:fs";
        import { Writable } from "node:stream";
        const { openOutputPipes } = await import(${JSON.stringify(pathToFileURL(built).href)});
        const sink = () => new Writable({ write: (_c, _e, cb) => cb() });
        const p = await openOutputPipes(sink(), sink());
        process.stdout.write(JSON.stringify({ pid: process.pid, dirs: readdirSync(process.env.TMPDIR).sort() }));
        p.close();`;
      const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { env: { PATH: process.env.PATH, TMPDIR: tmp }, encoding: "utf8" });
      expect(r.stderr).toBe("");
      const { pid, dirs } = JSON.parse(r.stdout) as { pid: number; dirs: string[] };
      expect(dirs).not.toContain(`nomadkit-pipes-${gone}-AbCdEf`);
      expect(dirs).toContain(`nomadkit-pipes-${live.pid}-GhIjKl`);
      expect(dirs).toContain("nomadkit-pipes-OldFmt");
      expect(dirs.some((d) => d.startsWith(`nomadkit-pipes-${pid}-`))).toBe(true);
    } finally {
      live.kill("SIGKILL");
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it("removes only its own user's private directories, and none where other users can rename entries", () => {
    // A shared /tmp: anyone may plant nomadkit-pipes-<dead pid>-* there, with a subdirectory swapped
    // for a symlink while root removes it recursively; root then deletes whatever the link names.
    const built = join(dirname(fileURLToPath(import.meta.url)), "../dist/esm/exec/output-pipes.js");
    if (!existsSync(built)) throw new Error(`build first: ${built} is missing (npx turbo run build)`);
    const base = mkdtempSync(join(tmpdir(), "nk-pipes-shared-"));
    const gone = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" }).stdout;
    const run = (tmp: string) => {
      const script = `
        import { readdirSync } from "node:fs";
        import { Writable } from "node:stream";
        const { openOutputPipes } = await import(${JSON.stringify(pathToFileURL(built).href)});
        const sink = () => new Writable({ write: (_c, _e, cb) => cb() });
        const p = await openOutputPipes(sink(), sink());
        process.stdout.write(JSON.stringify(readdirSync(process.env.TMPDIR).sort()));
        p.close();`;
      const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { env: { PATH: process.env.PATH, TMPDIR: tmp }, encoding: "utf8" });
      expect(r.stderr).toBe("");
      return JSON.parse(r.stdout) as string[];
    };
    try {
      const victim = join(base, "victim");
      mkdirSync(victim);
      writeFileSync(join(victim, "keep"), "x");
      const sticky = join(base, "sticky");
      mkdirSync(sticky);
      chmodSync(sticky, 0o1777);
      const mine = `nomadkit-pipes-${gone}-Mine00`;
      const theirs = `nomadkit-pipes-${gone}-Theirs`;
      const open = `nomadkit-pipes-${gone}-Open00`;
      const link = `nomadkit-pipes-${gone}-Link00`;
      mkdirSync(join(sticky, mine, "0"), { recursive: true, mode: 0o700 });
      mkdirSync(join(sticky, theirs));
      symlinkSync(victim, join(sticky, theirs, "y"));
      mkdirSync(join(sticky, open), { mode: 0o755 });
      symlinkSync(victim, join(sticky, link));
      if (process.getuid!() === 0) {
        chownSync(join(sticky, theirs), 65534, 65534);
        chownSync(join(sticky, theirs, "y"), 65534, 65534);
      }
      const left = run(sticky);
      expect(left).not.toContain(mine);
      if (process.getuid!() === 0) expect(left).toContain(theirs);
      expect(left).toContain(open);
      expect(left).toContain(link);
      expect(readdirSync(victim)).toEqual(["keep"]);

      // World-writable without the sticky bit: anyone could swap even our own entries; none removed.
      const loose = join(base, "loose");
      mkdirSync(loose);
      chmodSync(loose, 0o777);
      mkdirSync(join(loose, mine, "0"), { recursive: true, mode: 0o700 });
      expect(run(loose)).toContain(mine);
    } finally {
      rmSync(base, { recursive: true, force: true });
    }
  });

  it("leaves an unprivileged user's pipes at Linux's default (their pipe budget is shared)", async () => {
    // The built module, run as nobody: the same measurement as above, in a process of its own. Copied
    // (with the one module it imports) where nobody can read it, wherever this checkout is.
    const built = join(dirname(fileURLToPath(import.meta.url)), "../dist/esm/exec");
    if (!existsSync(join(built, "output-pipes.js"))) throw new Error(`build first: ${built}/output-pipes.js is missing (npx turbo run build)`);
    const home = mkdtempSync(join(tmpdir(), "nk-nobody-"));
    chmodSync(home, 0o755);
    // The modules' own layout (dist/esm/exec, dist/esm/executor), for their relative imports.
    for (const d of ["exec", "executor"]) mkdirSync(join(home, d), { mode: 0o755 });
    for (const f of ["output-pipes.js", "read-buffers.js"]) copyFileSync(join(built, f), join(home, "exec", f));
    copyFileSync(join(built, "../executor/pids.js"), join(home, "executor/pids.js"));
    writeFileSync(join(home, "package.json"), '{"type":"module"}');
    const script = `
      import { writeSync } from "node:fs";
      import { Writable } from "node:stream";
      const { openOutputPipes } = await import(${JSON.stringify(pathToFileURL(join(home, "exec/output-pipes.js")).href)});
      const sink = () => new Writable({ write: (_c, _e, cb) => cb() });
      const p = await openOutputPipes(sink(), sink());
      let n = 0;
      try { for (;;) n += writeSync(p.writers[0], Buffer.alloc(4096)); } catch (err) { if (err.code !== "EAGAIN") throw err; }
      p.close();
      process.stdout.write(String(n));`;
    const tmp = join(home, "tmp");
    mkdirSync(tmp, { mode: 0o777 });
    chmodSync(tmp, 0o777);
    try {
      const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { uid: 65534, gid: 65534, cwd: home, env: { PATH: process.env.PATH, TMPDIR: tmp }, encoding: "utf8" });
      expect(r.stderr).toBe("");
      expect(Number(r.stdout)).toBe(64 * 1024);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it("serves a drained pair again when the caller says nobody else knows it, and removes any other", async () => {
    // A fresh module instance: none idle from the tests before.
    vi.resetModules();
    const { openOutputPipes, outputPipeStats } = await import("../src/exec/output-pipes.js");
    const drained = async (reusable: boolean) => {
      const p = await openOutputPipes(collector([]), collector([]));
      p.closeWriters();
      await p.eof;
      p.close(reusable);
      return p.dir;
    };
    const a = await drained(true);
    const made = outputPipeStats().made;
    expect(await drained(false)).toBe(a); // reused, then removed
    expect(existsSync(a)).toBe(false);
    expect(outputPipeStats().made).toBe(made);
    const b = await drained(true);
    expect(b).not.toBe(a);
    expect(outputPipeStats().made).toBe(made + 1);
    // Closed before EOF (a writer may still hold it): removed though the caller would reuse it.
    const p = await openOutputPipes(collector([]), collector([]));
    expect(p.dir).toBe(b);
    p.close(true);
    expect(existsSync(b)).toBe(false);
  });
});

/** Processes whose parent is this test process. */
function ownChildren(): string[] {
  const out: string[] = [];
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === process.pid) out.push(readFileSync(`/proc/${pid}/cmdline`, "utf8"));
    } catch {
      // gone
    }
  }
  return out;
}

describe("openOutputPipes after a cleaner removed its directory", () => {
  it("makes a new one, discarding the idle pairs that went with it", async () => {
    vi.resetModules();
    const { openOutputPipes } = await import("../src/exec/output-pipes.js");
    const drained = async () => {
      const got: Buffer[] = [];
      const p = await openOutputPipes(collector(got), collector([]));
      await runInto(p, "printf ok");
      p.close(true);
      return { dir: p.dir, out: Buffer.concat(got).toString() };
    };
    const first = await drained();
    rmSync(dirname(first.dir), { recursive: true, force: true });
    const second = await drained();
    expect(second.out).toBe("ok");
    expect(dirname(second.dir)).not.toBe(dirname(first.dir));
    expect(existsSync(second.dir)).toBe(true);
  });
});

describe("runExecCommand with pooled output", () => {
  it("an abort while its FIFOs are being opened starts no process", async () => {
    const sink = () => Object.assign(new Writable({ write: (_c, _e, cb) => cb() }), { [RETAINS_CHUNKS]: true });
    for (let i = 0; i < 20; i++) {
      const ac = new AbortController();
      const run = runExecCommand({ command: ["sleep", "31.25"] }, { stdin: new PassThrough(), stdout: sink(), stderr: sink(), signal: ac.signal });
      ac.abort(new Error("gone"));
      await expect(run).rejects.toThrow("gone");
    }
    await sleep(100);
    expect(ownChildren().filter((c) => c.includes("31.25"))).toEqual([]);
  });
});

describe("runExecCommand when no FIFO can be made", () => {
  it("falls back to plain pipes (no mkfifo on PATH)", async () => {
    const empty = mkdtempSync(join(tmpdir(), "nk-nomkfifo-"));
    const saved = process.env.PATH;
    process.env.PATH = empty;
    try {
      // A fresh module instance: no idle FIFOs from the tests before.
      vi.resetModules();
      const local = await import("../src/exec/local.js");
      const buffers = await import("../src/exec/read-buffers.js");
      const collect = (into: Buffer[]) =>
        Object.assign(new Writable({ write: (c: Buffer, _e, cb) => void into.push(Buffer.from(c)) ?? cb() }), { [buffers.RETAINS_CHUNKS]: true });
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      const stdin = new PassThrough();
      stdin.end();
      const r = await local.runExecCommand(
        { command: ["/bin/sh", "-c", "readlink /proc/self/fd/1; printf oops >&2; exit 3"], env: { PATH: "/usr/bin:/bin" } },
        { stdin, stdout: collect(out), stderr: collect(err) },
      );
      expect(r.exitCode).toBe(3);
      expect(Buffer.concat(out).toString()).toMatch(/^socket:\[\d+\]\n$/);
      expect(Buffer.concat(err).toString()).toBe("oops");
      expect(buffers.readBufferStats().taken).toBe(0);
    } finally {
      process.env.PATH = saved;
      rmSync(empty, { recursive: true, force: true });
    }
  });
});

describe("exec output from reused buffers, served on the direct path", () => {
  let dir: string;
  let server: http2.Http2Server;
  let driver: DriverClient;
  const sessions = new Set<http2.ServerHttp2Session>();
  /** The working directory of the execs that follow (default: this process's). */
  let cwd: string | undefined;

  beforeAll(async () => {
    const host = createDriverHandlers(
      fakeDriver("pooled", { execTaskStreaming: (s) => runExecCommand({ command: s.command, cwd }, s) }),
    );
    const runtime = new ServerRuntime();
    server = http2.createServer(createPluginHandler((router) => registerDriver(router, host.driver, runtime)));
    server.on("session", (s) => sessions.add(s));
    dir = mkdtempSync(join(tmpdir(), "nomadkit-pooled-"));
    const sock = join(dir, "plugin.sock");
    await new Promise<void>((resolve) => server.listen(sock, resolve));
    driver = new DriverClient(createUnixSocketTransport(sock));
    await driver.startTask({ task: { id: "t", name: "t", allocId: "a1" } });
  });

  afterAll(async () => {
    for (const s of sessions) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(dir, { recursive: true, force: true });
  });

  async function* neverHalfClose(command: string[]) {
    yield { setup: { taskId: "t", command, tty: false } };
    await new Promise(() => {}); // like Nomad
  }

  async function run(name: string, bytes: number, pauseEveryMiB: number) {
    const file = join(dir, `${name}.bin`);
    // Random bytes on both streams: reuse of memory still in flight would show in the digests.
    const cmd = `head -c ${bytes} /dev/urandom | tee ${file}; head -c 65536 /dev/urandom | tee ${file}.err >&2`;
    const out = createHash("sha256");
    const err = createHash("sha256");
    let got = 0;
    let exit = -1;
    for await (const r of driver.execTaskStreaming(neverHalfClose(["/bin/sh", "-c", cmd]))) {
      if (r.stdout?.data.length) {
        out.update(r.stdout.data);
        const before = got;
        got += r.stdout.data.length;
        if (Math.floor(got / (pauseEveryMiB << 20)) > Math.floor(before / (pauseEveryMiB << 20))) await sleep(30);
      }
      if (r.stderr?.data.length) err.update(r.stderr.data);
      if (r.exited) exit = r.result!.exitCode;
    }
    expect(exit).toBe(0);
    expect(got).toBe(bytes);
    expect(out.digest("hex")).toBe(createHash("sha256").update(readFileSync(file)).digest("hex"));
    expect(err.digest("hex")).toBe(createHash("sha256").update(readFileSync(`${file}.err`)).digest("hex"));
  }

  it("delivers two concurrent execs byte-exact, one read slowly, and gets its blocks back", async () => {
    const before = readBufferStats();
    await Promise.all([run("fast", 24 << 20, 1024), run("slow", 12 << 20, 2)]);
    // 36 MiB went through 256 KiB blocks: at least 144 of them, but few new ones (the rest reused).
    const after = readBufferStats();
    expect(after.taken - before.taken).toBeGreaterThanOrEqual(144);
    expect(after.created - before.created).toBeLessThan(60);
    expect(readBufferStats().free).toBeGreaterThan(0);
  });

  it("a command spawn refuses at once (E2BIG) or a cwd that is a file is FailedPrecondition naming it, and its FIFOs are closed", async () => {
    const failure = async (command: string[]) => {
      try {
        for await (const r of driver.execTaskStreaming(neverHalfClose(command))) expect(r.exited).toBeUndefined();
      } catch (err) {
        return ConnectError.from(err);
      }
      throw new Error(`${command[0]} ran`);
    };
    const fds = () => readdirSync("/proc/self/fd").length;
    const pairs = () =>
      readdirSync(tmpdir())
        .filter((n) => n.startsWith(`nomadkit-pipes-${process.pid}-`))
        .flatMap((n) => readdirSync(join(tmpdir(), n)).map((pair) => join(n, pair)));
    const huge = ["echo", "x".repeat(200 * 1024)]; // above Linux's 128 KiB per argument
    try {
      // Pairs left idle by the tests before would be taken (and closed) by the first failures.
      while (outputPipeStats().idle > 0) await failure(huge);
      const before = { fds: fds(), pairs: pairs() };
      for (let i = 0; i < 10; i++) {
        cwd = undefined;
        const tooLong = await failure(huge);
        expect(tooLong.code).toBe(Code.FailedPrecondition);
        expect(tooLong.rawMessage).toMatch(/^exec "\/.*\/echo": spawn E2BIG$/);
        cwd = "/etc/passwd";
        const notADirectory = await failure(["true"]);
        expect(notADirectory.code).toBe(Code.FailedPrecondition);
        expect(notADirectory.rawMessage).toBe('cwd: "/etc/passwd" is not a directory'); // checked before the FIFOs are taken
      }
      expect({ fds: fds(), pairs: pairs() }).toEqual(before);
    } finally {
      cwd = undefined;
    }
  });
});

describe("the direct path's written callback", () => {
  it("comes only once the frame's bytes have left for the socket, not when the write was accepted", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nomadkit-written-"));
    const written = vi.fn();
    const runtime = new ServerRuntime();
    const server = http2.createServer(
      createPluginHandler((router) =>
        registerDriver(
          router,
          {
            async *execTaskStreaming() {
              const msg = outputMessage("stdout", [Buffer.alloc(512 * 1024, 7)], 512 * 1024);
              const frame = wireFrameOf(msg)!;
              yield attachWireFrame(msg, { parts: frame.parts, byteLength: frame.byteLength, written });
            },
          },
          runtime,
        ),
      ),
    );
    const sock = join(dir, "s.sock");
    await new Promise<void>((resolve) => server.listen(sock, resolve));
    const session = http2.connect("http://localhost", { createConnection: () => net.connect(sock) });
    try {
      const req = session.request({
        ":method": "POST",
        ":path": "/hashicorp.nomad.plugins.drivers.proto.Driver/ExecTaskStreaming",
        "content-type": "application/grpc",
        te: "trailers",
      });
      // Nobody reads the response yet: the client's 64 KiB window stops the 512 KiB message.
      await sleep(300);
      expect(written).not.toHaveBeenCalled();
      let got = 0;
      req.on("data", (d: Buffer) => (got += d.length));
      await new Promise<void>((resolve) => req.once("end", () => resolve()));
      expect(got).toBeGreaterThan(512 * 1024);
      expect(written).toHaveBeenCalledTimes(1);
    } finally {
      session.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
