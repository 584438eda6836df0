// Resources as a person gives them to a task: cpuset lists read strictly, and Nomad's jobspec
// rules (structs.Resources.Validate, MeetsMinResources) applied with Nomad's reasons.
import { describe, expect, it } from "vitest";
import {
  checkTaskResources,
  formatCpuList,
  parseCpuList,
} from "../src/index.js";

describe("parseCpuList", () => {
  it("reads the cpuset list format, ascending, each CPU once; formatCpuList writes it back", () => {
    expect(parseCpuList("0-1,3")).toEqual([0, 1, 3]);
    expect(parseCpuList(" 5 , 2-3,3\n")).toEqual([2, 3, 5]);
    expect(parseCpuList("\n")).toEqual([]);
    expect(formatCpuList(parseCpuList("3,0-1,2"))).toBe("0-3");
  });

  it("refuses what is not a list, naming the piece (Nomad's idset.Parse would drop it)", () => {
    for (const [text, piece] of [
      ["0-1,x", "x"],
      ["3-1", "3-1"],
      ["1,,2", ""],
      ["-1", "-1"],
      ["0-1:2/4", "0-1:2/4"],
    ])
      expect(() => parseCpuList(text!), text).toThrow(
        new RangeError(
          `${JSON.stringify(piece)} is not a CPU number or a low-high span`,
        ),
      );
    expect(() => parseCpuList("0-99999999")).toThrow(
      new RangeError('"0-99999999": CPU numbers go up to 65535'),
    );
  });
});

describe("checkTaskResources", () => {
  const names = {
    cpuMhz: "--cpu",
    memoryMb: "--memory",
    memoryMaxMb: "--memory-max",
    cores: "--cores",
  };

  it("takes what Nomad takes", () => {
    for (const r of [
      {},
      { cpuMhz: 1, memoryMb: 10 },
      { memoryMb: 64, memoryMaxMb: 64 },
      { memoryMaxMb: -1 },
      { memoryMaxMb: 0 },
      { cores: [0, 1] },
    ])
      expect(() =>
        checkTaskResources(r, { defaultMemoryMb: 300 }),
      ).not.toThrow();
  });

  it("refuses what Nomad refuses, with its reason, naming the option", () => {
    expect(() =>
      checkTaskResources({ cpuMhz: 500, cores: [1] }, { names }),
    ).toThrow(
      `--cpu and --cores: a task asks for one or the other; Nomad refuses both: "Task can only ask for 'cpu' or 'cores' resource, not both."`,
    );
    expect(() =>
      checkTaskResources({ memoryMb: 256, memoryMaxMb: 128 }, { names }),
    ).toThrow(
      `--memory-max 128: below the task's memory, 256 MB (--memory); Nomad refuses it: "MemoryMaxMB value (128) should be larger than MemoryMB value (256)"`,
    );
    expect(() =>
      checkTaskResources({ memoryMaxMb: 128 }, { defaultMemoryMb: 300 }),
    ).toThrow("memoryMaxMb 128: below the task's memory, 300 MB (the default)");
    expect(() => checkTaskResources({ memoryMb: 5 }, { names })).toThrow(
      "--memory 5: must be a whole number of MB, at least 10 (Nomad's minimum)",
    );
    expect(() => checkTaskResources({ cpuMhz: 0 })).toThrow(
      "cpuMhz 0: must be a whole number of MHz, at least 1 (Nomad's minimum)",
    );
    expect(() => checkTaskResources({ memoryMaxMb: -2 })).toThrow(
      "memoryMaxMb -2: must be a whole number of MB (0: none, -1: no hard limit)",
    );
    expect(() => checkTaskResources({ cores: [1.5] })).toThrow(
      "cores: 1.5 is not a CPU number (an integer >= 0)",
    );
  });
});
