// Exec output read into reused buffers: the block accounting never hands out memory that a live
// chunk still uses (fast-check), socket pairs connect the right ends (real child processes), and a
// real exec served on the direct path comes out byte-exact while its blocks come back for reuse.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { PassThrough, Writable } from "node:stream";
import * as http2 from "node:http2";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { DriverClient, createUnixSocketTransport } from "@nomadkit/client";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createDriverHandlers, defineDriver } from "../src/driver/index.js";
import { runExecCommand } from "../src/exec/index.js";
import { PooledReader, RETAINS_CHUNKS, readBufferStats, releaseChunk, retainChunk } from "../src/exec/read-buffers.js";
import { socketPair } from "../src/exec/socket-pair.js";
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

describe("socketPair", () => {
  it("pairs the right ends when many are made at once, and a child can write to its end", async () => {
    const got = new Map<number, Buffer[]>();
    const pairs = await Promise.all(
      Array.from({ length: 8 }, async (_, i) => {
        const reader = new PooledReader();
        got.set(i, []);
        const [ours, theirs] = await socketPair({
          buffer: reader.next,
          callback: (n) => void got.get(i)!.push(Buffer.from(reader.chunk(n))),
        });
        return { i, ours, theirs };
      }),
    );
    await Promise.all(
      pairs.map(
        ({ i, ours, theirs }) =>
          new Promise<void>((resolve, reject) => {
            // A real child writes into its end; ours sees exactly that, then EOF.
            const child = spawn("/bin/sh", ["-c", `printf 'pair-%s' ${i}`], { stdio: ["ignore", theirs, "inherit"] });
            theirs.destroy();
            child.once("error", reject);
            ours.once("close", () => resolve());
          }),
      ),
    );
    for (const { i } of pairs) expect(Buffer.concat(got.get(i)!).toString()).toBe(`pair-${i}`);
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

describe("runExecCommand with pooled output", () => {
  it("an abort while its sockets are being made starts no process", async () => {
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

describe("runExecCommand when no socket pair can be made", () => {
  it("falls back to plain pipes (a TMPDIR too long for a socket path)", async () => {
    const long = join(mkdtempSync(join(tmpdir(), "nk-long-")), "x".repeat(120));
    mkdirSync(long);
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = long;
    try {
      // A fresh module instance: the socket-pair factory has not been started with another TMPDIR.
      vi.resetModules();
      const local = await import("../src/exec/local.js");
      const buffers = await import("../src/exec/read-buffers.js");
      const collect = (into: Buffer[]) =>
        Object.assign(new Writable({ write: (c: Buffer, _e, cb) => void into.push(Buffer.from(c)) ?? cb() }), { [buffers.RETAINS_CHUNKS]: true });
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      const stdin = new PassThrough();
      stdin.end();
      const r = await local.runExecCommand({ command: ["/bin/sh", "-c", "printf hello; printf oops >&2; exit 3"] }, { stdin, stdout: collect(out), stderr: collect(err) });
      expect(r.exitCode).toBe(3);
      expect(Buffer.concat(out).toString()).toBe("hello");
      expect(Buffer.concat(err).toString()).toBe("oops");
      expect(buffers.readBufferStats().created).toBe(0);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
      rmSync(dirname(long), { recursive: true, force: true });
    }
  });
});

describe("exec output from reused buffers, served on the direct path", () => {
  let dir: string;
  let server: http2.Http2Server;
  let driver: DriverClient;
  const sessions = new Set<http2.ServerHttp2Session>();

  beforeAll(async () => {
    const host = createDriverHandlers(
      defineDriver({
        name: "pooled",
        version: "0.0.1",
        fingerprint: () => ({ health: "healthy" }),
        startTask: () => {},
        waitTask: async () => ({ exitCode: 0 }),
        stopTask: () => {},
        destroyTask: () => {},
        execTaskStreaming: (s) => runExecCommand({ command: s.command }, s),
      }),
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
    const before = readBufferStats().created;
    await Promise.all([run("fast", 24 << 20, 1024), run("slow", 12 << 20, 2)]);
    // 36 MiB went through 256 KiB blocks: without reuse that is at least 144 of them.
    const created = readBufferStats().created - before;
    expect(created).toBeGreaterThan(0);
    expect(created).toBeLessThan(60);
    expect(readBufferStats().free).toBeGreaterThan(0);
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
