// Unary calls on a plugin connection run directly on its HTTP/2 session (runtime/h2-call.ts), other
// transports through connect. Both must give callers the same results: here a raw node:http2 server
// answers each scenario (well-formed, malformed, failing) and every scenario is called through both
// paths; connect's result is the oracle, and the expected code is checked as well.
import { spawn } from "node:child_process";
import { once } from "node:events";
import * as http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import fc from "fast-check";
import { create, toBinary, toJson } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { base, structs } from "@nomadkit/protocol";
import {
  BasePluginClient,
  PluginShutdownError,
  RecoverableError,
  createUnixSocketTransport,
  isCancellation,
  reattachPlugin,
  type PluginClient,
} from "../src/index.js";
import { encodeRpcStatus } from "./status.js";
import { tempDir } from "./helpers.js";

const info = toBinary(
  base.PluginInfoResponseSchema,
  create(base.PluginInfoResponseSchema, { type: base.PluginType.DRIVER, name: "raw", pluginVersion: "1.0.0", pluginApiVersions: ["0.1.0"] }),
);
const frame = (bytes: Uint8Array, flags = 0) => {
  const out = Buffer.alloc(5 + bytes.length);
  out[0] = flags;
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, 5);
  return out;
};
const grpcHeaders = { ":status": 200, "content-type": "application/grpc" };
const recoverable = Buffer.from(
  encodeRpcStatus({
    code: Code.FailedPrecondition,
    message: "image pull failed",
    details: [
      {
        typeUrl: "type.googleapis.com/hashicorp.nomad.plugins.shared.structs.RecoverableError",
        value: toBinary(structs.RecoverableErrorSchema, create(structs.RecoverableErrorSchema, { recoverable: true })),
      },
    ],
  }),
).toString("base64");

type Respond = (s: http2.ServerHttp2Stream, h: http2.IncomingHttpHeaders) => void;

/** Body then trailers. */
const withTrailers = (s: http2.ServerHttp2Stream, body: Buffer, trailers: http2.OutgoingHttpHeaders, headers = {}) => {
  s.respond({ ...grpcHeaders, ...headers }, { waitForTrailers: true });
  s.once("wantTrailers", () => s.sendTrailers(trailers));
  s.end(body);
};

/** Each response the server can give, by the request's `x-scenario` header. */
const scenarios: Record<string, Respond> = {
  ok: (s) => withTrailers(s, frame(info), { "grpc-status": "0" }),
  "ok, one DATA frame per byte": (s) => {
    s.respond(grpcHeaders, { waitForTrailers: true });
    s.once("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
    const body = frame(info);
    let i = 0;
    const next = () => (i < body.length ? s.write(body.subarray(i, ++i), () => setImmediate(next)) : s.end());
    next();
  },
  "two messages": (s) => withTrailers(s, Buffer.concat([frame(info), frame(info)]), { "grpc-status": "0" }),
  "no message, status OK": (s) => withTrailers(s, Buffer.alloc(0), { "grpc-status": "0" }),
  "trailers-only OK": (s) => s.respond({ ...grpcHeaders, "grpc-status": "0" }, { endStream: true }),
  "trailers-only Canceled": (s) => s.respond({ ...grpcHeaders, "grpc-status": "1", "grpc-message": "exec%20cancelled" }, { endStream: true }),
  "trailers-only NotFound": (s) =>
    s.respond({ ...grpcHeaders, "grpc-status": "5", "grpc-message": "task%20t1%20not%20found" }, { endStream: true }),
  // A driver passing on a daemon's HTTP/2 error: the plugin processed the call, whatever the words.
  "trailers-only Internal naming REFUSED_STREAM": (s) =>
    s.respond({ ...grpcHeaders, "grpc-status": "13", "grpc-message": "dockerd:%20Stream%20closed%20with%20error%20code%20NGHTTP2_REFUSED_STREAM" }, { endStream: true }),
  "status after a message": (s) => withTrailers(s, frame(info), { "grpc-status": "9", "grpc-message": "too late" }),
  "RecoverableError detail": (s) =>
    s.respond(
      { ...grpcHeaders, "grpc-status": "9", "grpc-message": "image%20pull%20failed", "grpc-status-details-bin": recoverable },
      { endStream: true },
    ),
  "HTTP 503": (s) => s.respond({ ":status": 503 }, { endStream: true }),
  "HTML, not gRPC": (s) => {
    s.respond({ ":status": 200, "content-type": "text/html" });
    s.end("<html></html>");
  },
  "gzip encoding": (s) => withTrailers(s, frame(info, 1), { "grpc-status": "0" }, { "grpc-encoding": "gzip" }),
  "compressed flag without encoding": (s) => withTrailers(s, frame(info, 1), { "grpc-status": "0" }),
  "no status": (s) => {
    s.respond(grpcHeaders);
    s.end(frame(info));
  },
  "not protobuf": (s) => withTrailers(s, frame(Buffer.from([0xff, 0xff, 0xff])), { "grpc-status": "0" }),
  "incomplete envelope": (s) => withTrailers(s, frame(info).subarray(0, 3), { "grpc-status": "0" }),
  "reset INTERNAL_ERROR after the headers": (s) => {
    s.respond(grpcHeaders);
    setImmediate(() => s.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
  },
  "reset INTERNAL_ERROR mid-message": (s) => {
    s.respond(grpcHeaders);
    s.write(frame(info).subarray(0, 8), () => s.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
  },
  "reset REFUSED_STREAM": (s) => s.close(http2.constants.NGHTTP2_REFUSED_STREAM),
  "echo metadata": (s, h) =>
    withTrailers(s, frame(info), { "grpc-status": "0", "x-trailer-echo": String(h["x-echo"]) }, { "x-header-echo": String(h["x-echo"]) }),
  // Answers only when the client gives up (deadline, cancellation).
  silent: () => {},
  // The reply and its DATA chunk sizes come from the request (the property test below).
  custom: (s, h) => {
    const body = frame(Buffer.from(String(h["x-reply"]), "base64"));
    const sizes = String(h["x-chunks"]).split(",").map(Number);
    s.respond(grpcHeaders, { waitForTrailers: true });
    s.once("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
    let off = 0;
    let k = 0;
    const next = () => {
      if (off >= body.length) return s.end();
      const n = sizes[k++ % sizes.length]!;
      const part = body.subarray(off, off + n);
      off += part.length;
      s.write(part, () => setImmediate(next));
    };
    next();
  },
};

interface Outcome {
  ok?: unknown;
  error?: string;
  code?: Code;
  message?: string;
  cancellation?: boolean;
}

async function outcome(call: () => Promise<base.PluginInfoResponse>): Promise<Outcome> {
  try {
    return { ok: toJson(base.PluginInfoResponseSchema, await call()) };
  } catch (err) {
    const ce = ConnectError.from(err);
    return {
      error: (err as Error).constructor.name,
      code: ce.code,
      message: err instanceof ConnectError ? err.rawMessage : (err as Error).message,
      cancellation: isCancellation(err),
    };
  }
}

describe("unary calls: direct path (plugin connection) and connect give the same results", () => {
  const tmp = tempDir();
  const socketPath = `${tmp.dir}/raw.sock`;
  const seen: http2.IncomingHttpHeaders[] = [];
  let server: http2.Http2Server;
  const sessions = new Set<http2.ServerHttp2Session>();
  let plugin: PluginClient;
  let direct: BasePluginClient;
  let viaConnect: BasePluginClient;

  beforeAll(async () => {
    server = http2.createServer();
    server.on("session", (s) => {
      sessions.add(s);
      s.once("close", () => sessions.delete(s));
    });
    server.on("stream", (s, h) => {
      s.on("error", () => {});
      const scenario = h["x-scenario"];
      if (typeof scenario !== "string") {
        // reattachPlugin's health check and GRPCStdio: not implemented here.
        s.respond({ ...grpcHeaders, "grpc-status": "12" }, { endStream: true });
        return;
      }
      seen.push(h);
      s.resume();
      s.once("end", () => scenarios[scenario]!(s, h));
    });
    await new Promise<void>((r) => server.listen(socketPath, r));
    // A plugin connection to this server; the process "running the plugin" is the test itself.
    plugin = await reattachPlugin({ pid: process.pid, network: "unix", address: socketPath });
    direct = new BasePluginClient(plugin.transport);
    viaConnect = new BasePluginClient(createUnixSocketTransport(socketPath));
  });

  afterAll(async () => {
    plugin.close();
    const closed = new Promise<void>((r) => server.close(() => r()));
    for (const s of sessions) s.destroy(); // connect's transport keeps its connection open
    await closed;
    tmp.cleanup();
  });

  const both = async (scenario: string, options: { timeoutMs?: number; signal?: () => AbortSignal; headers?: Record<string, string> } = {}) => {
    const call = (c: BasePluginClient) => () =>
      c.pluginInfo({}, { timeoutMs: options.timeoutMs, signal: options.signal?.(), headers: { "x-scenario": scenario, ...options.headers } });
    const spy = vi.spyOn(plugin.transport, "unary");
    const d = await outcome(call(direct));
    expect(spy).not.toHaveBeenCalled(); // the direct path really ran
    spy.mockRestore();
    const c = await outcome(call(viaConnect));
    expect(d).toEqual(c);
    return d;
  };

  const expected: [string, Partial<Outcome>][] = [
    ["ok", { ok: { type: "DRIVER", name: "raw", pluginVersion: "1.0.0", pluginApiVersions: ["0.1.0"] } }],
    ["ok, one DATA frame per byte", { ok: { type: "DRIVER", name: "raw", pluginVersion: "1.0.0", pluginApiVersions: ["0.1.0"] } }],
    ["two messages", { code: Code.Unimplemented, message: "protocol error: received extra output message for unary method" }],
    ["no message, status OK", { code: Code.Unimplemented, message: "protocol error: missing output message for unary method" }],
    ["trailers-only OK", { code: Code.Unknown, message: "protocol error: missing output message for unary method" }],
    ["trailers-only NotFound", { code: Code.NotFound, message: "task t1 not found" }],
    ["trailers-only Internal naming REFUSED_STREAM", { code: Code.Internal, message: "dockerd: Stream closed with error code NGHTTP2_REFUSED_STREAM" }],
    ["status after a message", { code: Code.FailedPrecondition, message: "too late" }],
    ["RecoverableError detail", { error: "RecoverableError", code: Code.Unknown, message: "image pull failed" }],
    ["HTTP 503", { code: Code.Unavailable, message: "HTTP 503" }],
    ["HTML, not gRPC", { code: Code.Unknown, message: "unsupported content type text/html" }],
    ["gzip encoding", { code: Code.Internal, message: 'unsupported response encoding "gzip"' }],
    ["compressed flag without encoding", { code: Code.Internal }],
    ["no status", { code: Code.Internal, message: "protocol error: missing status" }],
    ["not protobuf", { code: Code.Internal }],
    ["incomplete envelope", { code: Code.InvalidArgument, message: "protocol error: incomplete envelope" }],
    ["reset INTERNAL_ERROR after the headers", { code: Code.Internal }],
    // Node ends the stream before it reports the reset: what was read is an incomplete message.
    ["reset INTERNAL_ERROR mid-message", { code: Code.InvalidArgument, message: "protocol error: incomplete envelope" }],
    ["reset REFUSED_STREAM", { code: Code.Unavailable }],
  ];
  it.each(expected)("%s", async (scenario, want) => {
    expect(await both(scenario)).toMatchObject(want);
  });

  it("a Canceled status the plugin sends is returned at once, not held for the plugin's exit", async () => {
    // A plugin that answers is alive: only a broken transport waits (up to the grace) for an exit.
    const never = new AbortController();
    const patient = new BasePluginClient(plugin.transport, { pluginExited: never.signal, shutdownGraceMs: 60_000 });
    const outcome = await Promise.race([
      patient.pluginInfo({}, { headers: { "x-scenario": "trailers-only Canceled" } }).catch((e: unknown) => e),
      new Promise((r) => setTimeout(() => r("still waiting"), 5_000)),
    ]);
    expect(outcome).toBeInstanceOf(ConnectError);
    expect((outcome as ConnectError).code).toBe(Code.Canceled);
    expect((outcome as ConnectError).rawMessage).toBe("exec cancelled");
  });

  it("the RecoverableError detail is read the same way", async () => {
    const err = await direct.pluginInfo({}, { headers: { "x-scenario": "RecoverableError detail" } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RecoverableError);
    expect((err as RecoverableError).recoverable).toBe(true);
  });

  it("deadline: grpc-timeout is sent and the call ends with DeadlineExceeded", async () => {
    seen.length = 0;
    // The method and the timeout are named: which call of many, and that the caller's timeout ended it.
    expect(await both("silent", { timeoutMs: 60 })).toMatchObject({
      code: Code.DeadlineExceeded,
      message: "BasePlugin.PluginInfo: no answer within 60 ms (the call's timeout)",
    });
    expect(seen.map((h) => h["grpc-timeout"])).toEqual(["60m", "60m"]);
  });

  it("a deadline days away: not armed as an immediate timeout, sent in grpc-timeout's 8 digits", async () => {
    seen.length = 0;
    const days30 = 30 * 86_400_000;
    const r = await outcome(() => direct.pluginInfo({}, { timeoutMs: days30, headers: { "x-scenario": "ok" } }));
    expect(r).toHaveProperty("ok");
    expect(seen.map((h) => h["grpc-timeout"])).toEqual(["2592000S"]);
  });

  it("no deadline for timeoutMs ≤ 0, as connect", async () => {
    seen.length = 0;
    expect(await both("ok", { timeoutMs: 0 })).toHaveProperty("ok");
    expect(seen.map((h) => h["grpc-timeout"])).toEqual([undefined, undefined]);
  });

  it("caller cancellation is a cancellation", async () => {
    const later = () => AbortSignal.timeout(50);
    expect(await both("silent", { signal: later })).toMatchObject({ cancellation: true, code: Code.Canceled });
    const early = () => AbortSignal.abort();
    expect(await both("ok", { signal: early })).toMatchObject({ cancellation: true, code: Code.Canceled });
  });

  it("request headers reach the server; response header and trailer reach the caller", async () => {
    for (const c of [direct, viaConnect]) {
      let header: Headers | undefined;
      let trailer: Headers | undefined;
      await c.pluginInfo(
        {},
        { headers: { "x-scenario": "echo metadata", "x-echo": "hello" }, onHeader: (h) => (header = h), onTrailer: (t) => (trailer = t) },
      );
      expect(header?.get("x-header-echo")).toBe("hello");
      expect(trailer?.get("x-trailer-echo")).toBe("hello");
      expect(trailer?.get("grpc-status")).toBe("0");
    }
  });

  it("any reply, split into any DATA frames, decodes as connect decodes it", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          name: fc.string(),
          pluginVersion: fc.string(),
          pluginApiVersions: fc.array(fc.string(), { maxLength: 4 }),
          type: fc.constantFrom(base.PluginType.UNKNOWN, base.PluginType.DRIVER, base.PluginType.DEVICE),
        }),
        fc.array(fc.integer({ min: 1, max: 40 }), { minLength: 1, maxLength: 6 }),
        async (reply, chunks) => {
          const bytes = toBinary(base.PluginInfoResponseSchema, create(base.PluginInfoResponseSchema, reply));
          const headers = { "x-reply": Buffer.from(bytes).toString("base64"), "x-chunks": chunks.join(",") };
          const got = await both("custom", { headers });
          expect(got.ok).toEqual(toJson(base.PluginInfoResponseSchema, create(base.PluginInfoResponseSchema, reply)));
        },
      ),
      { numRuns: 40 },
    );
  });

  it("a call in flight when the plugin process dies is a PluginShutdownError on both paths", async () => {
    for (const answer of ["nothing", "headers"]) {
      const sock = `${tmp.dir}/dying-${answer}.sock`;
      // Health is Unimplemented (reattachPlugin's ping); PluginInfo never completes.
      const code = `const h=require("node:http2").createServer();h.on("stream",(s,hd)=>{if(hd[":path"].includes("Health"))return s.respond({":status":200,"content-type":"application/grpc","grpc-status":"12"},{endStream:true});${answer === "headers" ? 's.respond({":status":200,"content-type":"application/grpc"});' : ""}});h.listen(${JSON.stringify(sock)},()=>console.log("ready"));`;
      const child = spawn(process.execPath, ["-e", code], { stdio: ["ignore", "pipe", "inherit"] });
      await once(child.stdout!, "data");
      const p = await reattachPlugin({ pid: child.pid!, network: "unix", address: sock }, { pollIntervalMs: 10 });
      const calls = [p.basePlugin, new BasePluginClient(createUnixSocketTransport(sock), { pluginExited: p.exitSignal })].map((c) =>
        c.pluginInfo({}).catch((e: unknown) => e),
      );
      await new Promise((r) => setTimeout(r, 50)); // both calls reach the plugin
      child.kill("SIGKILL");
      const [d, c] = await Promise.all(calls);
      expect(d, `answer ${answer}`).toBeInstanceOf(PluginShutdownError);
      expect(c, `answer ${answer}`).toBeInstanceOf(PluginShutdownError);
      // The cause is what the transport saw first: the peer's socket closing, or (a zombie is now
      // seen as gone at once) our own sessions closed after the exit.
      for (const e of [d, c]) expect((e as Error).cause, `answer ${answer}`).toBeInstanceOf(ConnectError);
      p.close();
    }
  });
});
