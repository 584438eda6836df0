// Starting and stopping what is measured: the reference driver (launchPlugin, as Nomad launches
// it, with one running task), the one-hop nomadkit bench driver, the grpc-js peer and the raw
// HTTP/2 limit server.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { encode } from "@msgpack/msgpack";
import { create, toBinary } from "@bufbuild/protobuf";
import { createTaskDirs, launchPlugin, nomadTaskConfig } from "@nomadkit/client";
import { PluginInfoResponseSchema, PluginType } from "@nomadkit/protocol/base";

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, "../../..");
export const referenceDriverBin = join(repoRoot, "examples/rawexec-driver/bin/nomadkit-rawexec");
export const benchDriverFile = join(here, "../servers/nomadkit-driver.mjs");
/**
 * The task executor the reference driver starts for each task: the launcher `nomadkit bundle`
 * wrote next to its bundle, or, before a bundle exists, @nomadkit/server's own executor entry.
 */
export function referenceExecutor() {
  const launcher = join(repoRoot, "examples/rawexec-driver/dist/plugin/nomadkit-rawexec-executor");
  return existsSync(launcher) ? { path: launcher, what: "the reference driver's bundled executor (dist/plugin/nomadkit-rawexec-executor)" } : { path: undefined, what: "@nomadkit/server's executor entry (no bundle built)" };
}

/**
 * The floor for start-up and idle memory: servers/minimal-plugin.cjs (node:http2 and canned
 * answers, no dependencies), answering PluginInfo with the bytes of a real PluginInfoResponse.
 */
export function minimalPlugin() {
  const info = create(PluginInfoResponseSchema, { type: PluginType.DRIVER, name: "minimal", pluginApiVersions: ["v0.1.0"], pluginVersion: "0.1.0" });
  return { bin: join(here, "../servers/minimal-plugin.cjs"), env: { NOMADKIT_BENCH_PLUGIN_INFO: Buffer.from(toBinary(PluginInfoResponseSchema, info)).toString("hex") } };
}

/** A StartTask config as Nomad sends it: task `name` of job "bench", its directories made under `allocDir`. */
export function benchTask(allocDir, name, taskConfig) {
  const dirs = createTaskDirs(allocDir, name);
  return nomadTaskConfig({
    name,
    dirs,
    jobName: "bench",
    msgpackDriverConfig: encode(taskConfig),
    stdoutPath: join(dirs.logsDir, `${name}.stdout.0`),
    stderrPath: join(dirs.logsDir, `${name}.stderr.0`),
  });
}

/** Launches a driver plugin (go-plugin handshake), configures it and starts one long-running task. */
export async function launchDriver(name, cmd, args, { taskConfig = {}, profileDir, preload = [] } = {}) {
  const plugin = await launchPlugin(cmd, args, { env: profileEnv(profileDir, preload) });
  const allocDir = mkdtempSync(join(tmpdir(), "nk-bench-alloc-"));
  const task = benchTask(allocDir, "bench", taskConfig);
  const taskId = task.id;
  try {
    await plugin.basePlugin.setConfig({ msgpackConfig: encode({}), pluginApiVersion: "v0.1.0" });
    await plugin.driver.init({}).catch(() => {});
    await plugin.driver.startTask({ task });
    const inspect = await plugin.driver.inspectTask({ taskId });
    const executorPid = Number(inspect.driver?.attributes.executor_pid ?? 0);
    return {
      name,
      plugin,
      socket: plugin.address,
      taskId,
      pid: plugin.pid,
      /** The plugin and, for the reference driver, its task's executor. */
      pids: executorPid && executorPid !== plugin.pid ? [plugin.pid, executorPid] : [plugin.pid],
      async stop() {
        await plugin.driver.stopTask({ taskId, timeout: { seconds: 2n, nanos: 0 }, signal: "SIGKILL" }).catch(() => {});
        await plugin.driver.destroyTask({ taskId, force: true }).catch(() => {});
        await plugin.kill();
        rmSync(allocDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await plugin.kill().catch(() => {});
    rmSync(allocDir, { recursive: true, force: true });
    throw err;
  }
}

/**
 * Environment of a served process (inherited by the executors it starts): with `dir`, a preloaded
 * hook writes a V8 CPU profile there on exit (`--cpu-prof` is not allowed in NODE_OPTIONS); then
 * the other `preload` files.
 */
export function profileEnv(dir, preload = []) {
  const files = [...(dir ? [join(here, "cpu-prof-hook.cjs")] : []), ...preload];
  if (files.length === 0) return {};
  return {
    NODE_OPTIONS: [process.env.NODE_OPTIONS ?? "", ...files.map((f) => `--require ${f}`)].join(" ").trim(),
    ...(dir ? { NOMADKIT_BENCH_PROFILE_DIR: dir } : {}),
  };
}

/** Preload of the "reference driver + fixYoungGenerationSize" variant. */
export const fixedYoungGenerationPreload = join(here, "fixed-young-generation.cjs");

/** Preload that reports a process's live heap on SIGUSR2 (TaskStats memory; NOMADKIT_BENCH_HEAP_DIR). */
export const heapProbePreload = join(here, "heap-probe.cjs");

/**
 * Starts one of tools/bench/servers/*.mjs; it prints its socket path on the first line. Targets
 * expose `socket`; every measure opens its own client connection to it.
 */
export async function startServer(name, file, options = {}, { profileDir, preload = [] } = {}) {
  const child = spawn(process.execPath, [join(here, "../servers", file), JSON.stringify(options)], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, ...profileEnv(profileDir, preload) },
  });
  const socket = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const nl = out.indexOf("\n");
      if (nl >= 0) resolve(out.slice(0, nl));
    });
    child.once("exit", (code) => reject(new Error(`${file} exited (${code}) before listening`)));
  });
  return {
    name,
    socket,
    taskId: "bench-task",
    pid: child.pid,
    pids: [child.pid],
    async stop() {
      const gone = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await gone;
    },
  };
}
