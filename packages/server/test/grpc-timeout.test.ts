// grpc-timeout as grpc-go's server reads it: 1-8 digits and a unit (H M S m u n); anything else is
// answered Internal ("malformed grpc-timeout: ..."), before routing, on the direct path and on
// connect's (JSON requests, or every request when adapter options turn the direct path off).
import * as http2 from "node:http2";
import * as net from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { Code, type ConnectRouter } from "@connectrpc/connect";
import { compressionGzip } from "@connectrpc/connect-node";
import {
  Driver as DriverService,
  InspectTaskRequestSchema,
} from "@nomadkit/protocol/driver";
import {
  afterAll,
  afterEach,
  beforeAll,
  describe,
  expect,
  it,
  vi,
} from "vitest";
import { createPluginHandler } from "../src/runtime.js";
import { streamListener } from "../src/runtime/adapter.js";
import { parseGrpcTimeout } from "../src/runtime/grpc-timeout.js";
import { loadGrpcJs, lookup, startServer, type TestServer } from "./runtime-helpers.js";

type Any = any; // grpc-js is the untyped independent peer

const DRIVER = "/hashicorp.nomad.plugins.drivers.proto.Driver";

describe("parseGrpcTimeout", () => {
  it("takes every unit, 1 to 8 digits, leading zeros", () => {
    expect(["2H", "2M", "2S", "2m", "2u", "2n"].map(parseGrpcTimeout)).toEqual([
      7_200_000, 120_000, 2000, 2, 0.002, 0.000002,
    ]);
    expect(parseGrpcTimeout("00000001S")).toBe(1000);
    expect(parseGrpcTimeout("0S")).toBe(0);
    // The largest value: ~11,000 years, an exact number of ms (grpc-go clamps to ~292 years).
    expect(parseGrpcTimeout("99999999H")).toBe(99_999_999 * 3_600_000);
  });

  it.each([
    ["", "too short"],
    ["S", "too short"],
    ["123456789S", "too long"],
    ["1s", "unit is not recognized"],
    ["1", "too short"],
    ["10", "unit is not recognized"],
    ["+1S", "invalid syntax"],
    ["-1S", "invalid syntax"],
    [" 1S", "invalid syntax"],
    ["1.5S", "invalid syntax"],
    ["１S", "invalid syntax"],
  ])("%j is malformed (%s), Internal", (value, why) => {
    const err = parseGrpcTimeout(value);
    expect(typeof err).toBe("object");
    expect([(err as { code: Code }).code, (err as Error).message]).toEqual([
      Code.Internal,
      expect.stringContaining(why),
    ]);
  });
});

function routes(router: ConnectRouter) {
  router.rpc(DriverService.method.inspectTask, async (req, ctx) => {
    const started = onStarted;
    if (started !== undefined) {
      // The deadline's timer runs from the signal's first use.
      const { signal } = ctx;
      onStarted = undefined;
      started(signal);
      await gate;
    }
    return { task: { id: req.taskId } };
  });
}
let onStarted: ((signal: AbortSignal) => void) | undefined;
let gate: Promise<void> = Promise.resolve();

interface Reply {
  headers: http2.IncomingHttpHeaders;
  trailers: http2.IncomingHttpHeaders;
}

function call(
  socket: string,
  path: string,
  headers: http2.OutgoingHttpHeaders,
  body: Buffer,
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const session = http2.connect("http://localhost", {
      createConnection: () => net.connect(socket),
    });
    session.on("error", reject);
    const req = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...headers,
    });
    const reply: Reply = { headers: {}, trailers: {} };
    req.on("response", (h) => (reply.headers = h));
    req.on("trailers", (t) => (reply.trailers = t));
    req.resume();
    req.on("end", () => {
      session.close();
      resolve(reply);
    });
    req.on("error", reject);
    req.end(body);
  });
}

const frame = (bytes: Uint8Array) => {
  const b = Buffer.alloc(5 + bytes.byteLength);
  b.writeUInt32BE(bytes.byteLength, 1);
  b.set(bytes, 5);
  return b;
};
const binary = frame(
  toBinary(
    InspectTaskRequestSchema,
    create(InspectTaskRequestSchema, { taskId: "t" }),
  ),
);
const json = frame(Buffer.from('{"taskId":"t"}'));
const status = (r: Reply) => {
  const s = r.trailers["grpc-status"] ?? r.headers["grpc-status"];
  const m = r.trailers["grpc-message"] ?? r.headers["grpc-message"];
  return [s, m === undefined ? undefined : decodeURIComponent(String(m))];
};

describe.each([
  ["direct path, request entry", "request", {}],
  ["direct path, stream entry", "stream", {}],
  // An adapter option the direct path does not implement: connect serves every call.
  ["connect only", "request", { interceptors: [] }],
] as const)("grpc-timeout (%s)", (_name, entry, options) => {
  let dir: string;
  let socket: string;
  let server: http2.Http2Server;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "nk-timeout-"));
    socket = join(dir, "plugin.sock");
    const handler = createPluginHandler(routes, options);
    server =
      entry === "stream"
        ? http2.createServer()
        : http2.createServer(handler as never);
    if (entry === "stream")
      server.on("stream", streamListener(server, handler as never));
    await new Promise<void>((r) => server.listen(socket, r));
  });
  afterAll(async () => {
    await new Promise<void>((r) => server.close(() => r()));
    rmSync(dir, { recursive: true, force: true });
  });
  afterEach(() => vi.useRealTimers());

  it.each(["1x", "123456789S", "-1S", "S", "1.5S"])(
    "%j is answered Internal, binary, JSON or an unknown method",
    async (value) => {
      for (const [path, type, body] of [
        [`${DRIVER}/InspectTask`, "application/grpc", binary],
        [`${DRIVER}/InspectTask`, "application/grpc+json", json],
        [`${DRIVER}/NoSuchMethod`, "application/grpc", binary],
      ] as const) {
        const r = await call(
          socket,
          path,
          { "content-type": type, "grpc-timeout": value },
          body,
        );
        expect(status(r)).toEqual([
          String(Code.Internal),
          expect.stringMatching(/^malformed grpc-timeout: /),
        ]);
      }
    },
  );

  it.each(["99999999H", "1H", "5M", "30S", "9000m", "9000000u", "99999999u"])(
    "%j is a deadline",
    async (value) => {
      for (const [type, body] of [
        ["application/grpc", binary],
        ["application/grpc+json", json],
      ] as const) {
        const r = await call(
          socket,
          `${DRIVER}/InspectTask`,
          { "content-type": type, "grpc-timeout": value },
          body,
        );
        expect(status(r)).toEqual(["0", undefined]);
      }
    },
  );

  it("a JSON request's deadline beyond a Node timer's ~24.8 days (served by connect) is not cut short", async () => {
    let open!: () => void;
    gate = new Promise((r) => (open = r));
    const started = new Promise<AbortSignal>((r) => (onStarted = r));
    const reply = call(socket, `${DRIVER}/InspectTask`, { "content-type": "application/grpc+json", "grpc-timeout": "720H" }, json);
    const signal = await started;
    // Before: connect's setTimeout of 30 days fired after 1 ms, aborting the call at once.
    await new Promise((r) => setTimeout(r, 50));
    expect(signal.aborted).toBe(false);
    open();
    expect(status(await reply)).toEqual(["0", undefined]);
  });

  it.runIf(entry === "stream")(
    "a deadline beyond a Node timer's ~24.8 days is not cut short",
    async () => {
      vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
      let open!: () => void;
      gate = new Promise((r) => (open = r));
      const started = new Promise<AbortSignal>((r) => (onStarted = r));
      const reply = call(
        socket,
        `${DRIVER}/InspectTask`,
        { "grpc-timeout": "720H" },
        binary,
      );
      const signal = await started;
      const day = 86_400_000;
      vi.advanceTimersByTime(29 * day);
      expect(signal.aborted).toBe(false);
      vi.advanceTimersByTime(2 * day);
      expect(signal.aborted).toBe(true);
      vi.useRealTimers();
      expect(status(await reply)[0]).toBe(String(Code.DeadlineExceeded));
      open();
    },
  );
});

describe("a deadline beyond a Node timer's ~24.8 days on connect's path (a gzip request from grpc-js)", () => {
  let server: TestServer;
  let driver: Any;
  let signals: AbortSignal[] = [];
  beforeAll(async () => {
    // Compression on: connect serves every call (the direct path only takes uncompressed ones).
    server = await startServer(
      (router) =>
        router.rpc(DriverService.method.inspectTask, async (req, ctx) => {
          signals.push(ctx.signal);
          // A macrotask later: a timer connect armed with the deadline has fired by then if it was to.
          await new Promise((r) => setTimeout(r, 50));
          return { task: { id: ctx.signal.aborted ? `aborted: ${String(ctx.signal.reason)}` : req.taskId } };
        }),
      { acceptCompression: [compressionGzip] },
    );
    const Driver = lookup<new (address: string, creds: grpc.ChannelCredentials, options: object) => Any>(loadGrpcJs(), "hashicorp.nomad.plugins.drivers.proto.Driver");
    driver = new Driver(`unix:${server.socketPath}`, grpc.credentials.createInsecure(), {
      "grpc.default_compression_algorithm": 2, // gzip
    });
  });
  afterAll(async () => {
    driver?.close();
    await server?.close();
  });
  afterEach(() => vi.useRealTimers());

  it("is not cut short: the call is served (before, connect's 30-day timer fired after 1 ms)", async () => {
    const reply = await new Promise<{ err: grpc.ServiceError | null; res: Any }>((resolve) =>
      driver.InspectTask({ taskId: "t" }, new grpc.Metadata(), { deadline: Date.now() + 30 * 86_400_000 }, (err: grpc.ServiceError | null, res: Any) =>
        resolve({ err, res }),
      ),
    );
    expect(reply.err).toBe(null);
    expect(reply.res.task.id).toBe("t");
  });

  it("still ends the call when it passes: the stream is closed as grpc-go's server closes it (RST_STREAM CANCEL)", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    signals = [];
    gate = new Promise(() => {});
    const day = 86_400_000;
    const reply = call(server.socketPath, `${DRIVER}/InspectTask`, { "content-type": "application/grpc+json", "grpc-timeout": "720H" }, json).catch((e: unknown) => e);
    // The handler waits in a (fake) 50 ms timer.
    await vi.waitFor(() => expect(signals.length).toBe(1), { interval: 5, timeout: 20_000 });
    const signal = signals[0]!;
    vi.advanceTimersByTime(29 * day);
    expect(signal.aborted).toBe(false);
    vi.advanceTimersByTime(2 * day);
    vi.useRealTimers();
    await new Promise((r) => (signal.aborted ? r(undefined) : signal.addEventListener("abort", r)));
    expect(signal.reason).toMatchObject({ code: Code.Canceled });
    await reply;
  });
});
