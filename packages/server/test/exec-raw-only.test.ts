// A driver that serves exec sessions only in the raw form (as an executor-backed driver forwarding
// them does) advertises exec, so Nomad's script checks call ExecTask: it must be answered through
// the raw handler, with the timeout behaviour of Nomad's executor.
import { Code, ConnectError } from "@connectrpc/connect";
import type { DriverClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fakeDriver, serveTestDriver, type ServedTestDriver } from "./runtime-helpers.js";

let served: ServedTestDriver | undefined;
let driver: DriverClient;
const text = (s: string) => new TextEncoder().encode(s);
/** What each raw session saw: its command, whether stdin was closed, whether it was aborted. */
const sessions: { command: string[]; stdinClosed: boolean; aborted: boolean }[] = [];

beforeAll(async () => {
  served = await serveTestDriver(
    fakeDriver("rawonly", {
      async execTaskStreamingRaw(stream) {
        const seen = { command: [...stream.command], stdinClosed: false, aborted: false };
        sessions.push(seen);
        let closed!: () => void;
        const stdinClosed = new Promise<void>((resolve) => (closed = resolve));
        void (async () => {
          for await (const m of stream) {
            if (m.stdin?.close) {
              seen.stdinClosed = true;
              closed();
            }
          }
        })().catch(() => undefined);
        const [cmd, ...args] = stream.command;
        if (cmd === "hang") {
          await stream.send({ stdout: { data: text("partial") } });
          await new Promise<void>((resolve) => stream.signal.addEventListener("abort", () => resolve(), { once: true }));
          seen.aborted = true;
          return;
        }
        if (cmd === "vanish") return; // ends without an exit
        await stdinClosed;
        await stream.send({ stdout: { data: text(`ran ${args.join(" ")}`) } });
        await stream.send({ stderr: { data: text("warn") } });
        await stream.send({ stdout: { data: text("!") } });
        await stream.send({ exited: true, result: { exitCode: 3 } });
      },
    }),
  );
  driver = served.driver;
});

afterAll(async () => {
  await served?.close();
});

describe("ExecTask through a raw-only exec handler", () => {
  it("advertises exec and answers ExecTask with the session's output and exit code", async () => {
    expect((await driver.capabilities({})).capabilities?.exec).toBe(true);
    const r = await driver.execTask({ taskId: "t1", command: ["echo", "a", "b"] });
    expect(Buffer.from(r.stdout).toString()).toBe("ran a b!");
    expect(Buffer.from(r.stderr).toString()).toBe("warn");
    expect(r.result?.exitCode).toBe(3);
    expect(sessions.at(-1)).toEqual({ command: ["echo", "a", "b"], stdinClosed: true, aborted: false });
  });

  it("past the timeout, cancels the session and answers the output so far with exit code -1, as Nomad's ExecTask", async () => {
    const r = await driver.execTask({ taskId: "t1", command: ["hang"], timeout: { nanos: 200_000_000 } });
    expect(Buffer.from(r.stdout).toString()).toBe("partial");
    // raw_exec's ExecTask for a command killed at its timeout (executor ExecScript): -1, no signal.
    expect(r.result).toMatchObject({ exitCode: -1, signal: 0 });
    for (let i = 0; i < 200 && !sessions.at(-1)!.aborted; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(sessions.at(-1)!.aborted).toBe(true);
  });

  it("a session that ends without an exit is an error, and an unknown task is NotFound", async () => {
    const err = await driver.execTask({ taskId: "t1", command: ["vanish"] }).catch((e: unknown) => e);
    expect(ConnectError.from(err).code).toBe(Code.Internal);
    expect(ConnectError.from(err).rawMessage).toContain("without reporting the command's exit");
    const missing = await driver.execTask({ taskId: "nope", command: ["true"] }).catch((e: unknown) => e);
    expect(ConnectError.from(missing).code).toBe(Code.NotFound);
  });
});
