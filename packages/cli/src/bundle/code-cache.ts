// The code-cache run: the bundled plugin started once as Nomad starts it; its launcher saves what V8
// compiled on the way. Also the bundle's smoke test.
import * as http2 from "node:http2";
import { createRequire } from "node:module";
import { connect } from "node:net";
import { join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { PluginInfoResponseSchema } from "@nomadkit/protocol/base";
import { HealthCheckRequestSchema } from "@nomadkit/protocol/health";
import type { PluginClient } from "@nomadkit/client";
import { CliError } from "../errors.js";
import { atExit, interrupted, launchInterrupted, onInterrupt } from "../interrupt.js";
import { CODE_CACHE_DIR_ENV, CODE_CACHE_ENV } from "./launcher.js";

/** One call of a load launch, as `@nomadkit/server`'s prelude.ts replays it. */
export interface RecordedCall {
  path: string;
  request: string;
  headers: Record<string, string>;
  body: string;
  trailers: Record<string, string>;
}

/** The calls of Nomad's load launch, in its order: go-plugin's health check, PluginInfo, ConfigSchema. */
function loadLaunchCalls(): { path: string; request: Uint8Array }[] {
  const envelope = (message: Uint8Array) => {
    const out = new Uint8Array(5 + message.length);
    new DataView(out.buffer).setUint32(1, message.length);
    out.set(message, 5);
    return out;
  };
  return [
    {
      path: "/grpc.health.v1.Health/Check",
      request: envelope(
        toBinary(
          HealthCheckRequestSchema,
          create(HealthCheckRequestSchema, { service: "plugin" }),
        ),
      ),
    },
    {
      path: "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo",
      request: envelope(new Uint8Array(0)),
    },
    {
      path: "/hashicorp.nomad.plugins.base.proto.BasePlugin/ConfigSchema",
      request: envelope(new Uint8Array(0)),
    },
  ];
}

/** The Shutdown call, recorded last: the plugin exits after it. */
const SHUTDOWN_CALL = {
  path: "/plugin.GRPCController/Shutdown",
  request: new Uint8Array(5),
};

/** One unary gRPC call over `session` with exactly these bytes; the complete response, or why not. */
function rawCall(
  session: http2.ClientHttp2Session,
  path: string,
  request: Uint8Array,
): Promise<RecordedCall> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
    });
    const headers: Record<string, string> = {};
    let trailers: Record<string, string> = {};
    const body: Buffer[] = [];
    const strings = (h: http2.IncomingHttpHeaders) => {
      const out: Record<string, string> = {};
      for (const [k, v] of Object.entries(h))
        if (!k.startsWith(":") && k !== "date" && typeof v === "string")
          out[k] = v;
      return out;
    };
    stream.on("response", (h) => Object.assign(headers, strings(h)));
    stream.on("trailers", (t) => (trailers = strings(t)));
    stream.on("data", (c: Buffer) => body.push(c));
    stream.on("error", reject);
    stream.on("end", () => {
      // A trailers-only response carries its status in the headers.
      const status = trailers["grpc-status"] ?? headers["grpc-status"];
      if (status !== "0")
        return reject(
          new Error(
            `${path}: grpc-status ${status ?? "missing"} ${trailers["grpc-message"] ?? headers["grpc-message"] ?? ""}`,
          ),
        );
      resolve({
        path,
        request: Buffer.from(request).toString("base64"),
        headers,
        body: Buffer.concat(body).toString("base64"),
        trailers,
      });
    });
    stream.end(request);
  });
}

/** What the code-cache run found. */
export interface TrainingRun {
  /** PluginInfo's name and plugin_version. */
  name: string;
  version: string;
  /** The load launch's calls as answered (for the launcher's fast path). */
  calls: RecordedCall[];
  /** The messages of the plugin's stderr lines (with `check-load`: the launcher's report). */
  log: string[];
}

/**
 * The environment of a launch that writes the code cache; `installDir`: where the bundle will be
 * installed when it is not there yet (the cache keeps that file name, see CODE_CACHE_DIR_ENV).
 */
function writeEnv(installDir: string | undefined): Record<string, string> {
  return { [CODE_CACHE_ENV]: "write", ...(installDir !== undefined && { [CODE_CACHE_DIR_ENV]: installDir }) };
}

/**
 * Launches the bundled plugin the way Nomad does and makes the calls of Nomad's load launch (health
 * check, PluginInfo, ConfigSchema) with exactly the bytes Nomad sends, recording the answers, then
 * GRPCController.Shutdown. `mode` `write`: the launcher runs the plugin and saves its V8 code cache
 * as the process exits, and reports the transport options; `check-answers` (before the recording is
 * written) and `check-load` (after): the launcher runs as it will for Nomad and reports what it
 * used, the plugin itself or the load launch's fast path, to be checked against the first run's
 * answers. `installDir`: the directory the bundle will be installed in, when it is written
 * elsewhere first (the name the code cache keeps for stack traces).
 */
export async function trainCodeCache(
  launcher: string,
  startTimeoutMs = 60_000,
  mode: "write" | "check-answers" | "check-load" = "write",
  installDir?: string,
): Promise<TrainingRun> {
  const { launchPlugin } = await import("@nomadkit/client");
  const log: string[] = [];
  let plugin;
  try {
    // launchPlugin's error carries the plugin's last stderr lines.
    plugin = await launchPlugin(process.execPath, [launcher], {
      // At debug level in the check: whether the fast path loaded the plugin is a debug line.
      env: mode === "write" ? writeEnv(installDir) : { [CODE_CACHE_ENV]: "report", NOMADKIT_LOG_LEVEL: "debug" },
      logger: (entry) => log.push(entry.message),
      startTimeoutMs,
      signal: interrupted,
    });
  } catch (err) {
    // Ctrl-C reaches the plugin too: however the race between its death and ours goes, 128+N.
    launchInterrupted(err);
    const [which, skip] =
      mode === "write"
        ? ["", "--no-code-cache"]
        : mode === "check-answers"
          ? [" (its second run, which checks its answers do not vary)", "--no-load-recording"]
          : [" (load launch fast path)", "--no-load-recording"];
    throw new CliError(`bundle: the bundled plugin${which} did not start as Nomad starts it: ${(err as Error).message}\n(${skip} skips this run)`);
  }
  const launched = plugin;
  const noCleanup = onInterrupt(() => launched.kill());
  // Exiting before that kill is done (a second signal) left the plugin running for good.
  const noExitKill = atExit(() => launched.killSync({ processTree: true }));
  try {
    return { ...(await loadLaunchRun(plugin)), log };
  } finally {
    noCleanup();
    noExitKill();
  }
}

/** The load launch's calls and Shutdown, recorded from the plugin `trainCodeCache` launched. */
async function loadLaunchRun(plugin: PluginClient): Promise<Omit<TrainingRun, "log">> {
  let info;
  const calls: RecordedCall[] = [];
  const { network, address } = plugin;
  const session = http2.connect(
    network === "unix" ? "http://localhost" : `http://${address}`,
    network === "unix" ? { createConnection: () => connect(address) } : {},
  );
  session.on("error", () => undefined);
  try {
    for (const { path, request } of loadLaunchCalls())
      calls.push(await rawCall(session, path, request));
    info = fromBinary(
      PluginInfoResponseSchema,
      Buffer.from(calls[1]!.body, "base64").subarray(5),
    );
    calls.push(
      await rawCall(session, SHUTDOWN_CALL.path, SHUTDOWN_CALL.request),
    );
  } catch (err) {
    session.destroy();
    await plugin.kill().catch(() => undefined);
    throw new CliError(
      `bundle: the bundled plugin failed a call of Nomad's load launch: ${(err as Error).message}`,
    );
  }
  session.close();
  const exit = await plugin.kill();
  if (exit.code !== 0) {
    throw new CliError(
      `bundle: the bundled plugin exited with ${exit.code ?? exit.signal} on shutdown`,
    );
  }
  return { name: info.name, version: info.pluginVersion, calls };
}

/** The part of `@nomadkit/server/executor` the executor's code-cache run uses. */
interface ExecutorModule {
  launchExecutor(options: {
    executorPath: string;
    env: Record<string, string>;
    startTimeoutMs?: number;
  }): Promise<{
    client: {
      launch(request: { cmd: string; args: string[] }): Promise<unknown>;
      wait(request: object): Promise<unknown>;
    };
    shutdownTask(): Promise<void>;
    readonly exited: AbortSignal;
    kill(): Promise<void>;
    /** Its go-plugin connection; killSync is missing in a @nomadkit/client older than this CLI's. */
    readonly plugin: { killSync?(): void };
  }>;
}

/**
 * The task executor's code-cache run: started the way the plugin starts it (`launchExecutor` of
 * the `@nomadkit/server` the plugin was bundled with, in `serverDir`), it runs one short process
 * (Launch, Wait) and shuts down (Shutdown); its launcher saves V8's code cache as it exits.
 * `installDir`: as {@link trainCodeCache}'s.
 */
export async function trainExecutorCodeCache(
  launcher: string,
  serverDir: string,
  startTimeoutMs = 60_000,
  installDir?: string,
): Promise<void> {
  let server: ExecutorModule;
  try {
    // The package by its own name (its exports map), not whatever @nomadkit/server the entry's
    // directory resolves to: under pnpm or npm's linked strategy, or with the SDK an indirect
    // dependency, that is none; in a flat node_modules it may be another version. Its CommonJS
    // build: require() works the same from this package's ES module and CommonJS builds.
    server = createRequire(join(serverDir, "package.json"))("@nomadkit/server/executor") as ExecutorModule;
  } catch (err) {
    throw new CliError(
      `bundle: cannot load @nomadkit/server/executor from ${serverDir} to start the bundled executor: ${(err as Error).message}\n(--no-code-cache skips this run)`,
    );
  }
  let executor;
  try {
    executor = await server.launchExecutor({
      executorPath: launcher,
      env: writeEnv(installDir),
      startTimeoutMs,
    });
  } catch (err) {
    throw new CliError(
      `bundle: the bundled executor did not start as launchExecutor starts it: ${(err as Error).message}\n(--no-code-cache skips this run)`,
    );
  }
  const launched = executor;
  const noCleanup = onInterrupt(() => launched.kill());
  const noExitKill = atExit(() => launched.plugin.killSync?.());
  try {
    await runExecutor(executor);
  } finally {
    noCleanup();
    noExitKill();
  }
}

/** One short process through the executor `trainExecutorCodeCache` launched, then its exit. */
async function runExecutor(
  executor: Awaited<ReturnType<ExecutorModule["launchExecutor"]>>,
): Promise<void> {
  try {
    await executor.client.launch({ cmd: process.execPath, args: ["-e", "0"] });
    await executor.client.wait({});
    await executor.shutdownTask();
  } catch (err) {
    await executor.kill().catch(() => undefined);
    throw new CliError(
      `bundle: the bundled executor failed to run a process: ${(err as Error).message}\n(--no-code-cache skips this run)`,
    );
  }
  // It exits by itself after Shutdown (its launcher writes the cache then); kill() only if it has
  // not within 5 s.
  if (!executor.exited.aborted) {
    await new Promise<void>((done) => {
      const timer = setTimeout(done, 5_000);
      executor.exited.addEventListener(
        "abort",
        () => {
          clearTimeout(timer);
          done();
        },
        { once: true },
      );
    });
  }
  if (!executor.exited.aborted) await executor.kill().catch(() => undefined);
}
