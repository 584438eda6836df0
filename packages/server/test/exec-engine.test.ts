// The exec engine in-process (no gRPC): the consumption-driven backpressure contract, the raw
// form's send(), resize bookkeeping, and the pty runner keeping every byte when the reader is slow.
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { PassThrough, Readable, Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { ExecTaskStreamingRequestSchema, type ExecTaskStreamingRequest } from "@nomadkit/protocol/driver";
import { describe, expect, it } from "vitest";
import { TerminalResizes, execStreaming, runExecCommand, type ExecTaskStream } from "../src/exec/index.js";
import { RequestQueue } from "@nomadkit/client";
import fc from "fast-check";
import { OutputTail } from "../src/exec/output-tail.js";
import { noteHostCookie } from "../src/goplugin/env.js";


const req = (init: Parameters<typeof create<typeof ExecTaskStreamingRequestSchema>>[1]) => create(ExecTaskStreamingRequestSchema, init);
const setup = (command: string[], tty = false) => req({ setup: { taskId: "t", command, tty } });

describe("high-level engine", () => {
  it("completes a write only after the message carrying it has been pulled", async () => {
    const requests = new RequestQueue<ExecTaskStreamingRequest>();
    requests.push(setup(["x"]));
    const written: string[] = [];
    let finish!: () => void;
    const gate = new Promise<void>((r) => (finish = r));
    const responses = execStreaming(requests, {
      exec: async (s) => {
        await new Promise<void>((r) => s.stdout.write("one", () => (written.push("one"), r())));
        await new Promise<void>((r) => s.stdout.write("two", () => (written.push("two"), r())));
        await gate;
        return { exitCode: 0 };
      },
    });
    const first = await responses.next();
    expect(Buffer.from(first.value!.stdout!.data).toString()).toBe("one");
    // "one" has been handed out but not yet consumed: its write is still pending.
    await sleep(0);
    expect(written).toEqual([]);
    const second = await responses.next();
    expect(Buffer.from(second.value!.stdout!.data).toString()).toBe("two");
    expect(written).toEqual(["one"]);
    finish();
    const rest = [];
    for await (const r of responses) rest.push(r);
    expect(written).toEqual(["one", "two"]);
    expect(rest.map((r) => (r.stdout?.close ? "stdout-close" : r.stderr?.close ? "stderr-close" : r.exited ? "exited" : "?"))).toEqual([
      "stdout-close",
      "stderr-close",
      "exited",
    ]);
    requests.end();
  });

  it("splits large writes into views of at most maxChunkSize", async () => {
    const requests = new RequestQueue<ExecTaskStreamingRequest>();
    requests.push(setup(["x"]));
    const big = Buffer.alloc(10_000, 7);
    const sizes: number[] = [];
    for await (const r of execStreaming(requests, { exec: async (s) => (s.stdout.write(big), { exitCode: 0 }) }, { maxChunkSize: 4096 })) {
      if (r.stdout?.data.length) {
        sizes.push(r.stdout.data.length);
        expect(r.stdout.data.buffer).toBe(big.buffer); // a view, not a copy
      }
    }
    expect(sizes).toEqual([4096, 4096, 1808]);
    requests.end();
  });

  it("keeps the latest terminal size for a terminal started late", async () => {
    const r = new TerminalResizes();
    expect(r.latest).toBeUndefined();
    r.push({ height: 1, width: 2 });
    r.push({ height: 3, width: 4 });
    const seen: number[] = [];
    const it = r[Symbol.asyncIterator]();
    const first = await it.next();
    expect(first.value).toEqual({ height: 3, width: 4 });
    const off = r.on((s) => seen.push(s.height));
    r.push({ height: 5, width: 6 });
    expect((await it.next()).value).toEqual({ height: 5, width: 6 });
    off();
    r.close();
    expect((await it.next()).done).toBe(true);
    expect(seen).toEqual([5]);
  });
});

describe("raw engine", () => {
  it("send() resolves once the response has been consumed; requests pass through untouched", async () => {
    const requests = new RequestQueue<ExecTaskStreamingRequest>();
    const heartbeat = req({});
    requests.push(setup(["fwd"]), heartbeat);
    let stream!: ExecTaskStream;
    const sent: boolean[] = [false, false];
    let done!: () => void;
    const finished = new Promise<void>((r) => (done = r));
    const responses = execStreaming(requests, {
      raw: async (s) => {
        stream = s;
        const it = s[Symbol.asyncIterator]();
        expect((await it.next()).value).toBe(heartbeat);
        const a = s.send({ stdout: { data: Buffer.from("a") } }).then(() => (sent[0] = true));
        const b = s.send({ exited: true, result: { exitCode: 0 } }).then(() => (sent[1] = true));
        await Promise.all([a, b]);
        done();
      },
      exec: async () => {
        throw new Error("the raw form must win");
      },
    });
    expect((await responses.next()).value?.stdout?.data).toEqual(Buffer.from("a"));
    await sleep(0);
    expect(sent).toEqual([false, false]);
    expect((await responses.next()).value?.exited).toBe(true);
    await sleep(0);
    expect(sent).toEqual([true, false]);
    expect((await responses.next()).done).toBe(true);
    await finished;
    expect(sent).toEqual([true, true]);
    expect(stream.command).toEqual(["fwd"]);
    requests.end();
  });
});

describe("OutputTail", () => {
  it("keeps exactly the last `limit` bytes of everything pushed", () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 40 }), { maxLength: 30 }), fc.integer({ min: 0, max: 64 }), (chunks, limit) => {
        const tail = new OutputTail(limit);
        for (const c of chunks) tail.push(c);
        const all = Buffer.concat(chunks);
        expect(tail.bytes()).toEqual(all.subarray(Math.max(0, all.length - limit)));
      }),
      { seed: 7, numRuns: 300 },
    );
  });
});

describe("runExecCommand", () => {
  it("with a tty, keeps output written just before exit even when the reader is slow", async () => {
    const size = 300_000;
    const requests = new RequestQueue<ExecTaskStreamingRequest>();
    requests.push(setup(["sh", "-c", `head -c ${size} /dev/zero | tr '\\0' a; exit 3`], true));
    let received = 0;
    let exit: number | undefined;
    for await (const r of execStreaming(requests, { exec: (s) => runExecCommand({ command: s.command, tty: s.tty }, s) })) {
      if (r.stdout?.data.length) {
        received += r.stdout.data.length;
        // Near the end, read slower than node-pty's 200 ms socket teardown after the child exits.
        if (received > size - 48 * 1024) await sleep(250);
      }
      if (r.exited) exit = r.result?.exitCode;
    }
    requests.end();
    expect(received).toBe(size);
    expect(exit).toBe(3);
  }, 120_000);

  it("with a tty, takes no more input while the program does not read it", async () => {
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    let produced = 0;
    // Capped, so that a runner without backpressure fails the test instead of filling memory.
    const stdin = new Readable({
      highWaterMark: chunk.length,
      read() {
        produced += chunk.length;
        this.push(produced > 256 * 1024 * 1024 ? null : chunk);
      },
    });
    let out = "";
    let ready!: () => void;
    const isReady = new Promise<void>((r) => (ready = r));
    const stdout = new Writable({
      write(c: Buffer, _e, cb) {
        out += c.toString("latin1");
        if (out.includes("ready")) ready();
        cb();
      },
    });
    const ac = new AbortController();
    const run = runExecCommand(
      { command: ["sh", "-c", "stty raw -echo; echo ready; exec sleep 60"], tty: true },
      { stdin, stdout, stderr: new PassThrough().resume(), signal: ac.signal },
    );
    await isReady;
    await sleep(500);
    // The terminal's input buffer, a chunk being written and the stream's buffer: nothing like 256 MiB.
    expect(produced).toBeLessThan(4 * 1024 * 1024);
    ac.abort();
    await run.catch(() => undefined);
  }, 60_000);

  it("with a tty, writes no input to the terminal's descriptor number once the terminal is closed (output still on its way)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nomadkit-ptyfd-"));
    const victim = join(dir, "victim");
    const taken: number[] = [];
    try {
      let master: number | undefined;
      let finalCalled!: () => void;
      const atFinal = new Promise<void>((r) => (finalCalled = r));
      let releaseFinal!: () => void;
      const stdout = new Writable({
        write(_c: Buffer, _e, cb) {
          // While the command runs: the terminal's master, as this process has it open.
          master ??= readdirSync("/proc/self/fd")
            .map(Number)
            .find((fd) => {
              try {
                return readlinkSync(`/proc/self/fd/${fd}`) === "/dev/ptmx";
              } catch {
                return false;
              }
            });
          cb();
        },
        final(cb) {
          // The command has exited and its terminal is closed; the client has not read everything
          // yet (a slow client). The next files opened get the lowest free numbers: the terminal's too.
          for (let i = 0; i < 64 && !taken.includes(master!); i++) taken.push(openSync(victim, "a"));
          releaseFinal = () => cb();
          finalCalled();
        },
      });
      const stdin = new PassThrough();
      const resize = new TerminalResizes();
      const run = runExecCommand({ command: ["sh", "-c", "echo ready"], tty: true }, { stdin, stdout, stderr: new PassThrough().resume(), resize });
      await atFinal;
      expect(master).toBeGreaterThan(2);
      expect(taken).toContain(master);
      // What the client sends meanwhile must go nowhere. (A resize is an ioctl, which a regular file
      // refuses unseen; it is sent through the same guard.)
      let delivered = false;
      stdin.on("data", () => (delivered = true));
      stdin.write("typed after the exit\n");
      resize.push({ height: 33, width: 99 });
      // Delivered, and written (a write pauses stdin until it is done) or dropped.
      while (!delivered || stdin.isPaused()) await sleep(5);
      releaseFinal();
      expect((await run).exitCode).toBe(0);
      expect(readFileSync(victim, "utf8")).toBe("");
    } finally {
      for (const fd of taken) closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("with a tty, reports the exit of a command that ends while the user has stopped the terminal's output (^S)", async () => {
    // ^S (IXON) stops the terminal's output; the command then exits without writing. Nomad's
    // executor reports the exit; the runner's end-of-output marker cannot pass a stopped terminal.
    // -ixany (the kernel's default; node-pty sets ixany): the input after ^S does not restart it.
    // Six at once: more than libuv's four threadpool threads, which blocked writes would hold.
    const one = async (): Promise<("close" | number)[]> => {
      const requests = new RequestQueue<ExecTaskStreamingRequest>();
      requests.push(setup(["sh", "-c", "stty -ixany; echo ready; read x; exit 7"], true));
      let out = "";
      const ends: ("close" | number)[] = [];
      for await (const r of execStreaming(requests, { exec: (s) => runExecCommand({ command: s.command, tty: s.tty }, s) })) {
        if (r.stdout?.data.length) {
          const before = out;
          out += Buffer.from(r.stdout.data).toString("latin1");
          // In order through the line discipline: ^S is acted on before `read` gets its line.
          if (!before.includes("ready") && out.includes("ready")) requests.push(req({ stdin: { data: new Uint8Array([0x13, 0x78, 0x0a]) } }));
        }
        if (r.stdout?.close) ends.push("close");
        if (r.exited) ends.push(r.result!.exitCode);
      }
      requests.end();
      return ends;
    };
    expect(await Promise.all(Array.from({ length: 6 }, one))).toEqual(Array.from({ length: 6 }, () => ["close", 7]));
  }, 30_000);

  it("with a tty, end of input after a partial line still ends a reader such as cat", async () => {
    let out = "";
    const stdout = new Writable({
      write(c: Buffer, _e, cb) {
        out += c.toString();
        cb();
      },
    });
    const r = await runExecCommand({ command: ["cat"], tty: true }, { stdin: Readable.from([Buffer.from("abc")]), stdout, stderr: new PassThrough().resume() });
    expect(r.exitCode).toBe(0);
    expect(out).toContain("abc");
  }, 60_000);

  it("gives the process command[0] as typed as its argv[0] (Go's exec.Command keeps it), with and without a tty", async () => {
    const cmdline = async (options: Parameters<typeof runExecCommand>[0]) => {
      let out = "";
      const stdout = new Writable({
        write(c: Buffer, _e, cb) {
          out += c.toString("latin1");
          cb();
        },
      });
      const r = await runExecCommand(options, { stdin: Readable.from([]), stdout, stderr: new PassThrough().resume() });
      expect(r.exitCode, `${JSON.stringify(options.command)} tty ${options.tty}: ${out}`).toBe(0);
      return out.replaceAll("\0", " ").trim();
    };
    const cwd = mkdtempSync(join(tmpdir(), "nk-argv0-"));
    try {
      for (const tty of [false, true]) {
        expect(await cmdline({ command: ["cat", "/proc/self/cmdline"], tty }), `tty ${tty}`).toBe("cat /proc/self/cmdline");
        // A relative name is taken from cwd, and kept as typed.
        const rel = `${"../".repeat(cwd.split("/").length)}bin/cat`;
        expect(await cmdline({ command: [rel, "/proc/self/cmdline"], tty, cwd }), `tty ${tty}`).toBe(`${rel} /proc/self/cmdline`);
        // A caller that looked the command up itself names argv[0] (the executor: the name typed).
        const found = { command: ["/usr/bin/cat", "/proc/self/cmdline"], argv0: "cat", env: { PATH: "/usr/bin" }, tty };
        expect(await cmdline(found), `tty ${tty}`).toBe("cat /proc/self/cmdline");
      }
      // Any name, where node-pty does not exec the command.
      expect(await cmdline({ command: ["/usr/bin/cat", "/proc/self/cmdline"], argv0: "kitty" })).toBe("kitty /proc/self/cmdline");
      // Through a caller's spawn too: it gets argv0 among the options.
      const { spawn } = await import("node:child_process");
      expect(await cmdline({ command: ["cat", "/proc/self/cmdline"], spawn: (f, a, o) => spawn(f, a, o) })).toBe("cat /proc/self/cmdline");
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  }, 60_000);

  it("reports a missing executable naming it", async () => {
    await expect(
      runExecCommand({ command: ["definitely-not-a-command-xyz"] }, { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr }),
    ).rejects.toMatchObject({ rawMessage: 'command[0]: executable "definitely-not-a-command-xyz" not found in PATH' });
  });

  it("with a tty, reports an argument the kernel refuses (E2BIG) as an error, as without one, not as the command's exit 1", async () => {
    for (const tty of [false, true]) {
      const io = { stdin: new PassThrough(), stdout: new PassThrough(), stderr: new PassThrough() };
      io.stdout.resume();
      io.stderr.resume();
      const huge = "x".repeat(128 * 1024);
      await expect(runExecCommand({ command: ["/bin/echo", huge], tty }, io), `tty ${tty}`).rejects.toMatchObject({
        code: Code.FailedPrecondition,
        rawMessage: expect.stringMatching(/^exec "\/bin\/echo": spawn E2BIG/),
      });
    }
    // One byte less fits (the NUL makes 128 KiB).
    const io = { stdin: new PassThrough(), stdout: new PassThrough(), stderr: new PassThrough() };
    io.stdout.resume();
    io.stderr.resume();
    expect((await runExecCommand({ command: ["/bin/true", "x".repeat(128 * 1024 - 1)], tty: true }, io)).exitCode).toBe(0);
  });

  it("reports a script whose interpreter is missing as an error naming the interpreter, with a tty as without one (not node-pty's exit 1)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nomadkit-interp-"));
    try {
      const script = join(dir, "script");
      writeFileSync(script, "#!/nonexistent/python9\nprint(1)\n", { mode: 0o755 });
      for (const tty of [false, true]) {
        const io = { stdin: new PassThrough(), stdout: new PassThrough(), stderr: new PassThrough() };
        io.stdout.resume();
        io.stderr.resume();
        // Before: "spawn <script> ENOENT" (FailedPrecondition) without a tty, "execvp(3) failed." and exit 1 with one.
        await expect(runExecCommand({ command: [script], tty }, io), `tty ${tty}`).rejects.toMatchObject({
          code: Code.InvalidArgument,
          rawMessage: `command[0]: cannot start ${JSON.stringify(script)}: its interpreter "/nonexistent/python9": ENOENT`,
        });
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("runs a script whose interpreter is relative to its working directory, as the kernel finds it", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nomadkit-interp-rel-"));
    try {
      mkdirSync(join(dir, "bin"));
      symlinkSync("/bin/sh", join(dir, "bin/shx"));
      const script = join(dir, "script");
      writeFileSync(script, "#!bin/shx\necho relative\n", { mode: 0o755 });
      let out = "";
      const io = { stdin: new PassThrough(), stdout: new PassThrough(), stderr: new PassThrough() };
      io.stdout.on("data", (d: Buffer) => (out += d));
      io.stderr.resume();
      io.stdin.end();
      expect((await runExecCommand({ command: [script], cwd: dir }, io)).exitCode).toBe(0);
      expect(out).toBe("relative\n");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("reports a working directory deleted under the task as such, not as a missing command (pipes and tty)", async () => {
    const gone = mkdtempSync(join(tmpdir(), "nomadkit-gone-"));
    rmSync(gone, { recursive: true });
    for (const tty of [false, true]) {
      const io = { stdin: new PassThrough(), stdout: new PassThrough(), stderr: new PassThrough() };
      io.stdout.resume();
      io.stderr.resume();
      // Before: "exec \"/bin/sh\": spawn /bin/sh ENOENT" without a tty, node-pty's "chdir(2) failed." and exit 1 with one.
      await expect(runExecCommand({ command: ["sh", "-c", "exit 0"], tty, cwd: gone }, io), `tty ${tty}`).rejects.toMatchObject({
        code: Code.FailedPrecondition,
        rawMessage: `cwd: ${JSON.stringify(gone)} does not exist`,
      });
    }
  });

  /** What `env` prints when run without an env option while `vars` are set in this process. */
  async function inheritedEnv(vars: Record<string, string>): Promise<string> {
    Object.assign(process.env, vars);
    let out = "";
    try {
      const stdout = new Writable({
        write(chunk: Buffer, _enc, done) {
          out += chunk.toString();
          done();
        },
      });
      const result = await runExecCommand({ command: ["env"] }, { stdin: Readable.from([]), stdout, stderr: new PassThrough().resume() });
      expect(result.exitCode).toBe(0);
    } finally {
      for (const k of Object.keys(vars)) delete process.env[k];
    }
    return out;
  }

  it("without env, runs the command in the plugin's environment minus go-plugin's variables", async () => {
    const out = await inheritedEnv({ NOMAD_PLUGIN_MAGIC_COOKIE: "cookie", PLUGIN_PROTOCOL_VERSIONS: "2", PLUGIN_CLIENT_CERT: "cert", NK_EXEC_MARK: "kept" });
    const names = out
      .split("\n")
      .filter(Boolean)
      .map((l) => l.slice(0, l.indexOf("=")));
    expect(names).toContain("NK_EXEC_MARK");
    expect(names.filter((k) => k === "NOMAD_PLUGIN_MAGIC_COOKIE" || k.startsWith("PLUGIN_"))).toEqual([]);
  });

  it("leaves out the cookie of another go-plugin host this process was served by", async () => {
    // servePlugin({ handshake }) notes its cookie variable as it checks it, maybe in another copy of
    // this package (the launcher's bundled transport, the other build): here the CommonJS build's.
    const built = join(dirname(fileURLToPath(import.meta.url)), "../dist/cjs/goplugin/env.js");
    const other = createRequire(import.meta.url)(built) as { noteHostCookie: typeof noteHostCookie };
    expect(other.noteHostCookie).not.toBe(noteHostCookie);
    other.noteHostCookie({ cookieKey: "NK_OTHER_HOST_COOKIE", cookieValue: "s3cr3t" });
    const out = await inheritedEnv({ NK_OTHER_HOST_COOKIE: "s3cr3t" });
    expect(out).toContain("PATH=");
    expect(out).not.toContain("NK_OTHER_HOST_COOKIE");
  });

  it("passes stdin through pipes and ends with the process", async () => {
    const requests = new RequestQueue<ExecTaskStreamingRequest>();
    requests.push(setup(["sh", "-c", "tr a-z A-Z; echo done >&2"]), req({ stdin: { data: Buffer.from("hello") } }), req({ stdin: { close: true } }));
    let out = "";
    let err = "";
    for await (const r of execStreaming(requests, { exec: (s) => runExecCommand({ command: s.command }, s) })) {
      if (r.stdout?.data.length) out += Buffer.from(r.stdout.data).toString();
      if (r.stderr?.data.length) err += Buffer.from(r.stderr.data).toString();
    }
    requests.end();
    expect(out).toBe("HELLO");
    expect(err).toBe("done\n");
  });
});
