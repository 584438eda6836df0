// Calls that overlap as a host other than Nomad's task runner can make them, served over a real
// unix socket: a refused SetConfig beside an accepted one, DestroyTask while StartTask still runs,
// and calls made or in flight once the plugin shuts down.
import { encode } from "@msgpack/msgpack";
import { Code, ConnectError } from "@connectrpc/connect";
import { BasePluginClient, RequestQueue } from "@nomadkit/client";
import type { ExecTaskStreamingRequest } from "@nomadkit/protocol/driver";
import { afterEach, describe, expect, it } from "vitest";
import { spec } from "../src/config/index.js";
import { createUnixSocketTransport } from "@nomadkit/client";
import { deferred, fakeDriver, serveTestDriver, type ServedTestDriver } from "./runtime-helpers.js";

let served: ServedTestDriver | undefined;
afterEach(async () => {
  await served?.close();
  served = undefined;
});

async function codeOf(p: Promise<unknown>): Promise<{ code: Code; message: string }> {
  try {
    await p;
  } catch (err) {
    const e = ConnectError.from(err);
    return { code: e.code, message: e.rawMessage };
  }
  throw new Error("expected the call to fail");
}

describe("overlapping calls", () => {
  it("SetConfigs apply one at a time: a refused one's rollback never undoes another's outcome", async () => {
    const refuse = deferred();
    const seen: string[] = [];
    served = await serveTestDriver(
      fakeDriver("overlap", {
        configSchema: spec.object({ tag: spec.attr("string") }),
        async setConfig(config) {
          const tag = (config as { tag?: string } | undefined)?.tag ?? "";
          seen.push(tag);
          if (tag === "A") await refuse.promise;
          if (tag === "SLOW") await new Promise((r) => setTimeout(r, 300));
          if (tag.startsWith("bad")) throw new Error(`${tag} is refused`);
          if (tag === "A") throw new Error("A is refused");
        },
      }),
    );
    const base = new BasePluginClient(createUnixSocketTransport(served.server.socketPath));
    await base.setConfig({ msgpackConfig: encode({ tag: "GOOD" }) });
    // A (slow, refused), then B (accepted) and bad-C (refused) while A still runs.
    const a = codeOf(base.setConfig({ msgpackConfig: encode({ tag: "A" }) }));
    await new Promise((r) => setTimeout(r, 50));
    const b = base.setConfig({ msgpackConfig: encode({ tag: "B" }) });
    const c = codeOf(base.setConfig({ msgpackConfig: encode({ tag: "bad-C" }) }));
    await new Promise((r) => setTimeout(r, 50));
    expect(seen).toEqual(["", "GOOD", "A"]); // the others wait for A ("": serveTestDriver's own)
    refuse.resolve();
    expect((await a).message).toContain("A is refused");
    await b;
    expect((await c).message).toContain("bad-C is refused");
    expect(seen).toEqual(["", "GOOD", "A", "B", "bad-C"]);
    expect(served.host.context.config).toEqual({ tag: "B" });

    // One whose caller gave up while it waited its turn is not applied when its turn comes.
    const slowAccepted = base.setConfig({ msgpackConfig: encode({ tag: "SLOW" }) });
    await new Promise((r) => setTimeout(r, 20));
    const gaveUp = codeOf(base.setConfig({ msgpackConfig: encode({ tag: "GAVE-UP" }) }, { timeoutMs: 100 }));
    expect((await gaveUp).code).toBe(Code.DeadlineExceeded);
    await slowAccepted;
    await new Promise((r) => setTimeout(r, 50));
    expect(seen).not.toContain("GAVE-UP");
    expect(served.host.context.config).toEqual({ tag: "SLOW" });
    await base.setConfig({ msgpackConfig: encode({ tag: "B" }) });

    // Two refused ones in a row: the last accepted config stays.
    const slow = codeOf(base.setConfig({ msgpackConfig: encode({ tag: "A" }) }));
    const quick = codeOf(base.setConfig({ msgpackConfig: encode({ tag: "bad-D" }) }));
    expect((await slow).message).toContain("A is refused");
    expect((await quick).message).toContain("bad-D is refused");
    expect(served.host.context.config).toEqual({ tag: "B" });
  });

  it("DestroyTask during a StartTask that still runs destroys the started task once the start is done", async () => {
    const startGate = deferred();
    const destroyed: string[] = [];
    served = await serveTestDriver(
      fakeDriver("overlap", {
        startTask: (task) => (task.id === "slow" ? startGate.promise : undefined),
        destroyTask: (id) => void destroyed.push(id),
      }),
    );
    const start = served.driver.startTask({ task: { id: "slow", name: "slow", allocId: "a2" } });
    await new Promise((r) => setTimeout(r, 50));
    const destroy = served.driver.destroyTask({ taskId: "slow", force: true });
    await new Promise((r) => setTimeout(r, 50));
    expect(destroyed).toEqual([]); // waits for the start
    startGate.resolve();
    await start;
    await destroy;
    expect(destroyed).toEqual(["slow"]);
    expect((await codeOf(served.driver.inspectTask({ taskId: "slow" }))).code).toBe(Code.NotFound);
    // And the ID may be started again.
    await served.driver.startTask({ task: { id: "slow", name: "slow", allocId: "a2" } });
  });

  it("a RecoverTask while another of the same task still runs answers as that one does", async () => {
    const gate = deferred();
    served = await serveTestDriver(
      fakeDriver("overlap", {
        async recoverTask() {
          await gate.promise;
          throw new Error("the task is gone");
        },
      }),
    );
    const handle = { version: 1, config: { id: "r1", name: "r1", allocId: "a4" } };
    const first = codeOf(served.driver.recoverTask({ taskId: "r1", handle }));
    await new Promise((r) => setTimeout(r, 50));
    const second = codeOf(served.driver.recoverTask({ taskId: "r1", handle }));
    await new Promise((r) => setTimeout(r, 50));
    gate.resolve();
    expect((await first).message).toContain("the task is gone");
    expect((await second).message).toContain("the task is gone"); // was OK: a task nobody recovered
  });

  it("a TaskStats stream whose task is destroyed ends cleanly", async () => {
    served = await serveTestDriver(fakeDriver("overlap", { taskStats: () => ({ cpu: { percent: 1 } }) }));
    const samples: unknown[] = [];
    const stream = (async () => {
      for await (const m of served!.driver.taskStats({ taskId: "t1", collectionInterval: { nanos: 20_000_000 } })) samples.push(m);
    })();
    while (samples.length === 0) await new Promise((r) => setTimeout(r, 10));
    await served.driver.destroyTask({ taskId: "t1", force: true });
    await stream; // OK, not NotFound
    expect(samples.length).toBeGreaterThan(0);
  });

  it("once the plugin shuts down, calls on tasks are refused with Unavailable; the streams end", async () => {
    const started: string[] = [];
    served = await serveTestDriver(
      fakeDriver("overlap", {
        startTask: (task) => void started.push(task.id),
        // As a driver whose shutdown let go of its tasks.
        taskStats: () => {
          throw new ConnectError("task not found", Code.NotFound);
        },
      }),
    );
    await served.driver.shutdown({});
    for (const call of [
      served.driver.startTask({ task: { id: "late", name: "late", allocId: "a3" } }),
      served.driver.inspectTask({ taskId: "t1" }),
      served.driver.stopTask({ taskId: "t1" }),
      served.driver.destroyTask({ taskId: "t1", force: true }),
      served.driver.waitTask({ taskId: "t1" }),
    ]) {
      expect(await codeOf(call)).toEqual({ code: Code.Unavailable, message: "plugin shutting down" });
    }
    expect(started).toEqual(["t1"]);
    // Streams opened now end at once, OK (Nomad reopens a stream that ended; NotFound would log an ERROR).
    const fp = [];
    for await (const m of served.driver.fingerprint({})) fp.push(m);
    expect(fp).toEqual([]);
    const stats = [];
    for await (const m of served.driver.taskStats({ taskId: "t1" })) stats.push(m);
    expect(stats).toEqual([]);
  });

  it("an exec in flight when the plugin shuts down fails with Unavailable, not what the teardown did to it", async () => {
    const running = deferred();
    served = await serveTestDriver(
      fakeDriver("overlap", {
        async execTaskStreaming(session, ctx) {
          running.resolve();
          // What a driver's executor connection does when its shutdown closes it.
          await new Promise<void>((_, reject) =>
            ctx.lifetime.addEventListener("abort", () => reject(new ConnectError("the connection to the plugin was closed on this side", Code.Canceled)), { once: true }),
          );
          return { exitCode: 0 };
        },
      }),
    );
    const q = new RequestQueue<ExecTaskStreamingRequest>();
    q.push({ setup: { taskId: "t1", command: ["sh"], tty: false } } as ExecTaskStreamingRequest);
    const exec = (async () => {
      for await (const _ of served!.driver.execTaskStreaming(q)) void _;
    })();
    await running.promise;
    await served.host.close();
    expect(await codeOf(exec)).toEqual({ code: Code.Unavailable, message: "plugin shutting down" });
    q.end();
  });
});
