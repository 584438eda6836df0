// The code-cache run: the bundled plugin started once as Nomad starts it; its launcher saves what V8
// compiled on the way. Also the bundle's smoke test.
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
