// Status messages as a foreign gRPC client (@grpc/grpc-js) receives them from the plugin server's
// direct path: any text a handler puts in an error reaches the caller with its code, including
// text grpc-message cannot carry as it is (a lone UTF-16 surrogate, a message of many KiB), from
// handlers registered through the server runtime and from handlers registered without it.
import * as http2 from "node:http2";
import * as net from "node:net";
import * as grpc from "@grpc/grpc-js";
import type { ConnectRouter } from "@connectrpc/connect";
import { compressionGzip } from "@connectrpc/connect-node";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Driver as DriverService } from "@nomadkit/protocol/driver";
import { registerDriver } from "../src/gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { RecoverableError, ServerRuntime } from "../src/runtime.js";
import {
  loadGrpcJs,
  lookup,
  startServer,
  type TestServer,
} from "./runtime-helpers.js";

type Any = any; // grpc-js is the untyped independent peer
type Ctor = new (address: string, creds: grpc.ChannelCredentials) => Any;

/** What each task id makes InspectTask / StopTask throw. */
const failures: Record<string, () => unknown> = {
  text: () => new Error("100% done\nnext line: é 日本 🙂 open /var/lib/x, y=1 a+b #c? @d;$&"),
  // A name cut in the middle of an emoji: the high half of the pair is left alone.
  lone: () => new Error(`no such file: ${"🙂".slice(0, 1)}.txt`),
  long: () =>
    new ConnectError(`${"日".repeat(30_000)} ascii`, Code.InvalidArgument),
  longRecoverable: () => new RecoverableError("日".repeat(30_000), true),
  // Thrown values String() cannot convert.
  nullProto: () => Object.create(null),
  badToString: () => ({
    toString: () => {
      throw new Error("no");
    },
    id: 7,
  }),
  ascii: () => new ConnectError("a".repeat(8192), Code.InvalidArgument),
  loneStatus: () =>
    new ConnectError(`bad name ${"🙂".slice(1)}`, Code.InvalidArgument),
};

describe("status messages (grpc-js client -> direct path)", () => {
  let server: TestServer;
  let driver: Any;

  beforeAll(async () => {
    server = await startServer((router) => {
      registerDriver(
        router,
        {
          inspectTask(req) {
            throw failures[req.taskId]!();
          },
          async *taskStats(req) {
            yield { stats: { id: req.taskId } };
            throw failures[req.taskId]!();
          },
        },
        new ServerRuntime(),
      );
      // StopTask without the server runtime: the direct path encodes the handler's status itself.
      router.rpc(DriverService.method.stopTask, (req) => {
        throw failures[req.taskId]!();
      });
    });
    const Driver = lookup<Ctor>(
      loadGrpcJs(),
      "hashicorp.nomad.plugins.drivers.proto.Driver",
    );
    driver = new Driver(
      `unix:${server.socketPath}`,
      grpc.credentials.createInsecure(),
    );
  });

  afterAll(async () => {
    driver?.close();
    await server?.close();
  });

  // A deadline, so a call the plugin never answers fails the test instead of hanging it.
  const unary = (name: string, taskId: string) =>
    new Promise<grpc.ServiceError | null>((resolve) =>
      driver[name](
        { taskId },
        new grpc.Metadata(),
        { deadline: Date.now() + 20_000 },
        (err: grpc.ServiceError | null) => resolve(err),
      ),
    );

  it("carries %, newlines, separators (: / , = ...) and non-ASCII text as it is", async () => {
    const err = await unary("InspectTask", "text");
    expect(err?.code).toBe(grpc.status.UNKNOWN);
    expect(err?.details).toBe("100% done\nnext line: é 日本 🙂 open /var/lib/x, y=1 a+b #c? @d;$&");
  });

  it.each(["InspectTask", "StopTask"])(
    "%s: a lone surrogate becomes U+FFFD, the code is kept",
    async (rpc) => {
      const lone = await unary(rpc, "lone");
      expect(lone?.code).toBe(
        rpc === "InspectTask" ? grpc.status.UNKNOWN : grpc.status.INTERNAL,
      );
      if (rpc === "InspectTask")
        expect(lone?.details).toBe("no such file: \uFFFD.txt");
      const status = await unary(rpc, "loneStatus");
      expect(status?.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(status?.details).toBe("bad name \uFFFD");
    },
  );

  it.each(["InspectTask", "StopTask"])(
    "%s: a very long message is cut, the code is kept",
    async (rpc) => {
      // 9 bytes a character once percent-encoded: 8192 of them were more than Node sends in trailers.
      const err = await unary(rpc, "long");
      expect(err?.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(err?.details).toMatch(/^日{2000,}… \(\d+ more characters\)$/);
      const ascii = await unary(rpc, "ascii");
      expect(ascii?.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(ascii?.details).toBe("a".repeat(8192));
    },
  );

  it("a very long RecoverableError keeps its code and detail (the detail repeats the message)", async () => {
    const err = await unary("InspectTask", "longRecoverable");
    expect(err?.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(err?.metadata.get("grpc-status-details-bin")).toHaveLength(1);
  });

  it("a thrown value String() cannot convert is Unknown, described, from unary and streaming handlers", async () => {
    const stream = (taskId: string) =>
      new Promise<grpc.ServiceError>((resolve) => {
        const call = driver.TaskStats({ taskId }, new grpc.Metadata(), {
          deadline: Date.now() + 20_000,
        });
        call.on("data", () => {});
        call.on("error", resolve);
      });
    for (const [taskId, text] of [
      ["nullProto", "[Object: null prototype] {}"],
      ["badToString", "{ toString: [Function: toString], id: 7 }"],
    ]) {
      const unaryErr = await unary("InspectTask", taskId!);
      expect([unaryErr?.code, unaryErr?.details]).toEqual([
        grpc.status.UNKNOWN,
        text,
      ]);
      const streamErr = await stream(taskId!);
      expect([streamErr.code, streamErr.details]).toEqual([
        grpc.status.UNKNOWN,
        text,
      ]);
    }
  });
});

describe("status messages (connect's path: compressed and JSON requests)", () => {
  let compressed: TestServer;
  let plain: TestServer;
  let driver: Any;

  // Handlers registered without the server runtime: nothing made their status sendable before connect.
  const raw = (router: ConnectRouter) => {
    router.rpc(DriverService.method.stopTask, (req) => {
      throw failures[req.taskId]!();
    });
    // With interceptors of its own (connect lets them replace the adapter's): connect serves it.
    router.rpc(
      DriverService.method.inspectTask,
      (req) => {
        throw failures[req.taskId]!();
      },
      { interceptors: [(next) => next] },
    );
    router.rpc(DriverService.method.taskStats, async function* (req) {
      yield { stats: { id: req.taskId } };
      throw failures[req.taskId]!();
    });
  };

  beforeAll(async () => {
    // Compression on: connect serves every call (the direct path only takes uncompressed ones).
    compressed = await startServer(raw, { acceptCompression: [compressionGzip] });
    plain = await startServer(raw);
    const Driver = lookup<Ctor>(loadGrpcJs(), "hashicorp.nomad.plugins.drivers.proto.Driver");
    driver = new Driver(`unix:${compressed.socketPath}`, grpc.credentials.createInsecure(), {
      "grpc.default_compression_algorithm": 2, // gzip
    });
  });

  afterAll(async () => {
    driver?.close();
    await compressed?.close();
    await plain?.close();
  });

  it("gzip requests from grpc-js: a lone surrogate becomes U+FFFD, unary and streaming", async () => {
    const unary = await new Promise<grpc.ServiceError | null>((resolve) =>
      driver.StopTask({ taskId: "loneStatus" }, new grpc.Metadata(), { deadline: Date.now() + 20_000 }, resolve),
    );
    expect([unary?.code, unary?.details]).toEqual([grpc.status.INVALID_ARGUMENT, "bad name \uFFFD"]);
    const stream = await new Promise<grpc.ServiceError>((resolve) => {
      const call = driver.TaskStats({ taskId: "loneStatus" }, new grpc.Metadata(), { deadline: Date.now() + 20_000 });
      call.on("data", () => {});
      call.on("error", resolve);
    });
    expect([stream.code, stream.details]).toEqual([grpc.status.INVALID_ARGUMENT, "bad name \uFFFD"]);
  });

  it("a method registered with interceptors of its own: a lone surrogate becomes U+FFFD", async () => {
    const Driver = lookup<Ctor>(loadGrpcJs(), "hashicorp.nomad.plugins.drivers.proto.Driver");
    const uncompressed = new Driver(`unix:${plain.socketPath}`, grpc.credentials.createInsecure());
    const err = await new Promise<grpc.ServiceError | null>((resolve) =>
      uncompressed.InspectTask({ taskId: "loneStatus" }, new grpc.Metadata(), { deadline: Date.now() + 20_000 }, resolve),
    );
    uncompressed.close();
    expect([err?.code, err?.details]).toEqual([grpc.status.INVALID_ARGUMENT, "bad name \uFFFD"]);
  });

  it("a JSON request: a lone surrogate becomes U+FFFD", async () => {
    const session = http2.connect("http://localhost", { createConnection: () => net.connect(plain.socketPath) });
    const req = session.request({
      ":method": "POST",
      ":path": "/hashicorp.nomad.plugins.drivers.proto.Driver/StopTask",
      "content-type": "application/grpc+json",
      te: "trailers",
      "grpc-timeout": "20S",
    });
    const body = Buffer.from('{"taskId":"loneStatus"}');
    const framed = Buffer.alloc(5 + body.length);
    framed.writeUInt32BE(body.length, 1);
    body.copy(framed, 5);
    req.end(framed);
    req.resume();
    const trailers = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
      req.once("trailers", resolve);
      req.once("close", () => reject(new Error(`closed with no status (rst ${req.rstCode})`)));
    });
    session.close();
    expect([trailers["grpc-status"], decodeURIComponent(String(trailers["grpc-message"]))]).toEqual([
      String(Code.InvalidArgument),
      "bad name \uFFFD",
    ]);
  });
});
