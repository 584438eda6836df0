// Fields of the hclog JSON lines a plugin writes to stderr, which go-plugin's host parses: it reads
// @level, @message, @timestamp and @module with unchecked string casts (the last key of a name
// wins), so a field under one of those names with another type would panic the Nomad agent.
import { afterEach, describe, expect, it, vi } from "vitest";
import { createLogger } from "../src/log/index.js";

function capture(): { lines: () => Record<string, unknown>[]; destination: { write(s: string): boolean } } {
  const out: string[] = [];
  return {
    destination: { write: (s: string) => (out.push(s), true) },
    lines: () => out.join("").split("\n").filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

describe("log fields", () => {
  it("never take the names go-plugin reads as hclog's own: @-keys are renamed, their values kept", () => {
    const c = capture();
    const log = createLogger({ name: "drv", level: "debug", destination: c.destination });
    log.warn("hello", { "@level": 3, "@message": { x: 1 }, "@timestamp": 0, task_id: "t1" });
    log.with({ "@module": 7 }).info("bound");
    const [a, b] = c.lines();
    expect(a).toMatchObject({ "@level": "warn", "@message": "hello", "@module": "drv", "_@level": 3, "_@message": { x: 1 }, "_@timestamp": 0, task_id: "t1" });
    expect(typeof a!["@timestamp"]).toBe("string");
    expect(b).toMatchObject({ "@level": "info", "@message": "bound", "@module": "drv", "_@module": 7 });
  });

  it("shows errors and bigints inside arrays and plain objects, not {} (or a throw)", () => {
    const c = capture();
    createLogger({ name: "drv", destination: c.destination }).error("failed", { causes: [new Error("disk full"), { inner: new Error("EIO"), n: 5n }] });
    expect(c.lines()[0]).toMatchObject({ causes: ["disk full", { inner: "EIO", n: "5" }] });
  });
});

describe("log timestamps", () => {
  afterEach(() => vi.restoreAllMocks());

  it("follow the wall clock when it is stepped (NTP at boot, a VM resumed), as hclog's time.Now() does", () => {
    const c = capture();
    const log = createLogger({ name: "drv", destination: c.destination });
    log.info("before");
    const real = Date.now.bind(Date);
    const hour = 3_600_000;
    vi.spyOn(Date, "now").mockImplementation(() => real() + hour);
    log.info("after");
    const [before, after] = c.lines().map((l) => Date.parse(String(l["@timestamp"])));
    // About an hour apart, not the few microseconds between the two calls.
    expect(after! - before!).toBeGreaterThan(hour - 60_000);
    expect(after! - before!).toBeLessThan(hour + 60_000);
  });
});
