// How a Fingerprint stream calls the driver's fingerprint() over the plugin's life: Nomad keeps one
// stream open for days, so each fingerprint must be collectable once sent, a failure must count for
// its own fingerprint only, and ctx.fingerprint.update() must ask the driver again.
import type { HandlerContext } from "@connectrpc/connect";
import { expect, it } from "vitest";
import {
  createDriverHandlers,
  defineDriver,
  type Driver,
} from "../src/driver/index.js";
import { exposedGc } from "./runtime-helpers.js";

interface Sent {
  health: number;
  healthDescription: string;
}

/** One Fingerprint stream of a driver whose only behaviour is `fingerprint`. */
function fingerprintStream(
  fingerprint: Driver["fingerprint"],
  fingerprintIntervalMs: number,
) {
  const host = createDriverHandlers(
    defineDriver({
      name: "fp-source",
      version: "0.0.1",
      fingerprint,
      startTask: () => {},
      waitTask: () => ({ exitCode: 0 }),
      stopTask: () => {},
      destroyTask: () => {},
    }),
    { fingerprintIntervalMs },
  );
  const ac = new AbortController();
  const stream = (
    host.driver.fingerprint!({}, {
      signal: ac.signal,
    } as HandlerContext) as AsyncIterable<Sent>
  )[Symbol.asyncIterator]();
  return {
    host,
    stream,
    async close(): Promise<void> {
      ac.abort();
      await host.close();
    },
  };
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++)
    await new Promise((r) => setTimeout(r, 10));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

it("does not keep every fingerprint it sent alive while the stream stays open", async () => {
  let sent = 0;
  let collected = 0;
  const registry = new FinalizationRegistry<void>(() => void collected++);
  // Periodic fingerprints as fast as a timer goes: many of them while the stream is open.
  const s = fingerprintStream(
    () => ({ health: "healthy", attributes: { "driver.fp-source.n": sent } }),
    1,
  );
  try {
    for (let i = 0; i < 200; i++) {
      const r = await s.stream.next();
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
    await s.close();
  }
});

it("calls a fingerprint() that threw synchronously again, and reports it healthy once it is", async () => {
  let calls = 0;
  // Not async (execSync of a daemon's CLI, say): the first call throws before any await.
  const s = fingerprintStream(() => {
    if (++calls === 1) throw new Error("daemon down");
    return { health: "healthy" };
  }, 1);
  try {
    expect((await s.stream.next()).value).toMatchObject({
      health: 1,
      healthDescription: "fingerprint failed: daemon down",
    }); // unhealthy
    // The periodic fingerprints that follow ask the driver again.
    const second = await s.stream.next();
    expect(calls).toBe(2);
    expect(second.value).toMatchObject({
      health: 2,
      healthDescription: "Healthy",
    });
  } finally {
    await s.close();
  }
});

it("reports a thrown value String() cannot convert, without an unhandled rejection, and asks again", async () => {
  let calls = 0;
  const s = fingerprintStream(() => {
    if (++calls === 1) throw Object.create(null);
    return { health: "healthy" };
  }, 1);
  try {
    expect((await s.stream.next()).value).toMatchObject({
      health: 1,
      healthDescription: "fingerprint failed: [Object: null prototype] {}",
    });
    expect((await s.stream.next()).value).toMatchObject({ health: 2 });
    expect(calls).toBe(2);
  } finally {
    await s.close();
  }
});

it("runs fingerprint() again for an update() asked while a call was out", async () => {
  let health: "undetected" | "healthy" = "undetected";
  const answers: (() => void)[] = [];
  // Reads the state when called, answers when the test says.
  const s = fingerprintStream(() => {
    const seen = health;
    return new Promise((resolve) =>
      answers.push(() => resolve({ health: seen })),
    );
  }, 3_600_000);
  try {
    const sent: number[] = [];
    const reading = (async () => {
      for (;;) {
        const r = await s.stream.next();
        if (r.done === true) return;
        sent.push(r.value.health);
      }
    })();
    await until(() => answers.length === 1, "the first fingerprint() call");
    // The daemon came up while that call was out: the driver asks for a new fingerprint.
    health = "healthy";
    s.host.context.fingerprint.update();
    // The stream takes the update in (promise reactions only) before the old call answers.
    await new Promise((r) => setImmediate(r));
    answers[0]!(); // the old call answers what it saw: undetected
    await until(
      () => answers.length === 2,
      "fingerprint() to be called again after update()",
    );
    answers[1]!();
    await until(() => sent.includes(2), "the healthy fingerprint to be sent");
    expect(sent.at(-1)).toBe(2); // healthy
    await s.close();
    await reading;
  } finally {
    await s.close();
  }
});
