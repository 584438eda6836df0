// A driver's fingerprint() may be a plain function that throws (execSync of a daemon's CLI, say):
// its failure must be reported for that fingerprint only, and the next one must call it again.
import type { HandlerContext } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { createDriverHandlers, defineDriver } from "../src/driver/index.js";

it("calls a fingerprint() that threw synchronously again, and reports it healthy once it is", async () => {
  let calls = 0;
  const host = createDriverHandlers(
    defineDriver({
      name: "fp-sync-throw",
      version: "0.0.1",
      // Not async: the first call throws before any await.
      fingerprint: () => {
        if (++calls === 1) throw new Error("daemon down");
        return { health: "healthy" };
      },
      startTask: () => {},
      waitTask: () => ({ exitCode: 0 }),
      stopTask: () => {},
      destroyTask: () => {},
    }),
    { fingerprintIntervalMs: 1 },
  );
  const ac = new AbortController();
  try {
    const stream = (
      host.driver.fingerprint!({}, {
        signal: ac.signal,
      } as HandlerContext) as AsyncIterable<{
        health: number;
        healthDescription: string;
      }>
    )[Symbol.asyncIterator]();
    const first = await stream.next();
    expect(first.value).toMatchObject({
      health: 1,
      healthDescription: "fingerprint failed: daemon down",
    }); // unhealthy
    // The periodic fingerprints that follow ask the driver again.
    const second = await stream.next();
    expect(calls).toBe(2);
    expect(second.value).toMatchObject({
      health: 2,
      healthDescription: "Healthy",
    });
  } finally {
    ac.abort();
    await host.close();
  }
});
