// The bench's grpc-go client (tools/bench/client-go) against a scripted node:http2 server on a unix
// socket: it must count what a correct exec stream carries, and fail, naming the fault, on every
// protocol violation the Node client also rejects; its unary mode must check the reply and count.
// Replies are encoded with protobuf-es, so its protowire parsing meets an independent encoder. Its
// start-up mode launches the bench's minimal plugin through go-plugin.
import * as http2 from "node:http2";
import { chmodSync, copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  ExecTaskStreamingRequestSchema,
  ExecTaskStreamingResponseSchema,
  InspectTaskRequestSchema,
  InspectTaskResponseSchema,
} from "@nomadkit/protocol/driver";
import { PluginInfoResponseSchema, PluginType } from "@nomadkit/protocol/base";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildGoClient } from "../bench/lib/go-client.mjs";
import { runProcess, type ProcessResult } from "./run-process.js";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const skip =
  process.platform !== "linux" || !existsSync("/usr/bin/dpkg")
    ? "the grpc-go client is built from Debian's Go packages"
    : undefined;

type Init = Parameters<typeof create<typeof ExecTaskStreamingResponseSchema>>[1];

/** A gRPC message: flags 0, big-endian length, payload. */
function frame(payload: Uint8Array): Buffer {
  const b = Buffer.alloc(5 + payload.length);
  b.writeUInt32BE(payload.length, 1);
  b.set(payload, 5);
  return b;
}
const msg = (init: Init) => frame(toBinary(ExecTaskStreamingResponseSchema, create(ExecTaskStreamingResponseSchema, init)));
const out = (n: number) => msg({ stdout: { data: new Uint8Array(n).fill(7) } });
const closeOut = msg({ stdout: { close: true } });
const closeErr = msg({ stderr: { close: true } });
const exited = (code = 0) => msg({ exited: true, result: { exitCode: code } });

/** What the server saw of the last exec: its setup message, and whether the request side ended before the reply did. */
interface Seen {
  setup?: unknown;
  halfClosedEarly?: boolean;
}

/** What the scripted server answers next. */
let script: { messages: Buffer[]; status?: number; inspectId?: string } = { messages: [] };
const seen: Seen = {};

let dir: string;
let socket: string;
let server: http2.Http2Server;
let bin: string;

function runClient(args: string[]): Promise<ProcessResult> {
  return runProcess(bin, ["-socket", socket, "-task", "task-1", ...args]);
}

describe.skipIf(skip !== undefined)(`bench grpc-go client${skip ? ` [skipped: ${skip}]` : ""}`, () => {
  beforeAll(async () => {
    // First use on a fresh machine installs Debian's Go packages and builds: minutes.
    bin = await buildGoClient();
    dir = mkdtempSync(join(tmpdir(), "nk-go-client-"));
    socket = join(dir, "s.sock");
    server = http2.createServer();
    server.on("stream", (stream, headers) => {
      stream.on("error", () => {});
      const path = headers[":path"];
      let buf = Buffer.alloc(0);
      let answered = false;
      let replied = false;
      // Nomad never half-closes an exec: the request side must still be open when the reply ends.
      stream.on("end", () => {
        if (!replied) seen.halfClosedEarly = true;
      });
      stream.on("data", (chunk: Buffer) => {
        if (answered) return;
        buf = Buffer.concat([buf, chunk]);
        if (buf.length < 5 || buf.length < 5 + buf.readUInt32BE(1)) return;
        answered = true;
        const body = buf.subarray(5, 5 + buf.readUInt32BE(1));
        stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
        stream.on("wantTrailers", () =>
          stream.sendTrailers({ "grpc-status": String(script.status ?? 0), ...(script.status ? { "grpc-message": "scripted failure" } : {}) }),
        );
        if (path === "/hashicorp.nomad.plugins.drivers.proto.Driver/InspectTask") {
          const req = fromBinary(InspectTaskRequestSchema, body);
          const reply = create(InspectTaskResponseSchema, { task: { id: script.inspectId ?? req.taskId } });
          stream.end(frame(toBinary(InspectTaskResponseSchema, reply)));
          return;
        }
        seen.setup = fromBinary(ExecTaskStreamingRequestSchema, body);
        // Replying a little later gives a half-close sent right after the setup time to arrive.
        setTimeout(() => {
          for (const m of script.messages) stream.write(m);
          replied = true;
          stream.end();
        }, 50);
      });
    });
    await new Promise<void>((r) => server.listen(socket, r));
  }, 20 * 60_000);

  afterAll(async () => {
    await new Promise((r) => server?.close(r));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("counts a correct exec stream and sends Nomad's setup without half-closing", async () => {
    script = { messages: [out(300_000), out(700_000), closeOut, closeErr, exited()] };
    seen.halfClosedEarly = false;
    const r = await runClient(["-bytes", "1000000"]);
    expect(r.code, r.stderr).toBe(0);
    const res = JSON.parse(r.stdout);
    expect(res).toMatchObject({ bytes: 1_000_000, messages: 5 });
    expect(res.seconds).toBeGreaterThan(0);
    expect(seen.setup).toMatchObject({ setup: { taskId: "task-1", command: ["head", "-c", "1000000", "/dev/zero"], tty: false } });
    expect(seen.halfClosedEarly).toBe(false);
  });

  it.each([
    ["stdout data after its close marker", [out(10), closeOut, out(5), closeErr, exited()], 15],
    ["second stdout close marker", [out(10), closeOut, closeOut, closeErr, exited()], 10],
    ["exited before both close markers", [out(10), closeOut, exited()], 10],
    ["a message after exited", [out(10), closeOut, closeErr, exited(), closeErr], 10],
    ["got 9 stdout bytes, expected 10", [out(9), closeOut, closeErr, exited()], 10],
    ["got 4 stderr bytes", [out(10), msg({ stderr: { data: new Uint8Array(4) } }), closeOut, closeErr, exited()], 10],
    ["exit code 3", [out(10), closeOut, closeErr, exited(3)], 10],
    ["0 exited messages", [out(10), closeOut, closeErr], 10],
  ])("fails on %s", async (fault, messages, bytes) => {
    script = { messages };
    const r = await runClient(["-bytes", String(bytes)]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(fault);
    expect(r.stdout).toBe("");
  });

  it("fails on a non-OK status, naming it", async () => {
    script = { messages: [out(10)], status: 13 };
    const r = await runClient(["-bytes", "10"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/code:\s*13/);
    expect(r.stderr).toContain("scripted failure");
  });

  it("unary: marks the counted window and counts InspectTask replies naming the task", async () => {
    script = { messages: [] };
    const r = await runClient(["-mode", "unary", "-concurrency", "4", "-warmup", "100ms", "-seconds", "300ms"]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split("\n").map((l) => JSON.parse(l));
    expect(lines[0]).toEqual({ phase: "counting" });
    expect(lines[1].calls).toBeGreaterThan(0);
    expect(lines[1].callsPerSec).toBeGreaterThan(0);
  });

  it("unary: fails when the reply names another task", async () => {
    script = { messages: [], inspectId: "someone-else" };
    const r = await runClient(["-mode", "unary", "-warmup", "100ms", "-seconds", "100ms"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`InspectTask answered for "someone-else"`);
  });

  describe("start-up: go-plugin launches a plugin, PluginInfo, Kill", () => {
    const minimal = join(repo, "tools/bench/servers/minimal-plugin.cjs");
    const info = (name: string) =>
      Buffer.from(toBinary(PluginInfoResponseSchema, create(PluginInfoResponseSchema, { type: PluginType.DRIVER, name, pluginApiVersions: ["v0.1.0"] }))).toString("hex");
    const startup = (env: Record<string, string>, extra: string[] = []) =>
      runProcess(bin, ["-mode", "startup", "-plugin", minimal, "-node", process.execPath, "-runs", "2", ...extra], { env: { ...process.env, ...env } });

    it("times the cycles of the plugin, the floor and node -e 0; medians as JSON", async () => {
      const r = await startup({ NOMADKIT_BENCH_PLUGIN_INFO: info("minimal") }, ["-floor", minimal, "-floor-env", `NOMADKIT_BENCH_PLUGIN_INFO=${info("floor")}`]);
      expect(r.code, r.stderr).toBe(0);
      const res = JSON.parse(r.stdout);
      expect(res.runs).toBe(2);
      for (const k of ["pluginMs", "bareNodeMs", "floorMs"]) expect(res[k]).toBeGreaterThan(0);
      for (const k of ["handshake", "pluginInfo", "shutdown"]) expect(res.phasesMs[k]).toBeGreaterThan(0);
      expect(res.pluginMs).toBeGreaterThanOrEqual(res.phasesMs.handshake);
    });

    it("fails when PluginInfo has no name, naming the plugin", async () => {
      const r = await startup({ NOMADKIT_BENCH_PLUGIN_INFO: info("") });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`${minimal}: PluginInfo without name`);
      // The floor gets -floor-env on top of the environment: here the nameless answer.
      const floor = join(dir, "floor.cjs");
      copyFileSync(minimal, floor);
      chmodSync(floor, 0o755);
      const f = await startup({ NOMADKIT_BENCH_PLUGIN_INFO: info("minimal") }, ["-floor", floor, "-floor-env", `NOMADKIT_BENCH_PLUGIN_INFO=${info("")}`]);
      expect(f.code).toBe(1);
      expect(f.stderr).toContain(`${floor}: PluginInfo without name`);
    });

    it("fails, naming the plugin, when it never completes the handshake", async () => {
      const r = await runProcess(bin, ["-mode", "startup", "-plugin", "/bin/false", "-runs", "1"]);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/\/bin\/false: handshake/);
    });
  });
});
