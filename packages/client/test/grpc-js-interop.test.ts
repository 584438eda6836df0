// nomadkit client -> @grpc/grpc-js server over a unix socket (h2c): unary, server streaming, bidi,
// RecoverableError details written by a foreign server, caller cancellation.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { structs } from "@nomadkit/protocol";
import {
  BasePluginClient,
  DriverClient,
  HealthClient,
  RecoverableError,
  createUnixSocketTransport,
  isCancellation,
  reattachPlugin,
} from "../src/index.js";
import { encodeRpcStatus } from "./status.js";
import { loadGrpcJs, lookup, startGrpcJsServer, tempDir } from "./helpers.js";

type Def = { service: grpc.ServiceDefinition };
type Any = any; // grpc-js handlers are untyped here on purpose: it is the independent peer

const recoverableUrl = "type.googleapis.com/hashicorp.nomad.plugins.shared.structs.RecoverableError";

describe("nomadkit client -> grpc-js server", () => {
  const tmp = tempDir();
  const socketPath = `${tmp.dir}/grpcjs.sock`;
  let server: grpc.Server;
  const cancelled: string[] = [];
  /** TaskEvents calls the server is serving, and who waits for there to be none. */
  let taskEventsOpen = 0;
  /** TaskEvents calls the server has been asked to serve. */
  let taskEventsStarted = 0;
  let execStarted = 0;
  const noTaskEvents: (() => void)[] = [];

  beforeAll(async () => {
    const root = loadGrpcJs();
    server = await startGrpcJsServer(socketPath, (s) => {
      s.addService(lookup<Def>(root, "hashicorp.nomad.plugins.base.proto.BasePlugin").service, {
        PluginInfo: (_call: Any, cb: Any) =>
          cb(null, { type: "DRIVER", pluginApiVersions: ["0.1.0"], pluginVersion: "1.2.3", name: "grpcjs" }),
      });
      s.addService(lookup<Def>(root, "grpc.health.v1.Health").service, {
        Check: (call: Any, cb: Any) => cb(null, { status: call.request.service === "plugin" ? "SERVING" : "UNKNOWN" }),
      });
      s.addService(lookup<Def>(root, "hashicorp.nomad.plugins.drivers.proto.Driver").service, {
        TaskStats: (call: Any) => {
          for (let i = 0; i < 3; i++) call.write({ stats: { id: `${call.request.taskId}-${i}` } });
          call.end();
        },
        TaskEvents: (call: Any) => {
          taskEventsOpen++;
          taskEventsStarted++;
          call.write({ taskId: "t1", message: "first" });
          call.on("cancelled", () => {
            cancelled.push("TaskEvents");
            if (--taskEventsOpen === 0) for (const w of noTaskEvents.splice(0)) w();
          });
        },
        ExecTaskStreaming: (call: Any) => {
          execStarted++;
          call.on("data", (req: Any) => {
            if (req.setup) call.write({ stdout: { data: Buffer.from(req.setup.command.join(" ")) } });
            if (req.stdin?.close) {
              call.write({ exited: true, result: { exitCode: 7 } });
              call.end();
            } else if (req.stdin) call.write({ stdout: { data: req.stdin.data } });
          });
        },
        StartTask: (_call: Any, cb: Any) => {
          const detail = toBinary(structs.RecoverableErrorSchema, create(structs.RecoverableErrorSchema, { recoverable: true }));
          const md = new grpc.Metadata();
          md.set(
            "grpc-status-details-bin",
            Buffer.from(encodeRpcStatus({ code: 9, message: "image pull failed", details: [{ typeUrl: recoverableUrl, value: detail }] })),
          );
          cb({ code: grpc.status.FAILED_PRECONDITION, details: "image pull failed", metadata: md });
        },
        StopTask: (_call: Any, cb: Any) => cb({ code: grpc.status.FAILED_PRECONDITION, details: "no detail" }),
        WaitTask: (_call: Any, cb: Any) => cb({ code: grpc.status.UNAVAILABLE, details: "temporarily unavailable" }),
      });
    });
  });

  afterAll(async () => {
    await new Promise<void>((r) => server.tryShutdown(() => r()));
    tmp.cleanup();
  });

  const transport = () => createUnixSocketTransport(socketPath);

  it("unary", async () => {
    const info = await new BasePluginClient(transport()).pluginInfo({});
    expect(info.name).toBe("grpcjs");
    expect(info.pluginVersion).toBe("1.2.3");
    expect(info.pluginApiVersions).toEqual(["0.1.0"]);
    const health = await new HealthClient(transport()).check({ service: "plugin" });
    expect(health.status).toBe(1); // SERVING
  });

  it("server streaming", async () => {
    const ids: string[] = [];
    for await (const res of new DriverClient(transport()).taskStats({ taskId: "t1" })) ids.push(res.stats?.id ?? "");
    expect(ids).toEqual(["t1-0", "t1-1", "t1-2"]);
  });

  it("bidi streaming", async () => {
    const dec = new TextDecoder();
    async function* input() {
      yield { setup: { taskId: "t1", command: ["echo", "hi"] } };
      yield { stdin: { data: new TextEncoder().encode("ping") } };
      yield { stdin: { close: true } };
    }
    const out: string[] = [];
    let exitCode = -1;
    for await (const res of new DriverClient(transport()).execTaskStreaming(input())) {
      if (res.stdout) out.push(dec.decode(res.stdout.data));
      if (res.exited) exitCode = res.result?.exitCode ?? -1;
    }
    expect(out).toEqual(["echo hi", "ping"]);
    expect(exitCode).toBe(7);
  });

  it("FailedPrecondition with a RecoverableError detail becomes RecoverableError", async () => {
    const err = await new DriverClient(transport()).startTask({}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RecoverableError);
    expect((err as RecoverableError).recoverable).toBe(true);
    expect((err as RecoverableError).message).toBe("image pull failed");
    expect((err as RecoverableError).cause).toBeInstanceOf(ConnectError);
  });

  it("FailedPrecondition without the detail stays a ConnectError", async () => {
    const err = await new DriverClient(transport()).stopTask({}).catch((e: unknown) => e);
    expect(err).not.toBeInstanceOf(RecoverableError);
    expect(ConnectError.from(err).code).toBe(Code.FailedPrecondition);
  });

  it("Unavailable while the plugin stays alive is returned unchanged after the grace period", async () => {
    const never = new AbortController();
    const client = new DriverClient(transport(), { pluginExited: never.signal, shutdownGraceMs: 20 });
    const err = await client.waitTask({ taskId: "t1" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    expect((err as ConnectError).rawMessage).toBe("temporarily unavailable");
  });

  it("a caller that stops reading a stream early cancels the call at the server", async () => {
    const before = cancelled.length;
    for await (const ev of new DriverClient(transport()).taskEvents({})) {
      expect(ev.message).toBe("first");
      break;
    }
    for (let i = 0; i < 500 && cancelled.length === before; i++) await new Promise((r) => setTimeout(r, 10));
    expect(cancelled.slice(before)).toEqual(["TaskEvents"]);
  });

  // Suspected race: a caller that cancels TaskEvents in the same tick as it opens it. Each way of
  // doing it ends in a cancellation, and no call is left open at the server (what a stream the
  // client let go of without a reset would be), on both connection kinds.
  it("TaskEvents cancelled as it is opened: a cancellation, and nothing left open at the server", async () => {
    const plugin = await reattachPlugin({ pid: process.pid, network: "unix", address: socketPath });
    try {
      const ways: Record<string, (ac: AbortController, it: AsyncIterator<unknown>) => Promise<unknown>> = {
        "abort, then next()": (ac, it) => (ac.abort(), it.next()),
        "next(), then abort in the same tick": (ac, it) => {
          const p = it.next();
          ac.abort();
          return p;
        },
        "next(), abort on the next microtask": async (ac, it) => {
          const p = it.next();
          await Promise.resolve();
          ac.abort();
          return p;
        },
        "next(), abort on process.nextTick": async (ac, it) => {
          const p = it.next();
          await new Promise((r) => process.nextTick(r));
          ac.abort();
          return p;
        },
        "next(), abort on setImmediate": async (ac, it) => {
          const p = it.next();
          await new Promise((r) => setImmediate(r));
          ac.abort();
          return p;
        },
      };
      for (const [via, client] of [["createUnixSocketTransport", new DriverClient(transport())], ["reattachPlugin", plugin.driver]] as const) {
        for (const [way, run] of Object.entries(ways)) {
          for (let i = 0; i < 5; i++) {
            const ac = new AbortController();
            const err = await run(ac, client.taskEvents({}, { signal: ac.signal })[Symbol.asyncIterator]()).catch((e: unknown) => e);
            expect(isCancellation(err), `${via}, ${way}: ${String(err)}`).toBe(true);
          }
        }
        // One more on the same connection, read and let go: the server has seen every call before it.
        for await (const ev of client.taskEvents({})) {
          expect(ev.message).toBe("first");
          break;
        }
        if (taskEventsOpen > 0) await new Promise<void>((r) => noTaskEvents.push(r));
      }
    } finally {
      plugin.close();
    }
  }, 30_000);

  // A signal that has already fired must not open a call at all: the plugin's handler would start
  // (an exec session, a stats stream) for a caller that has given up, as single-request calls refuse.
  it("a stream whose signal has already fired is refused without reaching the server", async () => {
    const client = new DriverClient(transport());
    const before = taskEventsStarted;
    const execBefore = execStarted;
    const ac = new AbortController();
    ac.abort();
    for (const open of [
      () => client.taskEvents({}, { signal: ac.signal }),
      () => client.execTaskStreaming((async function* () {})(), { signal: ac.signal }),
    ]) {
      const err = await (async () => {
        for await (const _ of open()) return undefined;
      })().catch((e: unknown) => e);
      expect(isCancellation(err), String(err)).toBe(true);
    }
    // One call on the same connection after them: the server has seen every call opened before it.
    for await (const ev of client.taskEvents({})) {
      expect(ev.message).toBe("first");
      break;
    }
    expect(taskEventsStarted - before).toBe(1);
    expect(execStarted - execBefore).toBe(0);
  });

  it("caller cancellation of a stream is a cancellation", async () => {
    const ac = new AbortController();
    const client = new DriverClient(transport());
    const seen: string[] = [];
    const err = await (async () => {
      for await (const ev of client.taskEvents({}, { signal: ac.signal })) {
        seen.push(ev.message);
        ac.abort();
      }
    })().catch((e: unknown) => e);
    expect(seen).toEqual(["first"]);
    expect(isCancellation(err)).toBe(true);
    expect(ConnectError.from(err).code).toBe(Code.Canceled);
  });
});
