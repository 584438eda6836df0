import { openSync, writeSync } from "node:fs";
import { createLogger, type Logger, type LogLevel } from "../log/index.js";
import { serveOnTransport, type ServedPlugin } from "../goplugin/serve.js";
import { registerExecutor } from "../gen/hashicorp/nomad/plugins/executor/proto/executor_nomadkit.js";
import { ServerRuntime } from "../runtime/server-runtime.js";
import { timerDelayMs } from "../runtime/timer-delay.js";
import { ExecutorService } from "./service.js";
import { hostCompute } from "../stats/host.js";
import { dropOwnMallocArenaCap } from "./malloc-arenas.js";

/** Configuration of an executor process; the driver passes it as the JSON first argument. */
export interface ExecutorConfig {
  /** File the executor appends its hclog JSON log to. Without it logs go to stderr while that works. */
  logFile?: string;
  /** Lowest log level; default `debug`. */
  logLevel?: LogLevel;
  /**
   * Host compute for total_ticks: the agent's total MHz (Nomad's `cpu_total_compute`, or its
   * topology's sum). Pass the driver's `ctx.hostCompute` (with {@link numCores}) so the executor's
   * total_ticks equal Nomad's, as Nomad's drivers hand their executors `Compute`.
   */
  totalComputeMhz?: number;
  /** Number of cores of the agent's topology, the divisor of total_ticks; default: detected. */
  numCores?: number;
  /**
   * Exit once Shutdown has stopped the task (default true). With false the executor keeps serving
   * (Wait, Stats...) until the driver kills it, as Nomad's Go executor does.
   */
  exitAfterShutdown?: boolean;
  /**
   * How long, in ms, the executor waits for its host's first connection after the handshake; with
   * none by then, and no task launched, it exits (its host died before it could connect). Default
   * 60000. `launchExecutor` connects at once.
   */
  hostConnectTimeoutMs?: number;
}

const DEFAULT_HOST_CONNECT_TIMEOUT_MS = 60_000;

/** Options for {@link runExecutorMain}. */
export interface RunExecutorOptions {
  /** Configuration; default: parsed from the first command-line argument (JSON) if present. */
  config?: ExecutorConfig;
  /** Whether to exit the process after Shutdown; default `config.exitAfterShutdown`, else true. */
  exitAfterShutdown?: boolean;
}

/**
 * Parses the executor's command-line configuration: one JSON object argument (what
 * `launchExecutor` passes). Unknown keys are ignored; a malformed argument is an error naming it.
 *
 * @example
 * ```ts
 * import { parseExecutorArgs } from "@nomadkit/server/executor";
 * parseExecutorArgs(['{"logFile":"/tmp/executor.log"}']); // { logFile: "/tmp/executor.log" }
 * ```
 */
export function parseExecutorArgs(argv: readonly string[]): ExecutorConfig {
  const arg = argv.find((a) => a.startsWith("{"));
  if (!arg) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(arg);
  } catch (err) {
    throw new Error(`nomadkit-executor: the configuration argument is not JSON: ${(err as Error).message}`);
  }
  if (typeof parsed !== "object" || parsed === null) throw new Error("nomadkit-executor: the configuration argument must be a JSON object");
  return checkConfig(parsed as ExecutorConfig);
}

/** `config`, if the fields the executor relies on are well-formed; else an error naming the field. */
function checkConfig(config: ExecutorConfig): ExecutorConfig {
  const timeout = config.hostConnectTimeoutMs;
  if (timeout !== undefined && !(typeof timeout === "number" && timeout > 0 && Number.isFinite(timeout))) {
    throw new Error(`nomadkit-executor: hostConnectTimeoutMs must be a positive number of ms, not ${JSON.stringify(timeout)}`);
  }
  return config;
}

/**
 * A log destination that never throws and never blocks on a vanished reader: the driver that
 * started the executor may die at any time, closing the stderr pipe (EPIPE) — the executor and
 * its task must not notice.
 */
function safeDestination(config: ExecutorConfig): { write(line: string): void } {
  let fd = 2;
  if (config.logFile) {
    try {
      fd = openSync(config.logFile, "a", 0o640);
    } catch {
      // keep stderr
    }
  }
  let broken = false;
  return {
    write(line: string) {
      if (broken) return;
      try {
        writeSync(fd, line);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "EPIPE" || code === "EBADF" || code === "EIO") broken = true;
        // EAGAIN etc.: drop the line rather than spin.
      }
    },
  };
}

/**
 * Runs this process as a nomadkit executor: serves `hashicorp.nomad.plugins.executor.proto.Executor`
 * for ONE task over go-plugin (the driver starts it with {@link launchExecutor}, which sets the
 * magic cookie). The process is built to outlive the driver that started it: stdout/stderr
 * failures are ignored, SIGHUP and SIGINT are ignored, and once a task was launched it exits only
 * after Shutdown (or GRPCController.Shutdown / SIGTERM). Before that, it also exits (socket
 * directory removed, as on Shutdown) when its host's last connection closes, or none came within
 * `hostConnectTimeoutMs`: its driver died before StartTask returned a handle, so no driver will
 * ever reattach to it. A Launch under way then is cancelled first.
 *
 * The SDK ships a ready-made entry file (`dist/cjs/executor/bin.js`, see {@link executorBinPath});
 * call this yourself only to build a custom executor binary.
 *
 * @example
 * ```ts
 * // my-executor.ts — started with `node my-executor.js '{"logFile":"/alloc/logs/.executor.log"}'`
 * import { runExecutorMain } from "@nomadkit/server/executor";
 * void runExecutorMain();
 * ```
 */
export async function runExecutorMain(options: RunExecutorOptions = {}): Promise<ServedPlugin> {
  // Before a task or exec session could inherit it: the arena cap was for this process only.
  dropOwnMallocArenaCap();
  // The driver may be gone: writing to its pipes must not crash the executor.
  const ignore = () => {};
  process.stdout.on("error", ignore);
  process.stderr.on("error", ignore);
  process.on("SIGHUP", ignore);

  let config: ExecutorConfig;
  try {
    config = options.config ? checkConfig(options.config) : parseExecutorArgs(process.argv.slice(2));
  } catch (err) {
    writeSync(2, `${(err as Error).message}\n`);
    process.exit(1);
  }
  const logger: Logger = createLogger({ name: "executor", level: config.logLevel ?? "debug", destination: safeDestination(config) });
  const exitAfterShutdown = options.exitAfterShutdown ?? config.exitAfterShutdown ?? true;
  let served: ServedPlugin | undefined;
  const hostOpts: Parameters<typeof hostCompute>[0] = {};
  if (config.totalComputeMhz) hostOpts.totalComputeMhz = config.totalComputeMhz;
  if (config.numCores) hostOpts.numCores = config.numCores;
  const service = new ExecutorService({
    host: hostCompute(hostOpts),
    logger,
    afterShutdown: () => {
      if (exitAfterShutdown) void served?.shutdown("executor Shutdown");
    },
  });
  process.on("uncaughtException", (err) => {
    // Keep supervising the task: an executor crash would orphan it from the driver.
    logger.error("uncaught exception in executor", { error: err });
  });
  const serving = await serveOnTransport({
    logger,
    register(router) {
      registerExecutor(router, service, new ServerRuntime({ logger }));
    },
  });
  served = serving.served;
  const { transport } = serving;
  // No grace period for a reconnect: a driver holds one connection to its executor from
  // launchExecutor on (reattachPlugin's health check and GRPCStdio stream share it, and connect's
  // session manager only replaces a connection that is idle or broken, never one with that stream
  // open), and nothing reconnects before Launch; only its death (or close()) ends that connection.
  const unused = () => transport.hostConnections === 0 && !transport.signal.aborted;
  const exitIfUnused = (why: string) => {
    if (!unused()) return;
    void service.retireIfUnused(unused).then((retired) => {
      if (!retired) return;
      logger.info("exiting: the host went away before any task was launched in this executor", { reason: why });
      void served?.shutdown(why);
    });
  };
  transport.onHostGone(() => exitIfUnused("host disconnected before any task was launched"));
  const connectTimer = setTimeout(
    () => exitIfUnused("no host connected"),
    // Clamped: setTimeout fires at once for a delay over 2^31-1 ms.
    timerDelayMs(config.hostConnectTimeoutMs ?? DEFAULT_HOST_CONNECT_TIMEOUT_MS),
  );
  connectTimer.unref();
  return served;
}

