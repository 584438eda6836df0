// The TaskEvents fan-out: every open stream gets every event; what the last stream leaves
// undelivered waits for the next one, once.
import { describe, expect, it } from "vitest";
import { TaskEventHub } from "../src/driver/events.js";
import { captureLogger } from "./runtime-helpers.js";

function hub(): TaskEventHub {
  return new TaskEventHub(() => ({ allocId: "a1", name: "web" }), captureLogger());
}

/** Opens a stream and returns its iterator (the stream subscribes on its first `next`). */
async function open(h: TaskEventHub) {
  const it = h.stream()[Symbol.asyncIterator]();
  const first = it.next();
  await new Promise((r) => setImmediate(r));
  // As the server ends a stream whose call is gone: the generator is returned, not read on.
  return { it, first, close: () => it.return(undefined) };
}

describe("TaskEventHub", () => {
  it("keeps events emitted with no stream open for the next stream", async () => {
    const h = hub();
    h.emit({ taskId: "t1", message: "before" });
    const s = await open(h);
    expect((await s.first).value?.message).toBe("before");
    await s.close();
  });

  it("does not repeat events another open stream had when a stream closes", async () => {
    const h = hub();
    const a = await open(h);
    const b = await open(h);
    h.emit({ taskId: "t1", message: "e1" });
    h.emit({ taskId: "t1", message: "e2" });
    // b delivers both; a delivers e1 only and closes with e2 undelivered.
    expect((await b.first).value?.message).toBe("e1");
    expect((await b.it.next()).value?.message).toBe("e2");
    expect((await a.first).value?.message).toBe("e1");
    await a.close();
    await b.close();
    // Nothing was left undelivered by every stream: the next stream starts empty.
    const c = await open(h);
    h.emit({ taskId: "t1", message: "e3" });
    expect((await c.first).value?.message).toBe("e3");
    await c.close();
  });

  it("hands what the last stream left undelivered to the next stream exactly once", async () => {
    const h = hub();
    const a = await open(h);
    const b = await open(h);
    h.emit({ taskId: "t1", message: "e1" });
    h.emit({ taskId: "t1", message: "e2" });
    expect((await a.first).value?.message).toBe("e1");
    expect((await b.first).value?.message).toBe("e1");
    await a.close();
    await b.close();
    const c = await open(h);
    h.emit({ taskId: "t1", message: "e3" });
    const got = [(await c.first).value?.message, (await c.it.next()).value?.message];
    expect(got).toEqual(["e2", "e3"]);
    await c.close();
  });

  it("gives what a closing stream did not deliver to a stream opened after it was emitted (Nomad reopening)", async () => {
    const h = hub();
    const a = await open(h);
    for (const m of ["e1", "e2", "e3"]) h.emit({ taskId: "t1", message: m });
    expect((await a.first).value?.message).toBe("e1");
    const b = await open(h); // Nomad's new stream, before the old one is gone
    h.emit({ taskId: "t1", message: "e4" });
    await a.close();
    const got = [(await b.first).value?.message];
    for (let i = 0; i < 2; i++) got.push((await b.it.next()).value?.message);
    expect(got.sort()).toEqual(["e2", "e3", "e4"]);
    await b.close();
  });
});
