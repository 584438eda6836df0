// The runtime's iterator around a streaming handler (what every streaming method's responses go
// through): errors mapped once, cancellation obeyed by handlers that ignore it, the handler's
// stream ended (its finally blocks run) however the call ends.
import { getEventListeners } from "node:events";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { GuardedStream } from "../src/runtime/guarded-stream.js";

/** Whether `p` has settled, without waiting for it. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  const pending = Symbol();
  return (await Promise.race([p, new Promise((r) => setImmediate(r, pending))])) !== pending;
}

const mapped: unknown[] = [];
const mapError = (err: unknown) => {
  mapped.push(err);
  return err instanceof ConnectError ? err : new ConnectError(String((err as Error).message ?? err), Code.Unknown);
};

/** A handler that records its life: started, values yielded, whether its finally ran. */
function probe(body: (log: string[]) => AsyncGenerator<number>) {
  const log: string[] = [];
  let calls = 0;
  const start = () => {
    calls++;
    return body(log);
  };
  return { log, start, calls: () => calls };
}

/** A handler that yields 1 and 2, logging "finally" when its stream ends. */
const twoThenDone = () =>
  probe(async function* (log) {
    try {
      yield 1;
      yield 2;
    } finally {
      log.push("finally");
    }
  });

describe("GuardedStream", () => {
  it("passes the handler's messages through in order, then ends, detaching from the signal", async () => {
    mapped.length = 0;
    const ac = new AbortController();
    const h = twoThenDone();
    const s = new GuardedStream(h.start, ac.signal, mapError);
    expect(h.calls()).toBe(0); // the handler runs at the first next()
    const got: number[] = [];
    for await (const v of s) {
      got.push(v);
      expect(getEventListeners(ac.signal, "abort")).toHaveLength(1);
    }
    expect(got).toEqual([1, 2]);
    expect(h.log).toEqual(["finally"]);
    expect(getEventListeners(ac.signal, "abort")).toHaveLength(0);
    expect(await s.next()).toEqual({ done: true, value: undefined });
    expect(mapped).toEqual([]);
  });

  it("maps a handler's failure once, and does not end a handler that already ended by throwing", async () => {
    mapped.length = 0;
    const boom = new Error("boom");
    let returned = 0;
    const iter: AsyncIterator<number> = {
      next: () => Promise.reject(boom),
      return: () => {
        returned++;
        return Promise.resolve({ done: true, value: undefined });
      },
    };
    const s = new GuardedStream(() => ({ [Symbol.asyncIterator]: () => iter }), new AbortController().signal, mapError);
    const err = await s.next().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).rawMessage).toBe("boom");
    expect(mapped).toEqual([boom]);
    expect(returned).toBe(0);
    expect(await s.next()).toEqual({ done: true, value: undefined });
  });

  it("maps a handler that throws before returning an iterable", async () => {
    mapped.length = 0;
    const ac = new AbortController();
    const s = new GuardedStream<number>(
      () => {
        throw new Error("bad request");
      },
      ac.signal,
      mapError,
    );
    await expect(s.next()).rejects.toThrow("bad request");
    expect(getEventListeners(ac.signal, "abort")).toHaveLength(0);
  });

  it("rejects a pending next() as soon as the call is cancelled, and ends a handler that ignores its signal", async () => {
    mapped.length = 0;
    const ac = new AbortController();
    const h = probe(async function* (log) {
      try {
        yield 1;
        await new Promise(() => {}); // ignores the signal: never resumes on its own
      } finally {
        log.push("finally");
      }
    });
    const s = new GuardedStream(h.start, ac.signal, mapError);
    expect(await s.next()).toEqual({ done: false, value: 1 });
    const pending = s.next();
    expect(await settled(pending)).toBe(false);
    const reason = new ConnectError("cancelled", Code.Canceled);
    ac.abort(reason);
    await expect(pending).rejects.toBe(reason);
    expect(mapped).toEqual([reason]);
    // A generator suspended in an await runs its finally once that await settles: never, here;
    // what matters is that the call did not wait for it and nothing listens any more.
    expect(getEventListeners(ac.signal, "abort")).toHaveLength(0);
    expect(await s.next()).toEqual({ done: true, value: undefined });
  });

  it("ends the handler when the call is cancelled between messages, and the next next() rejects", async () => {
    mapped.length = 0;
    const ac = new AbortController();
    const h = probe(async function* (log) {
      try {
        for (let i = 0; ; i++) yield i;
      } finally {
        log.push("finally");
      }
    });
    const s = new GuardedStream(h.start, ac.signal, mapError);
    expect(await s.next()).toEqual({ done: false, value: 0 });
    ac.abort(new ConnectError("deadline", Code.DeadlineExceeded));
    await new Promise((r) => setImmediate(r));
    expect(h.log).toEqual(["finally"]); // ended while the consumer was busy
    await expect(s.next()).rejects.toMatchObject({ code: Code.DeadlineExceeded });
  });

  it("return() ends the handler without waiting for it; before the first next() the handler never runs", async () => {
    const ac = new AbortController();
    const unstarted = probe(async function* () {
      yield 1;
    });
    const a = new GuardedStream(unstarted.start, ac.signal, mapError);
    expect(await a.return()).toEqual({ done: true, value: undefined });
    expect(unstarted.calls()).toBe(0);
    expect(await a.next()).toEqual({ done: true, value: undefined });

    const h = twoThenDone();
    const b = new GuardedStream(h.start, ac.signal, mapError);
    expect(await b.next()).toEqual({ done: false, value: 1 });
    expect(await b.return()).toEqual({ done: true, value: undefined });
    await new Promise((r) => setImmediate(r));
    expect(h.log).toEqual(["finally"]);
    expect(getEventListeners(ac.signal, "abort")).toHaveLength(0);
  });

  it("refuses a second next() while one is pending", async () => {
    const s = new GuardedStream(
      () => ({ [Symbol.asyncIterator]: () => ({ next: () => new Promise<IteratorResult<number>>(() => {}) }) }),
      new AbortController().signal,
      mapError,
    );
    void s.next();
    await expect(s.next()).rejects.toThrow("one next() at a time");
  });

  it("settles the consumer's next() even when mapping the handler's failure throws", async () => {
    const failed = new TypeError("Cannot convert object to primitive value");
    const h = probe(async function* () {
      yield 1;
      throw Object.create(null);
    });
    const s = new GuardedStream(h.start, new AbortController().signal, () => {
      throw failed;
    });
    expect(await s.next()).toEqual({ done: false, value: 1 });
    await expect(s.next()).rejects.toBe(failed);
    expect(await s.next()).toEqual({ done: true, value: undefined });
  });
});

