// Caller cancellation of every method (streaming ones especially) of every service, nomadkit client
// against nomadkit server: the caller sees a cancellation (isCancellation), the handler's signal
// aborts and its stream ends, and nothing is logged at error level. A grpc-js client that cancels
// (client gone) gets the same treatment on the server.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { create, type DescMethod } from "@bufbuild/protobuf";
import { ClientRuntime, createUnixSocketTransport, isCancellation } from "@nomadkit/client";
import { ServerRuntime, type HandlerContext } from "../src/runtime.js";
import { allServices, clientFor, registerFor } from "./services.js";
import { captureLogger, deferred, loadGrpcJs, lookup, startServer, type TestServer } from "./runtime-helpers.js";

type Any = any;

interface Probe {
  started: ReturnType<typeof deferred>;
  /** Resolves with ctx.signal.aborted once the handler has finished (its finally ran). */
  ended: ReturnType<typeof deferred<boolean>>;
}

const services = allServices();
const probes = new Map<string, Probe>();
const key = (m: DescMethod) => `${m.parent.typeName}/${m.name}`;
const untilAborted = (ctx: HandlerContext) =>
  new Promise<void>((r) => (ctx.signal.aborted ? r() : ctx.signal.addEventListener("abort", () => r(), { once: true })));

/** Handlers that start, answer once (streams) and then wait for the call to be cancelled. */
function handlersFor(methods: DescMethod[]): Record<string, unknown> {
  const handlers: Record<string, unknown> = {};
  for (const m of methods) {
    const probe: Probe = { started: deferred(), ended: deferred<boolean>() };
    probes.set(key(m), probe);
    const streaming = m.methodKind === "server_streaming" || m.methodKind === "bidi_streaming";
    handlers[m.localName] = streaming
      ? async function* (_req: unknown, ctx: HandlerContext) {
          try {
            probe.started.resolve();
            yield create(m.output);
            await untilAborted(ctx);
          } finally {
            probe.ended.resolve(ctx.signal.aborted);
          }
        }
      : async (_req: unknown, ctx: HandlerContext) => {
          try {
            probe.started.resolve();
            await untilAborted(ctx);
            throw ctx.signal.reason;
          } finally {
            probe.ended.resolve(ctx.signal.aborted);
          }
        };
  }
  return handlers;
}

describe("caller cancellation", () => {
  const logger = captureLogger();
  let server: TestServer;
  let rt: ClientRuntime;

  beforeAll(async () => {
    const runtime = new ServerRuntime({ logger });
    server = await startServer((router) => {
      for (const s of services) registerFor(s)!(router, handlersFor(s.methods), runtime);
    });
    // A plugin that never exits: cancellations must not wait for it.
    rt = new ClientRuntime(createUnixSocketTransport(server.socketPath), { pluginExited: new AbortController().signal });
  });

  afterAll(async () => {
    await server?.close();
    expect(logger.entries.filter((e) => e.level === "error")).toEqual([]);
  });

  for (const service of services) {
    for (const method of service.methods) {
      it(`${service.name}.${method.name} (${method.methodKind})`, async () => {
        const client = new (clientFor(service)!)(rt);
        const probe = probes.get(key(method))!;
        const ac = new AbortController();
        const opts = { signal: ac.signal };
        const input = create(method.input);
        // Request streams stay open until the call is cancelled, like a terminal's stdin.
        async function* requests() {
          yield input;
          await new Promise<void>((r) => ac.signal.addEventListener("abort", () => r(), { once: true }));
        }
        const call = client[method.localName]!.bind(client);
        let err: unknown;
        switch (method.methodKind) {
          case "unary":
          case "client_streaming": {
            const p = (call(method.methodKind === "unary" ? input : requests(), opts) as Promise<unknown>).then(
              () => new Error("call succeeded"),
              (e: unknown) => e,
            );
            await probe.started.promise;
            ac.abort();
            err = await p;
            break;
          }
          case "server_streaming":
          case "bidi_streaming": {
            const it = (call(method.methodKind === "server_streaming" ? input : requests(), opts) as AsyncIterable<unknown>)[
              Symbol.asyncIterator
            ]();
            expect((await it.next()).done).toBe(false);
            ac.abort();
            err = await it.next().then(
              () => new Error("stream went on"),
              (e: unknown) => e,
            );
            break;
          }
        }
        expect(isCancellation(err), String(err)).toBe(true);
        expect(await probe.ended.promise).toBe(true);
        expect(logger.entries.filter((e) => e.level === "error")).toEqual([]);
      });
    }
  }

  it("a grpc-js client that cancels a stream (client gone) ends the handler without an error log", async () => {
    const root = loadGrpcJs();
    const Driver = lookup<new (a: string, c: grpc.ChannelCredentials) => Any>(root, "hashicorp.nomad.plugins.drivers.proto.Driver");
    const client = new Driver(`unix:${server.socketPath}`, grpc.credentials.createInsecure());
    const probe = probes.get("hashicorp.nomad.plugins.drivers.proto.Driver/TaskStats")!;
    probe.ended = deferred<boolean>();
    const call = client.TaskStats({ taskId: "t1" });
    await new Promise((r) => call.once("data", r));
    call.on("error", () => {});
    call.cancel();
    expect(await probe.ended.promise).toBe(true);
    client.close();
    expect(logger.entries.filter((e) => e.level === "error")).toEqual([]);
  });
});

describe("a handler's own abort", () => {
  it("is a failure (Unknown with its reason, logged), not the caller's cancellation", async () => {
    const { setTimeout: sleep } = await import("node:timers/promises");
    const { registerBasePlugin } = await import("../src/gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js");
    const { BasePluginClient } = await import("@nomadkit/client");
    const { Code, ConnectError } = await import("@connectrpc/connect");
    const logger = captureLogger();
    const server = await startServer((router) =>
      registerBasePlugin(
        router,
        {
          // Its own deadline for something it waits on; the caller never cancels.
          pluginInfo: async () => {
            const own = new AbortController();
            own.abort(new Error("registry did not answer within 50ms"));
            await sleep(1000, undefined, { signal: own.signal });
            return {};
          },
        },
        new ServerRuntime({ logger }),
      ),
    );
    try {
      const err = await new BasePluginClient(createUnixSocketTransport(server.socketPath)).pluginInfo({}).catch((e: unknown) => e);
      expect(isCancellation(err)).toBe(false);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as InstanceType<typeof ConnectError>).code).toBe(Code.Unknown);
      expect((err as InstanceType<typeof ConnectError>).rawMessage).toContain("registry did not answer within 50ms");
      expect(logger.entries.some((e) => e.level === "error" && e.message.includes("registry did not answer"))).toBe(true);
    } finally {
      await server.close();
    }
  });
});
