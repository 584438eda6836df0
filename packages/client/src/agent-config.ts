/**
 * The agent settings a Nomad client hands a driver with SetConfig (`nomad_config`), for tools and
 * tests that configure plugins themselves: the port range its plugins and executors may listen on
 * and the node's CPU topology, which drivers turn into the compute behind `total_ticks`.
 */
import { cpus } from "node:os";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { NomadConfigSchema } from "@nomadkit/protocol/base";

/** Inputs of {@link nomadAgentConfig}; every one has Nomad's default. */
export interface NomadAgentConfigOptions {
  /** Lower bound of the plugin port range (Nomad's `client.min_dynamic_port` for plugins: 14000). */
  minPort?: number;
  /** Upper bound of the plugin port range (14512). */
  maxPort?: number;
  /** The operator's `cpu_total_compute` in MHz; 0 (default) for none. */
  overrideTotalComputeMhz?: number;
}

/** What Nomad assumes for a core whose frequency it cannot read (as in many VMs). */
const GUESS_MHZ = 1000;

/**
 * SetConfig's `nomad_config` as a Nomad client sends it: the plugin port range and this machine's
 * cores as the node topology (one socket and NUMA node; a core whose frequency Node cannot read
 * gets a guessed 1000 MHz, as Nomad guesses).
 *
 * @example
 * ```ts
 * import { nomadAgentConfig } from "@nomadkit/client";
 * await plugin.basePlugin.setConfig({ msgpackConfig, pluginApiVersion: "v0.1.0", nomadConfig: nomadAgentConfig() });
 * ```
 */
export function nomadAgentConfig(o: NomadAgentConfigOptions = {}): MessageInitShape<typeof NomadConfigSchema> {
  return {
    driver: {
      ClientMinPort: o.minPort ?? 14000,
      ClientMaxPort: o.maxPort ?? 14512,
      Topology: {
        nodeIds: [0],
        cores: cpus().map((c, i) => {
          const mhz = BigInt(Math.round(c.speed));
          return { socketId: 0, nodeId: 0, coreId: i, baseSpeed: mhz, guessSpeed: mhz > 0n ? 0n : BigInt(GUESS_MHZ) };
        }),
        overrideTotalCompute: BigInt(o.overrideTotalComputeMhz ?? 0),
      },
    },
  };
}

/** The node's total compute in MHz, as {@link nomadAgentConfig} describes it: what PercentTicks divides by. */
export function nodeTotalComputeMhz(o: Pick<NomadAgentConfigOptions, "overrideTotalComputeMhz"> = {}): number {
  if (o.overrideTotalComputeMhz) return o.overrideTotalComputeMhz;
  return cpus().reduce((sum, c) => sum + (c.speed > 0 ? Math.round(c.speed) : GUESS_MHZ), 0);
}
