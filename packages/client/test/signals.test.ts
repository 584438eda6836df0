// anySignal: AbortSignal.any where Node has it, listeners where it does not (Node 20.0–20.2, which
// the packages' engines admit). Both ways must behave alike.
import { afterEach, describe, expect, it } from "vitest";
import { anySignal } from "../src/runtime/signals.js";

const native = AbortSignal.any;
afterEach(() => {
  AbortSignal.any = native;
});

describe.each([
  ["with AbortSignal.any", false],
  ["without AbortSignal.any (Node < 20.3)", true],
])("anySignal %s", (_name, without) => {
  const setUp = () => {
    if (without) (AbortSignal as { any?: unknown }).any = undefined;
  };

  it("aborts with the reason of the first source that aborts, and only once", () => {
    setUp();
    const a = new AbortController();
    const b = new AbortController();
    const s = anySignal([a.signal, b.signal]);
    let fired = 0;
    s.addEventListener("abort", () => fired++);
    expect(s.aborted).toBe(false);
    b.abort("b first");
    a.abort("a later");
    expect(s.aborted).toBe(true);
    expect(s.reason).toBe("b first");
    expect(fired).toBe(1);
  });

  it("is aborted at once when a source already is", () => {
    setUp();
    const a = new AbortController();
    const s = anySignal([a.signal, AbortSignal.abort("already")]);
    expect(s.aborted).toBe(true);
    expect(s.reason).toBe("already");
  });

  it("follows a timeout", async () => {
    setUp();
    const s = anySignal([new AbortController().signal, AbortSignal.timeout(10)]);
    await new Promise((r) => s.addEventListener("abort", r, { once: true }));
    expect((s.reason as Error).name).toBe("TimeoutError");
  });
});
