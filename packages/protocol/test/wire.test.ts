// Golden wire vectors. Every hex string below was derived by hand from the field numbers and wire
// types in proto/ (tag = field << 3 | wire type), NOT produced by the code under test, so a change
// to a field number, type or packing in the contracts (or a codegen regression) breaks them.
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  CPUUsage_Fields,
  ExecTaskStreamingRequestSchema,
  ExecTaskStreamingResponseSchema,
  MemoryUsage_Fields,
  NetworkIsolationSpec_NetworkIsolationMode,
  NetworkIsolationSpecSchema,
  TaskStatsSchema,
} from "../src/driver.js";
import { RecoverableErrorSchema } from "../src/structs.js";

const hex = (s: string) => Uint8Array.from(Buffer.from(s.replace(/\s+/g, ""), "hex"));
const toHex = (b: Uint8Array) => Buffer.from(b).toString("hex");

/** Encodes `init` and expects `wire`; decodes `wire` and expects the same message back. */
function golden<D extends DescMessage>(schema: D, init: Parameters<typeof create<D>>[1], wire: string) {
  const msg = create(schema, init);
  expect(toHex(toBinary(schema, msg))).toBe(toHex(hex(wire)));
  const decoded: MessageShape<D> = fromBinary(schema, hex(wire));
  expect(decoded).toEqual(msg);
  return decoded;
}

describe("ExecTaskStreamingRequest", () => {
  it("setup: field 1 {task_id=1, command=2 repeated, tty=3}", () => {
    golden(
      ExecTaskStreamingRequestSchema,
      { setup: { taskId: "t1", command: ["sh", "-c"], tty: true } },
      // 0a 0e: setup, 14 bytes | 0a 02 "t1" | 12 02 "sh" | 12 02 "-c" | 18 01: tty=true
      "0a0e 0a027431 12027368 12022d63 1801",
    );
  });
  it("stdin data and stdin close: field 3 {data=1 bytes, close=2 bool}", () => {
    golden(ExecTaskStreamingRequestSchema, { stdin: { data: new TextEncoder().encode("hi") } }, "1a04 0a026869");
    golden(ExecTaskStreamingRequestSchema, { stdin: { close: true } }, "1a02 1001");
  });
  it("tty_size: field 2 {height=1 int32, width=2 int32}", () => {
    golden(ExecTaskStreamingRequestSchema, { ttySize: { height: 40, width: 50 } }, "1204 0828 1032");
  });
  it("the heartbeat is the empty message: zero bytes", () => {
    const decoded = golden(ExecTaskStreamingRequestSchema, {}, "");
    expect(decoded.setup).toBeUndefined();
    expect(decoded.stdin).toBeUndefined();
    expect(decoded.ttySize).toBeUndefined();
  });
});

describe("ExecTaskStreamingResponse", () => {
  it("stdout chunk: field 1 {data=1}", () => {
    golden(ExecTaskStreamingResponseSchema, { stdout: { data: new TextEncoder().encode("hello") } }, "0a07 0a0568656c6c6f");
  });
  it("stderr close marker: field 2 {close=2}", () => {
    golden(ExecTaskStreamingResponseSchema, { stderr: { close: true } }, "1202 1001");
  });
  it("exited (3) + result (4) {exit_code=1}", () => {
    golden(ExecTaskStreamingResponseSchema, { exited: true, result: { exitCode: 43 } }, "1801 2202 082b");
  });
  it("killed by signal 9: exit_code 137 as a two-byte varint, signal=2", () => {
    golden(ExecTaskStreamingResponseSchema, { exited: true, result: { exitCode: 137, signal: 9 } }, "1801 2205 088901 1009");
  });
});

describe("TaskStats", () => {
  // 0a 01 "t" | 12 02 (timestamp) 08 01 | 1a 1f (agg_resource_usage, 31 bytes):
  //   0a 15 (cpu, 21 bytes): 19 <1200.0 LE double> | 31 <50.0 LE double> | 3a 01 05 (packed [PERCENT])
  //   12 06 (memory): 08 8008 (rss=1024) | 32 01 00 (measured_fields is field 6, packed [RSS])
  const wire =
    "0a0174 12020801 1a1f" +
    "0a15 19 0000000000c09240 31 0000000000004940 3a0105" +
    "1206 088008 320100";
  it("total_ticks (field 3, double) travels even when TOTAL_TICKS is not in measured_fields", () => {
    const decoded = golden(
      TaskStatsSchema,
      {
        id: "t",
        timestamp: { seconds: 1n },
        aggResourceUsage: {
          cpu: { totalTicks: 1200, percent: 50, measuredFields: [CPUUsage_Fields.PERCENT] },
          memory: { rss: 1024n, measuredFields: [MemoryUsage_Fields.RSS] },
        },
      },
      wire,
    );
    expect(decoded.aggResourceUsage?.cpu?.totalTicks).toBe(1200);
    expect(decoded.aggResourceUsage?.cpu?.measuredFields).not.toContain(CPUUsage_Fields.TOTAL_TICKS);
  });
  it("total_ticks round-trips when TOTAL_TICKS is listed too", () => {
    const msg = create(TaskStatsSchema, {
      aggResourceUsage: { cpu: { totalTicks: 1200, measuredFields: [CPUUsage_Fields.TOTAL_TICKS, CPUUsage_Fields.PERCENT] } },
    });
    // 1a 0f: agg | 0a 0d: cpu | 19 <1200.0> | 3a 02 02 05
    expect(toHex(toBinary(TaskStatsSchema, msg))).toBe(toHex(hex("1a0f 0a0d 19 0000000000c09240 3a020205")));
    expect(fromBinary(TaskStatsSchema, toBinary(TaskStatsSchema, msg)).aggResourceUsage?.cpu?.totalTicks).toBe(1200);
  });
  it("MemoryUsage's irregular numbering: usage is 7, swap is 8", () => {
    const msg = create(TaskStatsSchema, { aggResourceUsage: { memory: { usage: 5n, swap: 6n } } });
    // 1a 06: agg | 12 04: memory | 38 05: usage (7<<3) | 40 06: swap (8<<3)
    expect(toHex(toBinary(TaskStatsSchema, msg))).toBe(toHex(hex("1a06 1204 3805 4006")));
  });
});

describe("NetworkIsolationSpec", () => {
  it("mode=1, path=2, labels=3 (map entries), hostsConfig=4", () => {
    golden(
      NetworkIsolationSpecSchema,
      {
        mode: NetworkIsolationSpec_NetworkIsolationMode.GROUP,
        path: "/var/run/netns/a",
        labels: { k: "v" },
        hostsConfig: { hostname: "h", address: "127.0.0.1" },
      },
      "0801" +
        "1210 2f7661722f72756e2f6e65746e732f61" + // "/var/run/netns/a"
        "1a06 0a016b 120176" + // one map entry {key=1 "k", value=2 "v"}
        "220e 0a0168 1209 3132372e302e302e31", // hostsConfig {hostname "h", address "127.0.0.1"}
    );
  });
});

describe("RecoverableError", () => {
  it("recoverable=1 bool", () => {
    golden(RecoverableErrorSchema, { recoverable: true }, "0801");
    golden(RecoverableErrorSchema, { recoverable: false }, "");
  });
});
