// info, fingerprint, capabilities: one-shot questions Nomad asks a plugin.
import { toJson } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { nomadAgentConfig } from "@nomadkit/client";
import {
  ConfigSchemaResponseSchema,
  PluginInfoResponseSchema,
  PluginType,
} from "@nomadkit/protocol/base";
import {
  CapabilitiesResponseSchema,
  FingerprintResponseSchema,
  FingerprintResponse_HealthState,
  TaskConfigSchemaResponseSchema,
} from "@nomadkit/protocol/driver";
import { CliError } from "../errors.js";
import {
  encodeOperatorConfig,
  readJsonOption,
  type JsonOption,
} from "../files.js";
import {
  orRpcError,
  positiveMs,
  rpcError,
  withPlugin,
  type Connected,
  type GlobalOptions,
} from "../plugin.js";
import { print } from "../output.js";

/** Nomad's plugin API version, sent with SetConfig. */
export const PLUGIN_API_VERSION = "v0.1.0";

export async function infoCommand(
  plugin: string,
  opts: { json?: boolean },
  g: GlobalOptions,
): Promise<void> {
  await withPlugin(plugin, g, async (c) => {
    const { plugin: p, call } = c;
    const info = await orRpcError(c, "BasePlugin.PluginInfo", p.basePlugin.pluginInfo({}, call));
    const schema = await orRpcError(c, "BasePlugin.ConfigSchema", p.basePlugin.configSchema({}, call));
    const out: Record<string, unknown> = {
      ...(toJson(PluginInfoResponseSchema, info) as object),
      configSchema:
        (toJson(ConfigSchemaResponseSchema, schema) as { spec?: unknown })
          .spec ?? null,
    };
    if (info.type === PluginType.DRIVER) {
      try {
        const ts = await p.driver.taskConfigSchema({}, call);
        out.taskConfigSchema =
          (toJson(TaskConfigSchemaResponseSchema, ts) as { spec?: unknown })
            .spec ?? null;
      } catch (e) {
        if (!(e instanceof ConnectError && e.code === Code.Unimplemented))
          throw await rpcError(c, "Driver.TaskConfigSchema", e);
      }
    }
    print(out, !!opts.json);
  });
}

export async function capabilitiesCommand(
  plugin: string,
  opts: { json?: boolean },
  g: GlobalOptions,
): Promise<void> {
  await withPlugin(plugin, g, async (c) => {
    const { plugin: p, call } = c;
    const res = await orRpcError(c, "Driver.Capabilities", p.driver.capabilities({}, call));
    const json = toJson(CapabilitiesResponseSchema, res, {
      alwaysEmitImplicit: true,
    }) as { capabilities?: unknown };
    print(json.capabilities ?? {}, !!opts.json);
  });
}

/**
 * SetConfig (with `--config`, read by {@link readJsonOption}, or no config block) then Init, as
 * Nomad does before driver calls. Either way the config is shaped by the plugin's ConfigSchema as
 * Nomad's decoder shapes it (an absent block is an empty one, whose defaults apply).
 */
export async function configure(
  c: Connected,
  config: JsonOption | undefined,
): Promise<void> {
  const { spec } = await orRpcError(c, "BasePlugin.ConfigSchema", c.plugin.basePlugin.configSchema({}, c.call));
  const msgpack = await encodeOperatorConfig(config?.source ?? "the plugin config (no --config given)", spec, config?.value ?? {});
  try {
    await c.plugin.basePlugin.setConfig(
      { msgpackConfig: msgpack, pluginApiVersion: PLUGIN_API_VERSION, nomadConfig: nomadAgentConfig() },
      c.call,
    );
  } catch (e) {
    throw await rpcError(c, "BasePlugin.SetConfig", e, config && `(config from ${config.source})`);
  }
  try {
    await c.plugin.driver.init({}, c.call);
  } catch (e) {
    // Nomad counts Unimplemented as success.
    if (!(e instanceof ConnectError && e.code === Code.Unimplemented))
      throw await rpcError(c, "Driver.Init", e);
  }
}

/**
 * How long `fingerprint` waits for a driver's first fingerprint unless --call-timeout says: Nomad's
 * (client/pluginmanager/drivermanager: batchFirstFingerprintsTimeout), after which an agent goes on
 * without the driver.
 */
const FIRST_FINGERPRINT_TIMEOUT_MS = 50_000;

export async function fingerprintCommand(
  plugin: string,
  opts: { json?: boolean; watch?: boolean; config?: string },
  g: GlobalOptions,
): Promise<void> {
  // Read before starting the plugin, so a bad --config fails first.
  const config = opts.config === undefined ? undefined : readJsonOption("--config", opts.config);
  await withPlugin(plugin, g, async (c) => {
    await configure(c, config);
    const stop = new AbortController();
    // Ctrl-C ends the watch; the command then exits 130 (128 + SIGINT), as `nomadkit --help` says.
    const onSigint = () => {
      process.exitCode = 130;
      stop.abort();
    };
    process.once("SIGINT", onSigint);
    let seen = 0;
    // A driver that never sends its first fingerprint would hold the command for good.
    const firstWithinMs = positiveMs("--call-timeout", g.callTimeout) ?? FIRST_FINGERPRINT_TIMEOUT_MS;
    let noFirst = false;
    const firstTimer = setTimeout(() => {
      noFirst = true;
      stop.abort();
    }, firstWithinMs);
    const noFirstError = () =>
      new CliError(
        `plugin ${c.name}: Driver.Fingerprint sent no fingerprint within ${firstWithinMs} ms (Nomad waits ${FIRST_FINGERPRINT_TIMEOUT_MS / 1000} s for a driver's first; --call-timeout sets this bound)`,
      );
    try {
      for await (const res of c.plugin.driver.fingerprint(
        {},
        { signal: stop.signal },
      )) {
        clearTimeout(firstTimer);
        seen++;
        const fp = toJson(FingerprintResponseSchema, res) as { health?: string };
        // UNDETECTED is the enum's zero value, which proto3 JSON leaves out: a fingerprint must say its health.
        fp.health ??= FingerprintResponse_HealthState[res.health];
        print(fp, !!opts.json);
        if (!opts.watch) return;
        if (!opts.json) process.stdout.write("\n");
      }
      // A driver's Fingerprint stream stays open; Nomad would take the driver for gone. With
      // --watch, an end after some fingerprints is that too, not the end of the watch.
      if (noFirst) throw noFirstError();
      if (seen === 0 && !stop.signal.aborted)
        throw new CliError(`plugin ${c.name}: Driver.Fingerprint ended without sending a fingerprint`);
      if (!stop.signal.aborted)
        throw new CliError(
          `plugin ${c.name}: Driver.Fingerprint ended after ${seen} fingerprint(s); a driver keeps the stream open (Nomad takes its end for a lost driver)`,
        );
    } catch (e) {
      if (noFirst) throw noFirstError();
      if (stop.signal.aborted) return;
      throw await rpcError(c, "Driver.Fingerprint", e);
    } finally {
      clearTimeout(firstTimer);
      process.off("SIGINT", onSigint);
      stop.abort();
    }
  });
}
