// ctx.fingerprint.update() with no fingerprint asks for fingerprint() to run again, because
// something changed: a call already running when it was asked began before the change, and its
// answer must not stand in for the new one (Nomad would see the old health until the next period).
import type { HandlerContext } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { createDriverHandlers, defineDriver } from "../src/driver/index.js";

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++)
    await new Promise((r) => setTimeout(r, 10));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

it("runs fingerprint() again for an update() asked while a call was out", async () => {
  let health: "undetected" | "healthy" = "undetected";
  const answers: (() => void)[] = [];
  const host = createDriverHandlers(
    defineDriver({
      name: "fp-rerun",
      version: "0.0.1",
      // Reads the state when called, answers when the test says.
      fingerprint: () => {
        const seen = health;
        return new Promise((resolve) =>
          answers.push(() => resolve({ health: seen })),
        );
      },
      startTask: () => {},
      waitTask: () => ({ exitCode: 0 }),
      stopTask: () => {},
      destroyTask: () => {},
    }),
    { fingerprintIntervalMs: 3_600_000 },
  );
  const ac = new AbortController();
  try {
    const stream = (
      host.driver.fingerprint!({}, {
        signal: ac.signal,
      } as HandlerContext) as AsyncIterable<{ health: number }>
    )[Symbol.asyncIterator]();
    const sent: number[] = [];
    const reading = (async () => {
      for (;;) {
        const r = await stream.next();
        if (r.done === true) return;
        sent.push(r.value.health);
      }
    })();
    await until(() => answers.length === 1, "the first fingerprint() call");
    // The daemon came up while that call was out: the driver asks for a new fingerprint.
    health = "healthy";
    host.context.fingerprint.update();
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
    ac.abort();
    await reading;
  } finally {
    ac.abort();
    await host.close();
  }
});
