// An open TaskStats stream waits for its next interval holding as little as possible: Nomad keeps
// one open per task, and a driver's sample (a whole process tree's usage, say) must not stay
// alive in the stream's suspended frame until the next one replaces it.
import { create } from "@bufbuild/protobuf";
import { TaskStatsRequestSchema } from "@nomadkit/protocol/driver";
import type { HandlerContext } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { createDriverHandlers, defineDriver, type Driver } from "../src/driver/index.js";
import { exposedGc } from "./runtime-helpers.js";

/** A driver whose tasks never exit, with `taskStats` as given. */
function statsDriver(name: string, taskStats: NonNullable<Driver["taskStats"]>) {
  return createDriverHandlers(
    defineDriver({
      name,
      version: "0.0.1",
      fingerprint: () => ({ health: "healthy" }),
      startTask: () => {},
      waitTask: () => new Promise<never>(() => {}),
      stopTask: () => {},
      destroyTask: () => {},
      taskStats,
    }),
  );
}

describe("TaskStats stream", () => {
  it("does not keep the driver's last sample alive while it waits for the next interval", async () => {
    // FinalizationRegistry rather than WeakRef: a WeakRef keeps its target alive until the current
    // job ends, which a test runner's job may not do for a while.
    let made = 0;
    let collected = 0;
    const registry = new FinalizationRegistry<void>(() => void collected++);
    const host = statsDriver("retention", () => {
      const sample = { cpu: { percent: 12.5 }, memory: { rss: 1n << 20n }, byPid: { "1": { cpu: { percent: 12.5 } } } };
      made++;
      registry.register(sample, undefined);
      return sample;
    });
    try {
      await host.driver.startTask!({ task: { id: "t1", name: "t" } } as never, {} as HandlerContext);
      const ac = new AbortController();
      const hc = { signal: ac.signal } as HandlerContext;
      const stream = host.driver.taskStats!(create(TaskStatsRequestSchema, { taskId: "t1", collectionInterval: { seconds: 3600n } }), hc)[Symbol.asyncIterator]();
      const first = await stream.next();
      expect(first.value).toMatchObject({ stats: { id: "t1", aggResourceUsage: { cpu: { percent: 12.5 } } } });
      // Ask for the next sample: the stream now waits an hour for it.
      const second = stream.next();
      await new Promise((r) => setImmediate(r));
      expect(made).toBe(1);
      const gc = exposedGc();
      // Finalization callbacks run as tasks of their own after a collection.
      for (let i = 0; i < 20 && collected === 0; i++) {
        gc();
        await new Promise((r) => setTimeout(r, 10));
      }
      expect(collected).toBe(1);
      ac.abort();
      expect(await second).toMatchObject({ done: true });
    } finally {
      await host.close();
    }
  });

  it("ends cleanly (no error) when the driver's taskStats returns undefined: the task exited", async () => {
    let calls = 0;
    const host = statsDriver("ending", () => (++calls <= 2 ? { cpu: { percent: 1 } } : undefined));
    try {
      await host.driver.startTask!({ task: { id: "t1", name: "t" } } as never, {} as HandlerContext);
      const got: unknown[] = [];
      const hc = { signal: new AbortController().signal } as HandlerContext;
      for await (const r of host.driver.taskStats!(create(TaskStatsRequestSchema, { taskId: "t1", collectionInterval: { nanos: 10_000_000 } }), hc)) got.push(r);
      expect(got).toHaveLength(2);
      expect(calls).toBe(3);
    } finally {
      await host.close();
    }
  });

  it("lets one TaskStats stream per task stay open for many tasks without a listener-leak warning", async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on("warning", onWarning);
    const host = statsDriver("many", () => ({ cpu: { percent: 1 } }));
    const calls: AbortController[] = [];
    try {
      const firsts = [];
      for (let i = 0; i < 20; i++) {
        await host.driver.startTask!({ task: { id: `t${i}`, name: "t" } } as never, {} as HandlerContext);
        const call = new AbortController(); // each call has its own, as over gRPC
        calls.push(call);
        const it = host.driver.taskStats!(create(TaskStatsRequestSchema, { taskId: `t${i}`, collectionInterval: { seconds: 3600n } }), { signal: call.signal } as HandlerContext)[Symbol.asyncIterator]();
        firsts.push(it.next().then(() => it.next())); // the first sample, then waiting for the next
      }
      await new Promise((r) => setTimeout(r, 50)); // warnings are emitted on the next tick
      expect(warnings.map((w) => w.name)).not.toContain("MaxListenersExceededWarning");
      for (const c of calls) c.abort();
      await Promise.allSettled(firsts);
    } finally {
      process.off("warning", onWarning);
      await host.close();
    }
  });
});
