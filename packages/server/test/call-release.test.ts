// A unary call whose handler ignores its cancelled signal, served on the direct path to a foreign
// gRPC client (@grpc/grpc-js) or a raw HTTP/2 client: as grpc-go does, the call is released when
// the client cancels or the deadline passes, whatever the handler does, and the handler's answer
// when it comes at last is dropped without an unhandled rejection.
import * as http2 from "node:http2";
import * as net from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { InspectTaskRequestSchema } from "@nomadkit/protocol/driver";
import { Driver as DriverService } from "@nomadkit/protocol/driver";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerDriver } from "../src/gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { ServerRuntime, createPluginHandler } from "../src/runtime.js";
import { streamListener } from "../src/runtime/adapter.js";
import { exposedGc, loadGrpcJs, lookup } from "./runtime-helpers.js";

type Any = any; // grpc-js is the untyped independent peer
type Ctor = new (address: string, creds: grpc.ChannelCredentials) => Any;

const DRIVER = "/hashicorp.nomad.plugins.drivers.proto.Driver";

/** Handlers waiting for ever (until the test settles them), ignoring their signal. */
const waiting: {
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}[] = [];
const started: (() => void)[] = [];
const ignoringSignal = () =>
  new Promise<never>((resolve, reject) => {
    waiting.push({ resolve: resolve as (v: unknown) => void, reject });
    started.shift()?.();
  });
const handlerStarted = () => new Promise<void>((r) => started.push(r));
/**
 * Settles the handlers a deadline test left waiting. The deadline runs from the request's arrival,
 * so on a stalled machine it may pass before the handler even began: then there is none, and no
 * resolver of this test may be left for the next test's handler to fire.
 */
const settleLate = (settle: (w: (typeof waiting)[number]) => void) => {
  started.splice(0);
  for (const w of waiting.splice(0)) settle(w);
};

/**
 * One unary call from a raw HTTP/2 client without a timer of its own (only the server's deadline
 * can end the call); resolves with the headers that carry its grpc-status.
 */
async function rawCall(socket: string, rpc: string, timeout: string): Promise<http2.IncomingHttpHeaders> {
  const session = http2.connect("http://localhost", {
    createConnection: () => net.connect(socket),
  });
  const req = session.request({
    ":method": "POST",
    ":path": `${DRIVER}/${rpc}`,
    "content-type": "application/grpc",
    te: "trailers",
    "grpc-timeout": timeout,
  });
  const body = toBinary(
    InspectTaskRequestSchema,
    create(InspectTaskRequestSchema, { taskId: "t" }),
  );
  const framed = Buffer.alloc(5 + body.length);
  framed.writeUInt32BE(body.length, 1);
  framed.set(body, 5);
  req.end(framed);
  req.resume();
  try {
    return await new Promise<http2.IncomingHttpHeaders>((resolve) => {
      req.once(
        "response",
        (h) => h["grpc-status"] !== undefined && resolve(h),
      );
      req.once("trailers", resolve);
    });
  } finally {
    session.close();
  }
}

// Plugin shutdown aborts a handler's signal; a handler that ignores it too must still be answered
// at the call's deadline (shutdown must not switch the deadline off).
it("after plugin shutdown aborted its signal, an ignoring handler's call is still answered at its deadline", async () => {
  const dir = mkdtempSync(join(tmpdir(), "nk-release-"));
  const socket = join(dir, "plugin.sock");
  const shutdown = new AbortController();
  const server = http2.createServer(
    createPluginHandler(
      (router) => {
        router.rpc(DriverService.method.inspectTask, (_req, ctx) => {
          void ctx.signal; // linked: shutdown now aborts it
          return ignoringSignal();
        });
      },
      { shutdownSignal: shutdown.signal },
    ) as never,
  );
  await new Promise<void>((r) => server.listen(socket, r));
  try {
    const began = handlerStarted();
    const answered = rawCall(socket, "InspectTask", "2S");
    await began;
    shutdown.abort(new Error("plugin shutting down"));
    expect((await answered)["grpc-status"]).toBe("4");
  } finally {
    settleLate((w) => w.resolve({}));
    server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}, 20_000);

describe.each(["request", "stream"] as const)(
  "call release on the direct path (%s entry)",
  (entry) => {
    let dir: string;
    let socket: string;
    let server: http2.Http2Server;
    let driver: Any;
    /** The server side of every call, known only weakly. */
    const streams: {
      ref: WeakRef<http2.ServerHttp2Stream>;
      closed: Promise<void>;
    }[] = [];

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), "nk-release-"));
      socket = join(dir, "plugin.sock");
      const handler = createPluginHandler((router) => {
        // Through the server runtime and without it.
        registerDriver(
          router,
          { inspectTask: ignoringSignal },
          new ServerRuntime(),
        );
        router.rpc(DriverService.method.stopTask, ignoringSignal);
      });
      server =
        entry === "stream"
          ? http2.createServer()
          : http2.createServer(handler as never);
      server.on("stream", (s: http2.ServerHttp2Stream) =>
        streams.push({
          ref: new WeakRef(s),
          closed: new Promise((r) => s.once("close", () => r())),
        }),
      );
      if (entry === "stream")
        server.on("stream", streamListener(server, handler as never));
      await new Promise<void>((r) => server.listen(socket, r));
      const Driver = lookup<Ctor>(
        loadGrpcJs(),
        "hashicorp.nomad.plugins.drivers.proto.Driver",
      );
      driver = new Driver(`unix:${socket}`, grpc.credentials.createInsecure());
    });

    afterAll(async () => {
      driver?.close();
      await new Promise<void>((r) => server.close(() => r()));
      rmSync(dir, { recursive: true, force: true });
    });

    /** Whether the server side of the last call is gone once it closed and V8 collected. */
    async function lastStreamCollected(): Promise<boolean> {
      const { ref, closed } = streams.at(-1)!;
      await closed;
      const gc = exposedGc();
      // deref() keeps its target until the current job ends: collect in a fresh job, then look.
      // Node lets go of a closed stream over a few turns of the event loop.
      for (let i = 0; i < 50; i++) {
        await new Promise((r) => setTimeout(r, 20));
        gc();
        if (ref.deref() === undefined) return true;
      }
      return ref.deref() === undefined;
    }

    it("control: the server side of a call answered is collected", async () => {
      const began = handlerStarted();
      const done = new Promise<grpc.ServiceError | null>((resolve) => {
        driver.InspectTask(
          { taskId: "t" },
          new grpc.Metadata(),
          (err: grpc.ServiceError | null) => resolve(err),
        );
      });
      await began;
      waiting.pop()!.resolve({});
      expect((await done)?.code).toBe(undefined);
      expect(await lastStreamCollected()).toBe(true);
    });

    it.each(["InspectTask", "StopTask"])(
      "%s: a client cancelling releases the call",
      async (rpc) => {
        const began = handlerStarted();
        const done = new Promise<grpc.ServiceError | null>((resolve) => {
          const call = driver[rpc](
            { taskId: "t" },
            new grpc.Metadata(),
            (err: grpc.ServiceError | null) => resolve(err),
          );
          void began.then(() => call.cancel());
        });
        expect((await done)?.code).toBe(grpc.status.CANCELLED);
        expect(await lastStreamCollected()).toBe(true);
        // The handler answers at last: dropped (a rejection too, with nothing unhandled).
        waiting.pop()!.resolve({});
      },
    );

    it("a client's deadline releases the call; a later rejection is not unhandled", async () => {
      const done = new Promise<grpc.ServiceError | null>((resolve) =>
        driver.InspectTask(
          { taskId: "t" },
          new grpc.Metadata(),
          { deadline: Date.now() + 300 },
          resolve,
        ),
      );
      expect((await done)?.code).toBe(grpc.status.DEADLINE_EXCEEDED);
      expect(await lastStreamCollected()).toBe(true);
      settleLate((w) => w.reject(new Error("too late")));
    });

    it.each(["InspectTask", "StopTask"])(
      "%s: the deadline passing answers DeadlineExceeded, though the client keeps the stream open",
      async (rpc) => {
        const trailers = await rawCall(socket, rpc, "200m");
        expect(trailers["grpc-status"]).toBe("4");
        expect(await lastStreamCollected()).toBe(true);
        settleLate((w) => w.resolve({}));
      },
    );
  },
);
