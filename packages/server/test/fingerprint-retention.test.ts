// A Fingerprint stream lives as long as the plugin (days): each fingerprint it sent must be
// collectable once the next one replaces it, not kept by the stream's own wait for its end.
import type { HandlerContext } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { createDriverHandlers, defineDriver } from "../src/driver/index.js";
import { exposedGc } from "./runtime-helpers.js";

it("does not keep every fingerprint it sent alive while the stream stays open", async () => {
  let sent = 0;
  let collected = 0;
  const registry = new FinalizationRegistry<void>(() => void collected++);
  const host = createDriverHandlers(
    defineDriver({
      name: "fp-retention",
      version: "0.0.1",
      fingerprint: () => ({
        health: "healthy",
        attributes: { "driver.fp-retention.n": sent },
      }),
      startTask: () => {},
      waitTask: () => ({ exitCode: 0 }),
      stopTask: () => {},
      destroyTask: () => {},
    }),
    // Periodic fingerprints as fast as a timer goes: many of them while the stream is open.
    { fingerprintIntervalMs: 1 },
  );
  const ac = new AbortController();
  try {
    const stream = (
      host.driver.fingerprint!({}, {
        signal: ac.signal,
      } as HandlerContext) as AsyncIterable<object>
    )[Symbol.asyncIterator]();
    for (let i = 0; i < 200; i++) {
      const r = await stream.next();
      registry.register(r.value!, undefined);
      sent++;
    }
    const gc = exposedGc();
    // Finalization callbacks run as tasks of their own after a collection.
    for (let i = 0; i < 20 && collected < sent - 5; i++) {
      gc();
      await new Promise((r) => setTimeout(r, 10));
    }
    // All but the last few (the stream's `last`, one in flight) are gone.
    expect(collected).toBeGreaterThanOrEqual(sent - 5);
  } finally {
    ac.abort();
    await host.close();
  }
});
