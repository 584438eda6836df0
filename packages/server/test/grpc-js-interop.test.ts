// @grpc/grpc-js client -> nomadkit server (generated registerX + ServerRuntime) over a unix socket:
// unary, server streaming, bidi, Unimplemented, unexpected exceptions, and the RecoverableError
// detail decoded by a foreign gRPC stack.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { structs } from "@nomadkit/protocol";
import { ServerRuntime, RecoverableError } from "../src/runtime.js";
import { registerBasePlugin } from "../src/gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js";
import { registerDriver } from "../src/gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { PluginType } from "@nomadkit/protocol/base";
// One hand-written google.rpc.Status codec for both packages' tests.
import { decodeRpcStatus } from "../../client/test/status.js";
import { captureLogger, loadGrpcJs, lookup, startServer, type TestServer } from "./runtime-helpers.js";

type Any = any; // grpc-js is the untyped independent peer
type Ctor = new (address: string, creds: grpc.ChannelCredentials) => Any;

const recoverableUrl = "type.googleapis.com/hashicorp.nomad.plugins.shared.structs.RecoverableError";

describe("grpc-js client -> nomadkit server", () => {
  const logger = captureLogger();
  let server: TestServer;
  let driver: Any;
  let base: Any;

  beforeAll(async () => {
    const runtime = new ServerRuntime({ logger });
    server = await startServer((router) => {
      registerBasePlugin(
        router,
        {
          pluginInfo: () => ({ type: PluginType.DRIVER, pluginApiVersions: ["0.1.0"], pluginVersion: "0.0.1", name: "nk" }),
        },
        runtime,
      );
      registerDriver(
        router,
        {
          async *taskStats(req) {
            for (let i = 0; i < 3; i++) yield { stats: { id: `${req.taskId}-${i}` } };
            if (req.taskId === "fail") throw new RecoverableError("stats source gone", true);
          },
          async *execTaskStreaming(reqs) {
            for await (const req of reqs) {
              if (req.setup) yield { stdout: { data: new TextEncoder().encode(req.setup.command.join(" ")) } };
              else if (req.stdin?.close) {
                yield { exited: true, result: { exitCode: 3 } };
                return;
              } else if (req.stdin) yield { stdout: { data: req.stdin.data } };
            }
          },
          startTask() {
            throw new RecoverableError("bad task config", false);
          },
          inspectTask() {
            throw new Error("kaboom");
          },
          stopTask() {
            throw new ConnectError("no such task", Code.NotFound);
          },
        },
        runtime,
      );
    });
    const root = loadGrpcJs();
    const creds = grpc.credentials.createInsecure();
    const Driver = lookup<Ctor>(root, "hashicorp.nomad.plugins.drivers.proto.Driver");
    const Base = lookup<Ctor>(root, "hashicorp.nomad.plugins.base.proto.BasePlugin");
    driver = new Driver(`unix:${server.socketPath}`, creds);
    base = new Base(`unix:${server.socketPath}`, creds);
  });

  afterAll(async () => {
    driver?.close();
    base?.close();
    await server?.close();
  });

  const unary = (client: Any, name: string, req: object) =>
    new Promise<{ err: grpc.ServiceError | null; res: Any }>((resolve) =>
      client[name](req, (err: grpc.ServiceError | null, res: Any) => resolve({ err, res })),
    );

  it("unary", async () => {
    const { err, res } = await unary(base, "PluginInfo", {});
    expect(err).toBeNull();
    expect(res).toMatchObject({ type: "DRIVER", pluginApiVersions: ["0.1.0"], name: "nk" });
  });

  it("server streaming", async () => {
    const ids: string[] = [];
    for await (const res of driver.TaskStats({ taskId: "t1" })) ids.push(res.stats.id);
    expect(ids).toEqual(["t1-0", "t1-1", "t1-2"]);
  });

  it("bidi streaming", async () => {
    const call = driver.ExecTaskStreaming();
    call.write({ setup: { taskId: "t1", command: ["cat"] } });
    call.write({ stdin: { data: Buffer.from("abc") } });
    call.write({ stdin: { close: true } });
    call.end();
    const out: Any[] = [];
    for await (const res of call) out.push(res);
    expect(out.map((r) => (r.stdout ? Buffer.from(r.stdout.data).toString() : `exit ${r.result.exitCode}`))).toEqual([
      "cat",
      "abc",
      "exit 3",
    ]);
  });

  it("a missing handler answers Unimplemented naming the method", async () => {
    const { err } = await unary(driver, "Init", {});
    expect(err?.code).toBe(grpc.status.UNIMPLEMENTED);
    expect(err?.details).toContain("hashicorp.nomad.plugins.drivers.proto.Driver.Init");
    const stream = driver.Fingerprint({});
    const streamErr = await new Promise<grpc.ServiceError>((r) => stream.on("error", r));
    expect(streamErr.code).toBe(grpc.status.UNIMPLEMENTED);
  });

  it("a thrown RecoverableError is FailedPrecondition with the RecoverableError detail, as Go encodes it", async () => {
    const { err } = await unary(driver, "StartTask", {});
    expect(err?.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(err?.details).toBe("bad task config");
    const [bin] = err!.metadata.get("grpc-status-details-bin");
    const status = decodeRpcStatus(bin as Buffer);
    expect(status.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(status.message).toBe("bad task config");
    expect(status.details.map((d) => d.typeUrl)).toEqual([recoverableUrl]);
    expect(fromBinary(structs.RecoverableErrorSchema, status.details[0]!.value).recoverable).toBe(false);
  });

  it("a RecoverableError thrown mid-stream carries the detail too", async () => {
    const call = driver.TaskStats({ taskId: "fail" });
    const ids: string[] = [];
    call.on("data", (r: Any) => ids.push(r.stats.id));
    const err = await new Promise<grpc.ServiceError>((r) => call.on("error", r));
    expect(ids).toHaveLength(3);
    expect(err.code).toBe(grpc.status.FAILED_PRECONDITION);
    const status = decodeRpcStatus(err.metadata.get("grpc-status-details-bin")[0] as Buffer);
    expect(status.details[0]!.typeUrl).toBe(recoverableUrl);
    expect(fromBinary(structs.RecoverableErrorSchema, status.details[0]!.value).recoverable).toBe(true);
  });

  it("an unexpected exception is Unknown with its message and logged once at error level", async () => {
    const before = logger.entries.filter((e) => e.level === "error").length;
    const { err } = await unary(driver, "InspectTask", {});
    expect(err?.code).toBe(grpc.status.UNKNOWN);
    expect(err?.details).toBe("kaboom");
    const errors = logger.entries.filter((e) => e.level === "error").slice(before);
    expect(errors).toHaveLength(1);
    expect(errors[0]!.fields.rpc).toBe("hashicorp.nomad.plugins.drivers.proto.Driver/InspectTask");
  });

  it("a thrown ConnectError passes through and is not logged as an error", async () => {
    const before = logger.entries.filter((e) => e.level === "error").length;
    const { err } = await unary(driver, "StopTask", {});
    expect(err?.code).toBe(grpc.status.NOT_FOUND);
    expect(err?.details).toBe("no such task");
    expect(logger.entries.filter((e) => e.level === "error").length).toBe(before);
  });
});
