// Helpers for the runtime tests: a nomadkit server on a unix socket, a capturing logger, grpc-js
// definitions loaded from the repo's .proto files, V8's gc().
import * as http2 from "node:http2";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { ConnectRouter } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { BasePluginClient, DriverClient, createUnixSocketTransport } from "@nomadkit/client";
import { createDriverHandlers, defineDriver, type Driver, type DriverHost } from "../src/driver/index.js";
import { registerBasePlugin } from "../src/gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js";
import { registerDriver } from "../src/gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { createPluginHandler, ServerRuntime, type Logger } from "../src/runtime.js";

export const protoRoot = fileURLToPath(new URL("../../../proto", import.meta.url));

export interface LogEntry {
  level: "trace" | "debug" | "info" | "warn" | "error";
  fields: Record<string, unknown>;
  message?: string;
}

/** A Logger that records every line. */
export function captureLogger(): Logger & { entries: LogEntry[] } {
  const entries: LogEntry[] = [];
  const at = (level: LogEntry["level"]) => (fields: Record<string, unknown>, message?: string) =>
    void entries.push({ level, fields, message });
  return { entries, trace: at("trace"), debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

export interface TestServer {
  socketPath: string;
  close(): Promise<void>;
}

/** Serve `routes` (through createPluginHandler, with `options`) on a fresh unix socket. */
export async function startServer(
  routes: (router: ConnectRouter) => void,
  options?: Parameters<typeof createPluginHandler>[1],
): Promise<TestServer> {
  const dir = mkdtempSync(join(tmpdir(), "nk-server-"));
  const socketPath = join(dir, "plugin.sock");
  const server = http2.createServer(createPluginHandler(routes, options));
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return {
    socketPath,
    async close() {
      for (const s of sessions) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A driver whose lifecycle does nothing (tasks "start", wait answers exit 0 unless overridden),
 * with `parts` on top: what a test is about is all it has to write.
 */
export function fakeDriver(name: string, parts: Partial<Driver> = {}): Driver {
  return defineDriver({
    name,
    version: "0.0.1",
    fingerprint: () => ({ health: "healthy" }),
    startTask: () => {},
    waitTask: async () => ({ exitCode: 0 }),
    stopTask: () => {},
    destroyTask: () => {},
    ...parts,
  });
}

/** A driver served with createDriverHandlers on a test server, with a silent runtime. */
export interface ServedTestDriver {
  host: DriverHost;
  server: TestServer;
  /** A client on it; SetConfig has been sent and task "t1" (alloc "a1") started. */
  driver: DriverClient;
  close(): Promise<void>;
}

/** Serves `driver` and prepares it as most driver tests need: configured, with task "t1" running. */
export async function serveTestDriver(driver: Driver): Promise<ServedTestDriver> {
  const host = createDriverHandlers(driver);
  const drop = () => {};
  const runtime = new ServerRuntime({ logger: { trace: drop, debug: drop, info: drop, warn: drop, error: drop } });
  const server = await startServer((router) => {
    registerBasePlugin(router, host.base, runtime);
    registerDriver(router, host.driver, runtime);
  });
  const transport = createUnixSocketTransport(server.socketPath);
  const client = new DriverClient(transport);
  await new BasePluginClient(transport).setConfig({});
  await client.startTask({ task: { id: "t1", name: "t1", allocId: "a1" } });
  return {
    host,
    server,
    driver: client,
    async close() {
      await host.close();
      await server.close();
    },
  };
}

export function loadGrpcJs(): grpc.GrpcObject {
  const def = protoLoader.loadSync(
    ["hashicorp/nomad/plugins/drivers/proto/driver.proto", "hashicorp/nomad/plugins/base/proto/base.proto"],
    { includeDirs: [protoRoot], keepCase: false, longs: String, enums: String, defaults: true, oneofs: true },
  );
  return grpc.loadPackageDefinition(def);
}

export function lookup<T>(root: grpc.GrpcObject, name: string): T {
  let o: unknown = root;
  for (const part of name.split(".")) o = (o as Record<string, unknown>)[part];
  if (o === undefined) throw new Error(`grpc-js definition ${name} not found`);
  return o as T;
}

/** A promise with its resolver, for handler -> test synchronisation. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * V8's gc(), for tests that check what a stream keeps alive: made in a context created while
 * --expose-gc is set, then the flag is cleared again (nothing else sees a global gc).
 */
export function exposedGc(): () => void {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  setFlagsFromString("--no-expose-gc");
  return gc;
}

