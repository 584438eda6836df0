// A driver's fingerprint() that never answers must not hold back the fingerprint it pushes with
// ctx.fingerprint.update(): Nomad would otherwise go on seeing the last health it was sent.
import { afterAll, expect, it } from "vitest";
import { createDriverHandlers, defineDriver } from "../src/driver/index.js";
import type { HandlerContext } from "@connectrpc/connect";

let calls = 0;
const host = createDriverHandlers(
  defineDriver({
    name: "fp-hang",
    version: "0.0.1",
    // Answers once, then hangs.
    fingerprint: () => (++calls === 1 ? { health: "healthy" } : new Promise(() => {})),
    startTask: () => {},
    waitTask: () => ({ exitCode: 0 }),
    stopTask: () => {},
    destroyTask: () => {},
  }),
  { fingerprintIntervalMs: 50 },
);
afterAll(() => host.close());

it("sends a pushed fingerprint while the driver's fingerprint() hangs", async () => {
  const ac = new AbortController();
  const stream = (host.driver.fingerprint!({}, { signal: ac.signal } as HandlerContext) as AsyncIterable<{ health: number; healthDescription: string }>)[
    Symbol.asyncIterator
  ]();
  expect((await stream.next()).value?.health).toBe(2); // healthy
  const second = stream.next();
  await new Promise((r) => setTimeout(r, 200)); // the periodic fingerprint() is out, and hangs
  expect(calls).toBeGreaterThanOrEqual(2);
  host.context.fingerprint.update({ health: "unhealthy", description: "daemon unreachable" });
  const pushed = await Promise.race([second, new Promise((r) => setTimeout(() => r("nothing"), 5000))]);
  expect(pushed).toMatchObject({ value: { health: 1, healthDescription: "daemon unreachable" } });
  ac.abort();
  // The hanging call is shared, not repeated for every stream and interval.
  const before = calls;
  await new Promise((r) => setTimeout(r, 300));
  expect(calls).toBe(before);
});

it("ends the stream when its call is cancelled while the driver's fingerprint() hangs", async () => {
  const ac = new AbortController();
  const stream = (host.driver.fingerprint!({}, { signal: ac.signal } as HandlerContext) as AsyncIterable<unknown>)[Symbol.asyncIterator]();
  // The shared call is still out and hanging (previous test): this stream waits on it.
  const next = stream.next();
  ac.abort();
  const end = await Promise.race([next, new Promise((r) => setTimeout(() => r("still open"), 5000))]);
  expect(end).toEqual({ done: true, value: undefined });
});
