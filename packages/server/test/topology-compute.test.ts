// Host compute from Nomad's client topology, as Nomad's own numalib adds it up: total_ticks of every
// TaskStats sample depend on it, and must match the CPU numbers Nomad shows next to them.
import { describe, expect, it } from "vitest";
import { computeFromTopology } from "../src/driver/stats.js";

const cores = (speeds: { baseSpeed?: bigint; maxSpeed?: bigint; guessSpeed?: bigint }) =>
  [0, 1, 2, 3].map((coreId) => ({ coreId, baseSpeed: 0n, maxSpeed: 0n, guessSpeed: 0n, ...speeds }));

describe("computeFromTopology", () => {
  it("adds each core's speed as Nomad's Core.MHz does: base, else max, else the guess", () => {
    expect(computeFromTopology({ cores: cores({ baseSpeed: 2000n, maxSpeed: 3700n, guessSpeed: 1800n }) })).toMatchObject({ totalComputeMhz: 8000, numCores: 4 });
    // No base frequency but a max one (acpi-cpufreq, many cloud VMs): Linux fills the guess on every core too.
    expect(computeFromTopology({ cores: cores({ maxSpeed: 3700n, guessSpeed: 1800n }) })).toMatchObject({ totalComputeMhz: 14800 });
    expect(computeFromTopology({ cores: cores({ guessSpeed: 1800n }) })).toMatchObject({ totalComputeMhz: 7200 });
  });

  it("takes override_total_compute when set, and nothing from a topology without speeds", () => {
    expect(computeFromTopology({ cores: cores({ baseSpeed: 2000n }), overrideTotalCompute: 5000n })).toMatchObject({ totalComputeMhz: 5000, numCores: 4 });
    expect(computeFromTopology({ cores: cores({}) })).toBeUndefined();
    expect(computeFromTopology({ cores: [] })).toBeUndefined();
  });
});
