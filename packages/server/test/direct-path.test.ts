// The plugin server's direct gRPC path against connect's own handler as the reference: the same
// routes served both ways must give byte-identical responses (headers, body, trailers) for every
// kind of call, error, protocol violation and deadline; exec output sent as pre-framed wire bytes
// must equal what connect's encoder produces; and calls the direct path does not handle (JSON,
// compressed requests) still work through connect.
import * as http2 from "node:http2";
import * as net from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextKey, type ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { ExecTaskStreamingRequestSchema, InspectTaskRequestSchema, TaskStatsRequestSchema } from "@nomadkit/protocol/driver";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { execStreaming } from "../src/exec/index.js";
import { registerDriver } from "../src/gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { DirectPath } from "../src/runtime/direct.js";
import { RecoverableError, ServerRuntime, createPluginHandler, pluginAdapterDefaults } from "../src/runtime.js";
import { streamListener } from "../src/runtime/adapter.js";
import { exposedGc } from "./runtime-helpers.js";

const DRIVER = "/hashicorp.nomad.plugins.drivers.proto.Driver";

const counter = createContextKey(0);

/** The "hold" TaskStats call: one message, known only through a WeakRef, then a wait. */
const hold = {
  ref: undefined as WeakRef<object> | undefined,
  asked: () => {},
  released: Promise.resolve(),
};
function heldMessage() {
  const message = { stats: { id: "held", resourceUsageByPid: { "1": { cpu: { percent: 1 } } } } };
  hold.ref = new WeakRef(message);
  return message;
}

function routes(router: ConnectRouter) {
  const runtime = new ServerRuntime();
  registerDriver(
    router,
    {
      inspectTask(req, ctx) {
        if (req.taskId === "recoverable") throw new RecoverableError("task state lost", true);
        if (req.taskId === "boom") throw new Error("kaboom");
        if (req.taskId === "notfound") throw new ConnectError("no such task", Code.NotFound, { "x-extra": "1" });
        if (req.taskId === "headers") {
          ctx.responseHeader.set("x-answer", "42");
          ctx.responseTrailer.set("x-trailer", "yes");
        }
        if (req.taskId === "request") {
          // What the handler sees of the request, made on first use from what the call kept.
          const seen = [...ctx.requestHeader].filter(([k]) => k.startsWith("x-nk-") || k === "__proto__").map(([k, v]) => `${k}=${v}`);
          const call = [ctx.requestMethod, ctx.protocolName, ctx.service.typeName, ctx.method.name, String(ctx.timeoutMs() === undefined)];
          const attributes: Record<string, string> = { call: call.join(" ") };
          return { task: { id: ctx.url, name: seen.join(";") }, driver: { attributes } };
        }
        if (req.taskId === "values") {
          // One context-values object per call, made on first use: a set is seen by the next get.
          ctx.values.set(counter, ctx.values.get(counter) + 1);
          return { task: { id: `count ${ctx.values.get(counter)}` } };
        }
        // A reply that cannot be encoded (a string where an int64 goes): the host is told which field.
        if (req.taskId === "unencodable") return { task: { id: "x", result: { exitCode: "many" as never } } };
        if (req.taskId === "slow") return new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason)));
        return { task: { id: req.taskId, name: "web" }, driver: { attributes: { pid: "42" } } };
      },
      async *taskStats(req) {
        if (req.taskId === "hold") {
          yield heldMessage();
          // Runs once the first message is written and the next asked for.
          hold.asked();
          await hold.released;
          return;
        }
        if (req.taskId === "stuck") {
          // One sample, then a wait that never ends and never looks at the call's signal.
          yield { stats: { id: "stuck" } };
          await new Promise(() => {});
        }
        for (let i = 0; i < 3; i++) yield { stats: { id: `${req.taskId}-${i}`, timestamp: { seconds: 1n, nanos: i } } };
        if (req.taskId === "fail") throw new RecoverableError("stats source gone", false);
      },
      execTaskStreaming: (requests, ctx) =>
        execStreaming(
          requests,
          {
            async exec(s) {
              // Single writes, a large write split into views, and writes that pile up into one message.
              s.stdout.write(Buffer.from("hello"));
              s.stderr.write(Buffer.from("oops"));
              s.stdout.write(Buffer.alloc(300_000, 1));
              for (let i = 0; i < 20; i++) s.stdout.write(Buffer.alloc(5000, i));
              await new Promise((r) => s.stdout.write(Buffer.from("end"), r));
              return { exitCode: s.command.length };
            },
          },
          { signal: ctx.signal, maxChunkSize: 128 * 1024 },
        ),
    },
    runtime,
  );
}

interface Served {
  socket: string;
  close(): Promise<void>;
}

/**
 * `entry` "stream": the way servePlugin mounts the handler (streamListener: the direct path
 * sees each stream before Node's compatibility request/response objects exist); "request": the
 * plain `http2.createServer(handler)` a user may write.
 */
async function serve(
  handler: (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void,
  dir: string,
  name: string,
  entry: "request" | "stream" = "request",
): Promise<Served> {
  const socket = join(dir, name);
  const server = entry === "stream" ? http2.createServer() : http2.createServer(handler as never);
  if (entry === "stream") server.on("stream", streamListener(server, handler as never));
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  await new Promise<void>((r) => server.listen(socket, r));
  return {
    socket,
    async close() {
      for (const s of sessions) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

interface Reply {
  status: number | undefined;
  headers: Record<string, unknown>;
  body: string;
  trailers: Record<string, unknown>;
}

const frame = (bytes: Uint8Array, flags = 0) => {
  const b = Buffer.alloc(5 + bytes.byteLength);
  b[0] = flags;
  b.writeUInt32BE(bytes.byteLength, 1);
  b.set(bytes, 5);
  return b;
};

/** One call with a raw HTTP/2 client; the whole response as comparable data. */
function call(
  socket: string,
  path: string,
  body: Buffer[],
  { headers = {}, halfClose = true }: { headers?: http2.OutgoingHttpHeaders; halfClose?: boolean } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const session = http2.connect("http://localhost", { createConnection: () => net.connect(socket) });
    session.on("error", reject);
    const req = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers", ...headers });
    const reply: Reply = { status: undefined, headers: {}, body: "", trailers: {} };
    const chunks: Buffer[] = [];
    const clean = (h: Record<string, unknown>) => {
      const o: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(h)) if (k !== "date" && k !== ":status") o[k] = v;
      return o;
    };
    req.on("response", (h) => {
      reply.status = Number(h[":status"]);
      reply.headers = clean(h);
    });
    req.on("trailers", (t) => (reply.trailers = clean(t)));
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      reply.body = Buffer.concat(chunks).toString("hex");
      req.close();
      session.close();
      resolve(reply);
    });
    req.on("error", reject);
    for (const b of body) req.write(b);
    if (halfClose) req.end();
  });
}

/**
 * `r` with grpc-message decoded: the direct path percent-encodes it as the gRPC spec does (only
 * what must be), connect with encodeURIComponent; both decode to the same text.
 */
const decoded = (r: Reply): Reply => {
  const m = r.trailers["grpc-message"];
  return m === undefined ? r : { ...r, trailers: { ...r.trailers, "grpc-message": decodeURIComponent(String(m)) } };
};

const inspect = (taskId: string) => frame(toBinary(InspectTaskRequestSchema, create(InspectTaskRequestSchema, { taskId })));

describe.each(["request", "stream"] as const)("direct gRPC path (%s entry)", (entry) => {
  let dir: string;
  let direct: Served;
  let reference: Served;
  const handledStream = vi.spyOn(DirectPath.prototype, "handleStream");
  const handledRequest = vi.spyOn(DirectPath.prototype, "handle");
  const handled = {
    mockClear() {
      handledStream.mockClear();
      handledRequest.mockClear();
    },
    /** Whether the direct path served the one call made since mockClear. */
    servedDirectly(): boolean {
      const served = handledStream.mock.results.some((r) => r.value === true);
      // The stream entry serves before Node builds a request/response pair: none reached `handle`.
      if (entry === "stream" && served) expect(handledRequest).not.toHaveBeenCalled();
      if (entry === "request") expect(handledRequest).toHaveBeenCalledTimes(1);
      return served;
    },
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "nk-direct-"));
    direct = await serve(createPluginHandler(routes) as never, dir, "direct.sock", entry);
    reference = await serve(connectNodeAdapter({ ...pluginAdapterDefaults, routes }) as never, dir, "connect.sock");
  });
  afterAll(async () => {
    await direct.close();
    await reference.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /**
   * The same call on both servers; the direct server must have served it itself. grpc-message is
   * compared {@link decoded}.
   */
  async function same(path: string, body: Buffer[], opts?: Parameters<typeof call>[3], servedDirectly = true): Promise<Reply> {
    handled.mockClear();
    const a = await call(direct.socket, path, body, opts);
    expect(handled.servedDirectly()).toBe(servedDirectly);
    const b = await call(reference.socket, path, body, opts);
    expect(decoded(a)).toEqual(decoded(b));
    return a;
  }

  it("unary: reply, headers and trailers set by the handler", async () => {
    const r = await same(`${DRIVER}/InspectTask`, [inspect("t1")]);
    expect(r.trailers["grpc-status"]).toBe("0");
    expect(r.headers["content-type"]).toBe("application/grpc+proto");
    const v = await same(`${DRIVER}/InspectTask`, [inspect("values")]);
    expect(Buffer.from(v.body, "hex").toString("latin1")).toContain("count 1");
    const q = await same(`${DRIVER}/InspectTask`, [inspect("request")], { headers: { "x-nk-one": "1", "x-nk-two": ["a", "b"] } });
    const seen = Buffer.from(q.body, "hex").toString("latin1");
    expect(seen).toContain(`http://localhost${DRIVER}/InspectTask`);
    expect(seen).toContain("x-nk-one=1;x-nk-two=a, b");
    expect(seen).toContain("POST grpc hashicorp.nomad.plugins.drivers.proto.Driver InspectTask true");
    // A header named like the prototype accessor is a header like any other (an own property).
    const proto = await same(`${DRIVER}/InspectTask`, [inspect("request")], { headers: JSON.parse('{"x-nk-one":"1","__proto__":"p"}') });
    expect(Buffer.from(proto.body, "hex").toString("latin1")).toContain("__proto__=p;x-nk-one=1");
    const timed = await same(`${DRIVER}/InspectTask`, [inspect("request")], { headers: { "grpc-timeout": "10S" } });
    expect(Buffer.from(timed.body, "hex").toString("latin1")).toContain("InspectTask false");
    const h = await same(`${DRIVER}/InspectTask`, [inspect("headers")]);
    expect(h.headers["x-answer"]).toBe("42");
    expect(h.trailers["x-trailer"]).toBe("yes");
  });

  it("unary errors: RecoverableError detail, unexpected error, ConnectError with metadata, Unimplemented", async () => {
    const rec = await same(`${DRIVER}/InspectTask`, [inspect("recoverable")]);
    expect(rec.trailers["grpc-status"]).toBe(String(Code.FailedPrecondition));
    expect(rec.trailers["grpc-status-details-bin"]).toBeTruthy();
    expect((await same(`${DRIVER}/InspectTask`, [inspect("boom")])).trailers["grpc-status"]).toBe(String(Code.Unknown));
    const nf = await same(`${DRIVER}/InspectTask`, [inspect("notfound")]);
    expect(nf.trailers["x-extra"]).toBe("1");
    expect((await same(`${DRIVER}/StopTask`, [frame(new Uint8Array())])).trailers["grpc-status"]).toBe(String(Code.Unimplemented));
  });

  it("protocol errors: no request, two requests, compressed envelope, oversized message", async () => {
    const message = (r: Reply) => decodeURIComponent(String(r.trailers["grpc-message"]));
    expect(message(await same(`${DRIVER}/InspectTask`, []))).toMatch(/missing input message/);
    expect(message(await same(`${DRIVER}/InspectTask`, [inspect("a"), inspect("b")]))).toMatch(/extra input message/);
    expect((await same(`${DRIVER}/InspectTask`, [frame(new Uint8Array([10, 1, 97]), 1)])).trailers["grpc-status"]).toBe(String(Code.Internal));
    expect(message(await same(`${DRIVER}/InspectTask`, [frame(new Uint8Array([10, 1]))]))).toMatch(/parse binary/);
    const bad = await same(`${DRIVER}/InspectTask`, [inspect("unencodable")]);
    expect(bad.trailers["grpc-status"]).toBe(String(Code.Internal));
    expect(message(bad)).toMatch(/^serialize binary: .*exit_code/);
  });

  it("readMaxBytes", async () => {
    const dir2 = mkdtempSync(join(tmpdir(), "nk-direct-"));
    const a = await serve(createPluginHandler(routes, { readMaxBytes: 8 }) as never, dir2, "a.sock", entry);
    const b = await serve(connectNodeAdapter({ ...pluginAdapterDefaults, readMaxBytes: 8, routes }) as never, dir2, "b.sock");
    handled.mockClear();
    const big = inspect("a-task-id-longer-than-eight-bytes");
    const ra = await call(a.socket, `${DRIVER}/InspectTask`, [big]);
    expect(handled.servedDirectly()).toBe(true);
    expect(decoded(ra)).toEqual(decoded(await call(b.socket, `${DRIVER}/InspectTask`, [big])));
    expect(ra.trailers["grpc-status"]).toBe(String(Code.ResourceExhausted));
    expect(await call(a.socket, `${DRIVER}/InspectTask`, [inspect("ok")])).toEqual(await call(b.socket, `${DRIVER}/InspectTask`, [inspect("ok")]));
    await a.close();
    await b.close();
    rmSync(dir2, { recursive: true, force: true });
  });

  it("deadline from grpc-timeout", async () => {
    const r = await same(`${DRIVER}/InspectTask`, [inspect("slow")], { headers: { "grpc-timeout": "50m" } });
    expect(r.trailers["grpc-status"]).toBe(String(Code.DeadlineExceeded));
  });

  it("does not keep a stream's last message alive while the handler works on the next", async () => {
    const gc = exposedGc();
    let release!: () => void;
    const asked = new Promise<void>((r) => (hold.asked = r));
    hold.released = new Promise<void>((r) => (release = r));
    const req = frame(toBinary(TaskStatsRequestSchema, create(TaskStatsRequestSchema, { taskId: "hold" })));
    const done = call(direct.socket, `${DRIVER}/TaskStats`, [req]);
    await asked;
    // WeakRefs are cleared between jobs: collect, let the job end, collect again.
    gc();
    await new Promise((r) => setImmediate(r));
    gc();
    expect(hold.ref?.deref()).toBeUndefined();
    release();
    expect((await done).trailers["grpc-status"]).toBe("0");
  });

  it("a streaming handler that ignores its signal does not hold its call past the deadline", async () => {
    // Only the direct path: connect's own pipeline would wait for the handler forever.
    const req = frame(toBinary(TaskStatsRequestSchema, create(TaskStatsRequestSchema, { taskId: "stuck" })));
    const r = await call(direct.socket, `${DRIVER}/TaskStats`, [req], { headers: { "grpc-timeout": "300m" } });
    expect(r.trailers["grpc-status"]).toBe(String(Code.DeadlineExceeded));
    expect(Buffer.from(r.body, "hex").toString("latin1")).toContain("stuck");
  });

  it("server streaming, ending OK and with an error", async () => {
    const req = (taskId: string) => frame(toBinary(TaskStatsRequestSchema, create(TaskStatsRequestSchema, { taskId })));
    expect((await same(`${DRIVER}/TaskStats`, [req("t")])).trailers["grpc-status"]).toBe("0");
    expect((await same(`${DRIVER}/TaskStats`, [req("fail")])).trailers["grpc-status"]).toBe(String(Code.FailedPrecondition));
  });

  it("exec output as pre-framed wire bytes equals connect's encoding, request side left open", async () => {
    const setup = frame(toBinary(ExecTaskStreamingRequestSchema, create(ExecTaskStreamingRequestSchema, { setup: { taskId: "t", command: ["a", "b"] } })));
    const r = await same(`${DRIVER}/ExecTaskStreaming`, [setup], { halfClose: false });
    expect(r.trailers["grpc-status"]).toBe("0");
    expect(r.body.length / 2).toBeGreaterThan(400_000);
  });

  it("leaves JSON and compressed requests to connect", async () => {
    const json = await same(`${DRIVER}/InspectTask`, [frame(Buffer.from('{"taskId":"j"}'))], { headers: { "content-type": "application/grpc+json" } }, false);
    expect(json.trailers["grpc-status"]).toBe("0");
    const gz = await same(`${DRIVER}/InspectTask`, [inspect("g")], { headers: { "grpc-encoding": "gzip" } }, false);
    expect(gz.trailers["grpc-status"]).toBe(String(Code.Unimplemented));
  });

  it("a client going away ends the handler's stream (its signal aborts)", async () => {
    let aborted: unknown;
    const dir2 = mkdtempSync(join(tmpdir(), "nk-direct-"));
    const s = await serve(
      createPluginHandler((router) =>
        registerDriver(router, {
          async *taskStats(_req, ctx) {
            try {
              for (;;) {
                yield { stats: { id: "x" } };
                await sleep(5);
              }
            } finally {
              aborted = ctx.signal.aborted;
            }
          },
        }),
      ) as never,
      dir2,
      "s.sock",
    );
    const session = http2.connect("http://localhost", { createConnection: () => net.connect(s.socket) });
    const req = session.request({ ":method": "POST", ":path": `${DRIVER}/TaskStats`, "content-type": "application/grpc", te: "trailers" });
    req.end(frame(toBinary(TaskStatsRequestSchema, create(TaskStatsRequestSchema, { taskId: "x" }))));
    await new Promise((r) => req.once("data", r));
    req.close(http2.constants.NGHTTP2_CANCEL);
    await vi.waitFor(() => expect(aborted).toBe(true));
    session.close();
    await s.close();
    rmSync(dir2, { recursive: true, force: true });
  });
});
