// What a plain JS driver gets wrong about the shapes it returns is answered naming the method and
// field, not passed on as a wrong value (an exit 0 for a failed task) or as a low-level message.
import { create } from "@bufbuild/protobuf";
import { Code, type HandlerContext } from "@connectrpc/connect";
import {
  FingerprintRequestSchema,
  FingerprintResponse_HealthState,
  InspectTaskRequestSchema,
  TaskStatsRequestSchema,
  WaitTaskRequestSchema,
} from "@nomadkit/protocol/driver";
import { describe, expect, it } from "vitest";
import { spec } from "../src/config/index.js";
import { createDriverHandlers, defineDriver, serveDriver, type Driver } from "../src/driver/index.js";
import { createLogger } from "../src/log/index.js";

const hc = () => ({ signal: new AbortController().signal }) as HandlerContext;

/** A driver with every required method and nothing else. */
const complete = {
  name: "shapes",
  version: "0.0.1",
  startTask: () => {},
  waitTask: () => ({ exitCode: 0 }),
  stopTask: () => {},
  destroyTask: () => {},
};

function host(overrides: Partial<Driver<unknown, unknown>>, logLines?: string[]) {
  const logger = logLines && createLogger({ name: "shapes", level: "warn", destination: { write: (l: string) => (logLines.push(l), true) } });
  return createDriverHandlers(
    defineDriver({ ...complete, ...overrides } as Driver<unknown, unknown>),
    logger ? { logger } : {},
  );
}

describe("driver results of the wrong shape", () => {
  it("a waitTask that does not resolve a TaskExit is an error naming waitTask, not exit 0", async () => {
    for (const [value, shown] of [
      [5, "5"],
      [{ code: 5 }, '{"code":5}'],
      [undefined, "undefined (a missing return?)"],
      [{ exitCode: "1" }, '{"exitCode":"1"}'],
    ] as const) {
      const h = host({ waitTask: () => value as never });
      await h.driver.startTask!({ task: { id: "t", name: "t" } } as never, hc());
      await expect(h.driver.waitTask!(create(WaitTaskRequestSchema, { taskId: "t" }), hc())).rejects.toMatchObject({
        code: Code.Internal,
        rawMessage: `waitTask: expected a TaskExit ({ exitCode: <integer>, signal?, oomKilled?, err? }), got ${shown}`,
      });
      await h.close();
    }
  });

  it("a waitTask that returns a TaskExit itself, not a Promise, is answered with it", async () => {
    const h = host({ waitTask: () => ({ exitCode: 3, signal: "SIGTERM" }) });
    await h.driver.startTask!({ task: { id: "t", name: "t" } } as never, hc());
    const r = await h.driver.waitTask!(create(WaitTaskRequestSchema, { taskId: "t" }), hc());
    expect(r.result).toMatchObject({ exitCode: 3, signal: 15 });
    await h.close();
  });

  it("an inspectTask date that is not a Date names the field", async () => {
    const h = host({ inspectTask: () => ({ startedAt: "2026-01-01T00:00:00Z" as never }) });
    await h.driver.startTask!({ task: { id: "t", name: "t" } } as never, hc());
    await expect(h.driver.inspectTask!(create(InspectTaskRequestSchema, { taskId: "t" }), hc())).rejects.toMatchObject({
      code: Code.Internal,
      rawMessage: 'inspectTask: startedAt: expected a valid Date, got "2026-01-01T00:00:00Z"',
    });
    await h.close();
  });

  it("a taskStats sample of the wrong shape names taskStats", async () => {
    const h = host({ taskStats: () => ({ cpu: 5 }) as never });
    await h.driver.startTask!({ task: { id: "t", name: "t" } } as never, hc());
    const it = h.driver.taskStats!(create(TaskStatsRequestSchema, { taskId: "t" }), hc())[Symbol.asyncIterator]();
    await expect(it.next()).rejects.toMatchObject({ code: Code.Internal, rawMessage: expect.stringMatching(/^taskStats: a sample of the wrong shape \(.*\): \{"cpu":5\}$/) });
    await h.close();
  });

  it("null in an inspectTask field is taken as none, as undefined is", async () => {
    const h = host({ inspectTask: () => ({ state: "running", completedAt: null, exit: null, startedAt: null }) as never });
    await h.driver.startTask!({ task: { id: "t", name: "t" } } as never, hc());
    const r = await h.driver.inspectTask!(create(InspectTaskRequestSchema, { taskId: "t" }), hc());
    expect(r.task?.state).toBe(1);
    await h.close();
  });

  it("capabilities that cannot be encoded fail at startup when fixed, and at the call when computed", async () => {
    expect(() => host({ capabilities: { fsIsolation: "chroot" as never } })).toThrow(/^capabilities: .*DriverCapabilities_FSIsolation\.CHROOT/);
    const h = host({ capabilities: () => ({ fsIsolation: "chroot" as never }) });
    expect(() => h.driver.capabilities!({} as never, hc())).toThrow(expect.objectContaining({ code: Code.Internal, rawMessage: expect.stringMatching(/^capabilities: /) }));
    await h.close();
  });
});

describe("schemas a plain JS driver gets wrong", () => {
  it("a plain object where a spec belongs, and an attribute both required and defaulted, are refused naming them", () => {
    expect(() => host({ taskConfigSchema: { command: "string" } as never })).toThrow(
      'driver.taskConfigSchema must be built with spec (spec.object({ ... })), got {"command":"string"}',
    );
    // Nomad would call DestroyNetwork (Unimplemented) at each allocation's end: every namespace leaked.
    expect(() => host({ createNetwork: () => ({ spec: undefined, created: true }) } as never)).toThrow(/^driver\.createNetwork needs driver\.destroyNetwork too/);
    // And the other way round: Nomad never calls a destroyNetwork whose driver did not create the network.
    expect(() => host({ destroyNetwork: () => {} } as never)).toThrow(/^driver\.destroyNetwork needs driver\.createNetwork too/);
    // TypeScript refuses it; in JS the default could never apply (the required check comes first).
    expect(() => spec.attr("string", { required: true, default: "x" } as never)).toThrow(
      'attr("string"): required and default exclude each other (a default makes it optional)',
    );
  });
});

describe("methods a plain JS driver leaves out", () => {
  it("a required method missing (or not a function) fails defineDriver, createDriverHandlers and serveDriver at once, naming it", async () => {
    for (const method of ["startTask", "waitTask", "stopTask", "destroyTask"] as const) {
      const { [method]: _left, ...rest } = complete;
      const message = `driver.${method} is required: Nomad calls it for every task; got undefined`;
      // Before: each started fine, and only Nomad's first call of the method failed.
      expect(() => defineDriver(rest as never)).toThrow(message);
      expect(() => createDriverHandlers(rest as never)).toThrow(message);
      await expect(serveDriver(rest as never)).rejects.toThrow(message);
    }
    expect(() => defineDriver({ ...complete, waitTask: { exitCode: 0 } } as never)).toThrow(
      'driver.waitTask is required: Nomad calls it for every task; got {"exitCode":0}',
    );
  });
  it("optional methods stay optional, but one given must be a function", () => {
    expect(() => defineDriver(complete)).not.toThrow();
    expect(() => defineDriver({ ...complete, signalTask: undefined })).not.toThrow();
    expect(() => defineDriver({ ...complete, signalTask: "SIGHUP" } as never)).toThrow('driver.signalTask must be a function when given; got "SIGHUP"');
    expect(() => createDriverHandlers({ ...complete, recoverTask: true } as never)).toThrow("driver.recoverTask must be a function when given; got true");
  });
});

describe("fingerprint attributes", () => {
  async function first(attributes: Record<string, unknown>, log?: string[]) {
    const h = host({ fingerprint: () => ({ health: "healthy", attributes: attributes as never }) }, log);
    const ac = new AbortController();
    const it = h.driver.fingerprint!(create(FingerprintRequestSchema), { signal: ac.signal } as HandlerContext)[Symbol.asyncIterator]();
    const r = (await it.next()).value!;
    ac.abort();
    await h.close();
    return r;
  }

  it("leave out undefined and null values, as a Go driver leaves out what it does not know", async () => {
    const r = await first({ "driver.shapes.version": undefined, "driver.shapes.x": null, "driver.shapes.ok": "yes" });
    expect(r.health).toBe(FingerprintResponse_HealthState.HEALTHY);
    expect(Object.keys(r.attributes)).toEqual(["driver.shapes.ok"]);
  });

  it("name the attribute whose value is not one (it was taken for `{ bool: false }`), and the plugin logs it once", async () => {
    const log: string[] = [];
    const r = await first({ "driver.shapes.obj": { foo: 1 } }, log);
    expect(r.health).toBe(FingerprintResponse_HealthState.UNHEALTHY);
    expect(r.healthDescription).toBe(
      'fingerprint failed: fingerprint attribute "driver.shapes.obj": expected a string, boolean, number, bigint or { float | int | string | bool, unit? }, got {"foo":1}',
    );
    expect(log.filter((l) => l.includes("fingerprint failed"))).toHaveLength(1);
  });
});

describe("WaitTask at plugin shutdown", () => {
  it("is answered Unavailable, not with an exit the shutdown itself caused", async () => {
    let release: ((e: { exitCode: number; err: string }) => void) | undefined;
    const h = host({
      waitTask: () => new Promise((r) => (release = r)),
      // A driver that lets go of its tasks at shutdown, which ends their waits with an error exit.
      shutdown: () => release?.({ exitCode: 1, err: "executor connection closed" }),
    });
    await h.driver.startTask!({ task: { id: "t", name: "t" } } as never, hc());
    const wait = h.driver.waitTask!(create(WaitTaskRequestSchema, { taskId: "t" }), hc()).catch((e: unknown) => e);
    await new Promise((r) => setImmediate(r));
    await h.close();
    expect(await wait).toMatchObject({ code: Code.Unavailable, rawMessage: "plugin shutting down" });
  });
});
