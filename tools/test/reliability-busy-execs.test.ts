// Exec sessions with bulk output must not starve other calls on the same connection (found in CI:
// cancellation at scale saw new streams refused with ENHANCE_YOUR_CALM). Node's HTTP/2 refuses new
// streams while a session's accounted memory is over `maxSessionMemory` (10 MB by default), and
// response data handed to Node but not yet framed counts: each busy exec session has up to one
// output message (1 MiB) there. A Nomad agent runs `alloc exec` sessions next to the
// TaskStats/InspectTask calls it depends on, so those calls must keep working. Afterwards the
// plugin must still shut down cleanly (exit 0) when asked: it once waited forever for a
// connection that had been closed gracefully and then destroyed.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encode } from "@msgpack/msgpack";
import type { PluginClient } from "@nomadkit/client";
import { descendantsOf, launchRelDriver, until } from "../reliability/helpers.js";
import { RequestQueue } from "@nomadkit/client";

const SESSIONS = 24;
const CALLS = 50;

let plugin: PluginClient;

beforeAll(async () => {
  ({ plugin } = await launchRelDriver());
  await plugin.driver.startTask({ task: { id: "t", msgpackDriverConfig: encode({ command: "none" }) } });
});

afterAll(async () => {
  if (plugin) expect(await plugin.kill()).toEqual({ code: 0, signal: null });
});

describe(`${SESSIONS} exec sessions streaming bulk output`, () => {
  it(`${CALLS} unary calls and a TaskStats stream on the same connection all succeed meanwhile`, async () => {
    let stop = false;
    const bytes: number[] = [];
    const readers = Array.from({ length: SESSIONS }, async (_, i) => {
      const ac = new AbortController();
      const requests = new RequestQueue<object>();
      requests.push({ setup: { taskId: "t", command: ["yes", "bulk output ".repeat(64)], tty: false } });
      bytes[i] = 0;
      try {
        for await (const m of plugin.driver.execTaskStreaming(requests, { signal: ac.signal })) {
          bytes[i]! += m.stdout?.data.length ?? 0;
          if (stop) ac.abort();
        }
      } catch (err) {
        if (!ac.signal.aborted) throw err;
      } finally {
        requests.end();
      }
    });
    const calls = (async () => {
      // Every session is streaming before the calls start.
      await until(`all ${SESSIONS} sessions streaming`, () => bytes.length === SESSIONS && bytes.every((b) => b > 1 << 20), () => bytes);
      for (let i = 0; i < CALLS; i++) {
        const r = await plugin.driver.inspectTask({ taskId: "t" });
        expect(r.task?.id).toBe("t");
      }
      const ac = new AbortController();
      let got = 0;
      for await (const m of plugin.driver.taskStats({ taskId: "t", collectionInterval: { seconds: 0n, nanos: 10_000_000 } }, { signal: ac.signal })) {
        expect(m.stats).toBeDefined();
        if (++got === 3) break;
      }
      expect(got).toBe(3);
    })().finally(() => (stop = true));
    await Promise.all([calls, ...readers]);
    await until("exec children gone", () => descendantsOf(plugin.pid).length === 0, () => descendantsOf(plugin.pid));
  });
});
