import { getEventListeners } from "node:events";
import { afterEach, describe, expect, it, vi } from "vitest";
import { StreamWaits } from "../src/driver/util.js";

/** Whether `p` has settled, without waiting for it (a settled promise's reaction runs first). */
async function settled(p: Promise<unknown>): Promise<boolean> {
  const pending = Symbol();
  return (await Promise.race([p, new Promise((r) => setImmediate(r, pending))])) !== pending;
}

afterEach(() => {
  vi.useRealTimers();
});

describe("StreamWaits (the waits of one stream)", () => {
  it("listens to each signal once for the stream's life, however many waits, and detaches on close", async () => {
    const call = new AbortController();
    const lifetime = new AbortController();
    const waits = new StreamWaits(call.signal, undefined, lifetime.signal);
    for (let i = 0; i < 20; i++) {
      expect(await waits.next(1)).toBe(true);
      expect(getEventListeners(call.signal, "abort")).toHaveLength(1);
      expect(getEventListeners(lifetime.signal, "abort")).toHaveLength(1);
    }
    waits.close();
    expect(getEventListeners(call.signal, "abort")).toHaveLength(0);
    expect(getEventListeners(lifetime.signal, "abort")).toHaveLength(0);
    expect(await waits.next(1)).toBe(false);
  });

  it("ends the pending wait with false when any signal aborts, and every later one at once", async () => {
    const call = new AbortController();
    const lifetime = new AbortController();
    const waits = new StreamWaits(call.signal, lifetime.signal);
    const w = waits.next(60_000);
    expect(await settled(w)).toBe(false);
    lifetime.abort();
    expect(await w).toBe(false);
    expect(await waits.next(60_000)).toBe(false);
    expect(getEventListeners(call.signal, "abort")).toHaveLength(0);
  });

  it("answers false at once for a signal that had already aborted, without listening", async () => {
    const call = new AbortController();
    const other = new AbortController();
    call.abort();
    const waits = new StreamWaits(other.signal, call.signal);
    expect(await waits.next(60_000)).toBe(false);
    expect(getEventListeners(other.signal, "abort")).toHaveLength(0);
  });

  it("a poke ends the pending wait with true; a poke with no wait pending is dropped", async () => {
    const waits = new StreamWaits();
    waits.poke();
    const w = waits.next();
    expect(await settled(w)).toBe(false);
    waits.poke();
    expect(await w).toBe(true);
    waits.close();
  });

  it("re-arms its timer for each wait: a wait after a poke lasts its whole period", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const waits = new StreamWaits();
    let w = waits.next(1000);
    vi.advanceTimersByTime(600);
    waits.poke();
    expect(await w).toBe(true);
    w = waits.next(1000);
    // The first wait's timer would have fired 400 ms from here.
    vi.advanceTimersByTime(999);
    expect(await settled(w)).toBe(false);
    vi.advanceTimersByTime(1);
    expect(await w).toBe(true);
    // Another period, and one of a different length.
    w = waits.next(1000);
    vi.advanceTimersByTime(1000);
    expect(await w).toBe(true);
    w = waits.next(50);
    vi.advanceTimersByTime(50);
    expect(await w).toBe(true);
    waits.close();
    expect(vi.getTimerCount()).toBe(0);
  });

  it("allows one wait at a time", () => {
    const waits = new StreamWaits();
    void waits.next();
    expect(() => waits.next()).toThrow("one wait at a time");
    waits.close();
  });
});
