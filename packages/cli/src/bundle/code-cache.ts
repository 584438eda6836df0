// The code-cache run: the bundled plugin started once as Nomad starts it; its launcher saves what V8
// compiled on the way. Also the bundle's smoke test.
import { createRequire } from "node:module";
import { CliError } from "../errors.js";
import { CODE_CACHE_ENV } from "./launcher.js";

/**
 * Launches the bundled plugin the way Nomad does (handshake, health check), asks PluginInfo and shuts
 * it down (GRPCController.Shutdown); the launcher saves V8's code cache as the process exits.
 */
export async function trainCodeCache(
  launcher: string,
  startTimeoutMs = 60_000,
): Promise<{ name: string; version: string }> {
  const { launchPlugin } = await import("@nomadkit/client");
  let plugin;
  try {
    // launchPlugin's error carries the plugin's last stderr lines.
    plugin = await launchPlugin(process.execPath, [launcher], {
      env: { [CODE_CACHE_ENV]: "write" },
      startTimeoutMs,
    });
  } catch (err) {
    throw new CliError(
      `bundle: the bundled plugin did not start as Nomad starts it: ${(err as Error).message}\n(--no-code-cache skips this run)`,
    );
  }
  let info;
  try {
    info = await plugin.basePlugin.pluginInfo({});
  } catch (err) {
    await plugin.kill().catch(() => undefined);
    throw new CliError(
      `bundle: the bundled plugin failed PluginInfo: ${(err as Error).message}`,
    );
  }
  const exit = await plugin.kill();
  if (exit.code !== 0) {
    throw new CliError(
      `bundle: the bundled plugin exited with ${exit.code ?? exit.signal} on shutdown`,
    );
  }
  return { name: info.name, version: info.pluginVersion };
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
  }>;
}

/**
 * The task executor's code-cache run: started the way the plugin starts it (`launchExecutor` of
 * the `@nomadkit/server` the plugin was bundled with, resolved from `from`), it runs one short
 * process (Launch, Wait) and shuts down (Shutdown); its launcher saves V8's code cache as it exits.
 */
export async function trainExecutorCodeCache(
  launcher: string,
  from: string,
  startTimeoutMs = 60_000,
): Promise<void> {
  let server: ExecutorModule;
  try {
    // Its CommonJS build: require() works the same from this package's ES module and CommonJS builds.
    server = createRequire(from)("@nomadkit/server/executor") as ExecutorModule;
  } catch (err) {
    throw new CliError(
      `bundle: cannot load @nomadkit/server/executor from ${from} to start the bundled executor: ${(err as Error).message}\n(--no-code-cache skips this run)`,
    );
  }
  let executor;
  try {
    executor = await server.launchExecutor({
      executorPath: launcher,
      env: { [CODE_CACHE_ENV]: "write" },
      startTimeoutMs,
    });
  } catch (err) {
    throw new CliError(
      `bundle: the bundled executor did not start as launchExecutor starts it: ${(err as Error).message}\n(--no-code-cache skips this run)`,
    );
  }
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
