import { create } from "@bufbuild/protobuf";
import {
  MemoryUsage_Fields,
  TaskStatsResponseSchema,
} from "@nomadkit/protocol/driver";
import { describe, expect, it } from "vitest";
import { formatStats } from "../src/commands/stats.js";

const sample = (measuredFields: MemoryUsage_Fields[]) =>
  create(TaskStatsResponseSchema, {
    stats: {
      id: "t1",
      aggResourceUsage: {
        cpu: { percent: 12.5, totalTicks: 100 },
        memory: { rss: 3n * 1024n * 1024n, measuredFields },
      },
    },
  });

describe("formatStats (nomadkit stats' line)", () => {
  it("leaves out memory fields the driver does not list as measured", () => {
    // The SDK's process sampler lists RSS and SWAP: usage is an unset 0 on the wire, not a reading.
    const line = formatStats(
      sample([MemoryUsage_Fields.RSS, MemoryUsage_Fields.SWAP]),
    );
    expect(line).toBe("cpu 12.5%  100 MHz  rss 3.0 MiB");
  });

  it("shows usage when the driver measures it (cgroup readings)", () => {
    const res = sample([MemoryUsage_Fields.USAGE]);
    res.stats!.aggResourceUsage!.memory!.usage = 5n * 1024n * 1024n;
    expect(formatStats(res)).toBe("cpu 12.5%  100 MHz  usage 5.0 MiB");
  });

  it("shows RSS when nothing is listed, as Nomad does", () => {
    expect(formatStats(sample([]))).toBe("cpu 12.5%  100 MHz  rss 3.0 MiB");
  });
});
