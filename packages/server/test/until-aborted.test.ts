// untilAborted answers a call whose caller gave up, and lets go of it: WaitTask's promise lives until
// the task exits, and Nomad abandons a WaitTask at every agent restart.
import { describe, expect, it } from "vitest";
import { Aborted, untilAborted } from "../src/runtime/until-aborted.js";
import { exposedGc } from "./runtime-helpers.js";

describe("untilAborted", () => {
  it("resolves and rejects with the promise while the signal has not fired", async () => {
    await expect(
      untilAborted(Promise.resolve(5), new AbortController().signal),
    ).resolves.toBe(5);
    await expect(
      untilAborted(
        Promise.reject(new Error("no")),
        new AbortController().signal,
      ),
    ).rejects.toThrow("no");
  });

  it("rejects with Aborted carrying the signal's reason, at once or later; a later settlement changes nothing", async () => {
    const before = new AbortController();
    before.abort("gone");
    await expect(
      untilAborted(new Promise(() => {}), before.signal),
    ).rejects.toEqual(new Aborted("gone"));
    let fail!: (e: unknown) => void;
    const p = new Promise((_, reject) => (fail = reject));
    const later = new AbortController();
    const r = untilAborted(p, later.signal);
    later.abort("left");
    await expect(r).rejects.toEqual(new Aborted("left"));
    fail(new Error("after")); // handled: no unhandled rejection fails the run
    await new Promise((res) => setImmediate(res));
  });

  it("does not keep an abandoned call's signal (and what hangs on it) until the promise settles", async () => {
    const gc = exposedGc();
    const forever = new Promise<never>(() => {});
    const refs: WeakRef<AbortSignal>[] = [];
    for (let i = 0; i < 10; i++) {
      const ac = new AbortController();
      refs.push(new WeakRef(ac.signal));
      const call = untilAborted(forever, ac.signal).catch(() => undefined);
      ac.abort();
      await call;
    }
    for (let i = 0; i < 5; i++) {
      await new Promise((res) => setImmediate(res));
      gc();
    }
    // The last one may still be referenced from this function's own frame.
    expect(refs.filter((r) => r.deref() !== undefined).length).toBeLessThanOrEqual(1);
  });
});
