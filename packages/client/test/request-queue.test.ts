import { describe, expect, it } from "vitest";
import { RequestQueue } from "../src/index.js";

/** Reads `n` items from an iterator, failing instead of hanging when it ends early. */
async function take<T>(it: AsyncIterator<T>, n: number): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < n; i++) {
    const r = await it.next();
    if (r.done) throw new Error(`ended after ${out.length} of ${n}`);
    out.push(r.value);
  }
  return out;
}

describe("RequestQueue", () => {
  it("yields what was pushed in order, including items pushed while the consumer waits", async () => {
    const q = new RequestQueue<number>();
    q.push(1, 2);
    const it = q[Symbol.asyncIterator]();
    expect(await take(it, 2)).toEqual([1, 2]);
    const pending = it.next();
    q.push(3);
    q.push(4, 5);
    expect(await pending).toEqual({ value: 3, done: false });
    expect(await take(it, 2)).toEqual([4, 5]);
  });

  it("stays open until end(), then drains what is queued and finishes", async () => {
    const q = new RequestQueue<string>();
    const it = q[Symbol.asyncIterator]();
    const pending = it.next();
    let settled = false;
    void pending.then(() => (settled = true));
    // Give the consumer every chance to finish early: it must not.
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    expect(settled).toBe(false);
    q.push("a", "b");
    q.end();
    expect(q.ended).toBe(true);
    expect(await pending).toEqual({ value: "a", done: false });
    expect(await it.next()).toEqual({ value: "b", done: false });
    expect((await it.next()).done).toBe(true);
  });

  it("ends a consumer that is waiting, and drops pushes after end()", async () => {
    const q = new RequestQueue<number>();
    const it = q[Symbol.asyncIterator]();
    const pending = it.next();
    q.end();
    q.push(1);
    q.end();
    expect((await pending).done).toBe(true);
    const items: number[] = [];
    for await (const n of q) items.push(n);
    expect(items).toEqual([]);
  });

  it("keeps falsy items", async () => {
    const q = new RequestQueue<number | undefined | null | string>();
    q.push(0, undefined, null, "");
    q.end();
    const items: unknown[] = [];
    for await (const x of q) items.push(x);
    expect(items).toEqual([0, undefined, null, ""]);
  });

  it("push() says when the high-water mark is reached; drained() resolves once the call took everything", async () => {
    const q = new RequestQueue<number>({ highWaterMark: 3 });
    await q.drained(); // empty: at once
    expect(q.push(1)).toBe(true);
    expect(q.push(2)).toBe(true);
    expect(q.push(3)).toBe(false);
    expect(q.push(4)).toBe(false); // still queued
    expect(q.length).toBe(4);
    let drained = false;
    const waiting = q.drained().then(() => (drained = true));
    const it = q[Symbol.asyncIterator]();
    expect(await take(it, 3)).toEqual([1, 2, 3]);
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    expect(drained).toBe(false);
    expect(q.length).toBe(1);
    expect(await take(it, 1)).toEqual([4]);
    await waiting;
    expect(q.length).toBe(0);
    expect(q.push(5)).toBe(true);
  });

  it("drained() resolves when the queue ends, taken or not (the call may be gone)", async () => {
    const q = new RequestQueue<number>();
    q.push(1, 2);
    const waiting = q.drained();
    q.end();
    await waiting;
    await q.drained();
    expect(q.push(3)).toBe(false);
    expect(q.length).toBe(2);
  });
});
