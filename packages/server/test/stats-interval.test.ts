// A driver learns each TaskStats stream's collection_interval, so its samples can cover the whole
// interval (Nomad's drivers open their executor's Stats stream with it).
import { create } from "@bufbuild/protobuf";
import { TaskStatsRequestSchema } from "@nomadkit/protocol/driver";
import type { HandlerContext } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { createDriverHandlers, type TaskStatsContext } from "../src/driver/index.js";
import { fakeDriver } from "./runtime-helpers.js";

describe("taskStats context", () => {
  it("carries the stream's collection_interval and the same signal on every call of a stream", async () => {
    const calls: { intervalMs: number; signal: AbortSignal; hasLogger: boolean }[] = [];
    const host = createDriverHandlers(
      fakeDriver("interval", {
        waitTask: () => new Promise<never>(() => {}),
        taskStats: (_taskId: string, ctx: TaskStatsContext) => {
          calls.push({ intervalMs: ctx.intervalMs, signal: ctx.signal, hasLogger: typeof ctx.logger.info === "function" });
          return { cpu: { percent: 1 }, memory: { rss: 1n } };
        },
      }),
    );
    try {
      await host.driver.startTask!({ task: { id: "t1", name: "t" } } as never, {} as HandlerContext);
      const take = async (interval: { seconds?: bigint; nanos?: number } | undefined, n: number) => {
        const ac = new AbortController();
        const req = create(TaskStatsRequestSchema, { taskId: "t1", ...(interval ? { collectionInterval: interval } : {}) });
        const stream = host.driver.taskStats!(req, { signal: ac.signal } as HandlerContext)[Symbol.asyncIterator]();
        for (let i = 0; i < n; i++) await stream.next();
        ac.abort();
        return ac.signal;
      };
      const fast = await take({ nanos: 20_000_000 }, 2);
      await take(undefined, 1);
      await take({ seconds: 1n, nanos: 500_000_000 }, 1);
      expect(calls.map((c) => c.intervalMs)).toEqual([20, 20, 1000, 1500]);
      expect(calls[0]!.signal).toBe(calls[1]!.signal);
      expect(calls[0]!.signal).toBe(fast);
      expect(calls[1]!.signal).not.toBe(calls[2]!.signal);
      expect(calls.every((c) => c.hasLogger)).toBe(true);
    } finally {
      await host.close();
    }
  });
});
