// The load fast path's logger (log/lines.ts) writes its hclog lines without pino. go-plugin's host
// reads them as it reads the plugin's own: the same calls must give the same JSON as createLogger's.
import { describe, expect, it } from "vitest";
import { createLogger } from "../src/log/index.js";
import type { Logger } from "../src/log/hclog.js";
import { createLineLogger } from "../src/log/lines.js";

function collect(): { out: string[]; write: (s: string) => boolean } {
  const out: string[] = [];
  return { out, write: (s: string) => (out.push(s), true) };
}

/** Parsed lines, with the timestamp checked and taken out (it differs between two calls). */
function lines(out: string[]): Record<string, unknown>[] {
  const text = out.join("");
  expect(text.endsWith("\n")).toBe(true);
  return text
    .split("\n")
    .filter(Boolean)
    .map((l) => {
      const o = JSON.parse(l) as Record<string, unknown>;
      expect(o["@timestamp"]).toMatch(
        /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$/,
      );
      delete o["@timestamp"];
      return o;
    });
}

/** Every shape of call the Logger interface takes. */
function exercise(log: Logger): void {
  log.trace("at trace");
  log.debug("plugin started", {
    network: "unix",
    address: "/tmp/plugin-x/plugin.sock",
    tls: false,
  });
  log.info({ rpc: "PluginInfo", ms: 1.5 }, "pino order");
  log.warn(new Error("as the first argument"));
  log.error("with an error", new Error("disk full"));
  log.error(
    {
      err: new Error("nested"),
      n: 5n,
      list: [new Error("EIO"), 1],
      skipped: undefined,
    },
    "values made JSON-safe",
  );
  log.info("", { empty: "message" });
  log.info({ only: "fields" });
  log.warn("renamed", { "@level": 3, "@module": "m", task_id: "t1" });
  const sub = log.named("stdio").with({ task_id: "t1", "@message": 1 });
  sub.info("bound");
  sub.named("inner").with({ alloc: "a1" }).debug("deeper", { task_id: "t2" });
}

describe("the load fast path's line logger", () => {
  it("writes what createLogger writes, line for line, for every kind of call", () => {
    for (const [name, level] of [
      ["", "trace"],
      ["drv", "info"],
    ] as const) {
      const viaPino = collect();
      const viaLines = collect();
      exercise(createLogger({ name, level, destination: viaPino }));
      exercise(createLineLogger({ name, level, write: viaLines.write }));
      const expected = lines(viaPino.out);
      expect(expected.length).toBeGreaterThan(5);
      expect(lines(viaLines.out)).toEqual(expected);
    }
  });

  it("has createLogger's levels and level checks", () => {
    for (const level of ["trace", "debug", "info", "warn", "error"] as const) {
      const a = createLogger({ level, destination: collect() });
      const b = createLineLogger({ level, write: () => {} });
      expect(b.level).toBe(a.level);
      for (const l of ["trace", "debug", "info", "warn", "error"] as const)
        expect(b.isLevelEnabled(l), `${level} ${l}`).toBe(a.isLevelEnabled(l));
    }
  });

  it("still writes the line when its fields cannot be serialised, saying why", () => {
    const c = collect();
    const cycle: Record<string, unknown> = { a: 1 };
    cycle.self = cycle;
    createLineLogger({ name: "drv", write: c.write }).warn(
      "cannot listen on a unix socket",
      { cycle },
    );
    const [line] = lines(c.out);
    expect(line).toMatchObject({
      "@level": "warn",
      "@module": "drv",
      "@message": "cannot listen on a unix socket",
    });
    expect(line!.log_error).toMatch(/^fields not written: .*circular/i);
    // Bound with `with`, the same: the line, never a throw from the log call.
    const bound = collect();
    createLineLogger({ name: "drv", write: bound.write }).with({ cycle }).named("sub").error("bound");
    const [boundLine] = lines(bound.out);
    expect(boundLine).toMatchObject({ "@level": "error", "@module": "drv.sub", "@message": "bound" });
    expect(boundLine!.log_error).toMatch(/^fields not written: .*circular/i);
  });

  it("never throws for fields whose reading throws (a getter), in either logger, called or bound", () => {
    const hostile = { get secret(): string { throw new Error("no peeking"); } };
    for (const make of [
      (write: (s: string) => boolean) => createLineLogger({ name: "drv", write }),
      (write: (s: string) => boolean) => createLogger({ name: "drv", destination: { write } }),
    ]) {
      const c = collect();
      const log = make(c.write);
      log.info("with a hostile field", { task_id: "t1", hostile });
      log.with({ hostile }).warn("bound");
      const [called, bound] = lines(c.out);
      expect(called).toMatchObject({ "@level": "info", "@message": "with a hostile field", log_error: "fields not written: no peeking" });
      expect(bound).toMatchObject({ "@level": "warn", "@message": "bound", log_error: "fields not written: no peeking" });
    }
  });
});
