// Shared test helpers: temp unix sockets, a grpc-js peer loaded from the repo's .proto files, and a
// child plugin process whose stdout words act as synchronisation points.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

export const protoRoot = fileURLToPath(new URL("../../../proto", import.meta.url));

/** A fresh directory for sockets; removed by the returned cleanup. */
export function tempDir(): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "nk-client-"));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** grpc-js service definitions for the repo's contracts (independent of protobuf-es). */
export function loadGrpcJs(): grpc.GrpcObject {
  const def = protoLoader.loadSync(
    [
      "hashicorp/nomad/plugins/drivers/proto/driver.proto",
      "hashicorp/nomad/plugins/base/proto/base.proto",
      "hashicorp/nomad/plugins/shared/structs/recoverable_error.proto",
      "grpc/health/v1/health.proto",
    ],
    { includeDirs: [protoRoot], keepCase: false, longs: String, enums: String, defaults: true, oneofs: true },
  );
  return grpc.loadPackageDefinition(def);
}

/** Look up a nested grpc-js object by dotted name. */
export function lookup<T>(root: grpc.GrpcObject, name: string): T {
  let o: unknown = root;
  for (const part of name.split(".")) o = (o as Record<string, unknown>)[part];
  if (o === undefined) throw new Error(`grpc-js definition ${name} not found`);
  return o as T;
}

/** Bind a grpc-js server on a unix socket (h2c). */
export async function startGrpcJsServer(
  socketPath: string,
  add: (server: grpc.Server) => void,
): Promise<grpc.Server> {
  const server = new grpc.Server();
  add(server);
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix:${socketPath}`, grpc.ServerCredentials.createInsecure(), (err) =>
      err ? reject(err) : resolve(),
    ),
  );
  return server;
}

/** A child process plus a way to wait for a word on its stdout and for its exit. */
export interface Child {
  proc: ChildProcess;
  /** Aborted when the process exits: the plugin's "done" signal. */
  exited: AbortSignal;
  waitFor(word: string): Promise<void>;
}

export function spawnFixture(script: string, args: string[]): Child {
  const proc = spawn(process.execPath, [fileURLToPath(new URL(`./fixtures/${script}`, import.meta.url)), ...args], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exit = new AbortController();
  proc.on("exit", () => exit.abort());
  const seen = new Set<string>();
  const waiters = new Map<string, Array<() => void>>();
  createInterface({ input: proc.stdout! }).on("line", (line) => {
    const word = line.trim();
    seen.add(word);
    for (const w of waiters.get(word) ?? []) w();
    waiters.delete(word);
  });
  return {
    proc,
    exited: exit.signal,
    waitFor(word) {
      if (seen.has(word)) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        waiters.set(word, [...(waiters.get(word) ?? []), resolve]);
        exit.signal.addEventListener("abort", () => reject(new Error(`fixture exited before "${word}"`)), { once: true });
      });
    },
  };
}
