// A real plugin process is SIGKILLed mid-call: every kind of call (unary, server stream, bidi) must
// fail with PluginShutdownError, because the plugin's exit signal (the child's 'exit' event) fires
// within the grace period. Synchronisation is by words the fixture prints, never by sleeping.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConnectError } from "@connectrpc/connect";
import {
  DriverClient,
  PluginShutdownError,
  RequestQueue,
  createUnixSocketTransport,
  isCancellation,
} from "../src/index.js";
import { spawnFixture, tempDir, type Child } from "./helpers.js";

/** Pull from `it` until it throws; return the error (or fail if it ends cleanly). */
async function errorOf<T>(it: AsyncIterator<T>): Promise<unknown> {
  for (;;) {
    try {
      const r = await it.next();
      if (r.done) return new Error("stream ended without an error");
    } catch (err) {
      return err;
    }
  }
}

describe("plugin process killed mid-call", () => {
  let tmp: ReturnType<typeof tempDir>;
  let child: Child;
  let socketPath: string;

  beforeEach(async () => {
    tmp = tempDir();
    socketPath = `${tmp.dir}/plugin.sock`;
    child = spawnFixture("dying-plugin.mjs", [socketPath]);
    await child.waitFor("ready");
  });

  afterEach(() => {
    if (!child.exited.aborted) child.proc.kill("SIGKILL");
    tmp.cleanup();
  });

  const client = () => new DriverClient(createUnixSocketTransport(socketPath), { pluginExited: child.exited });

  it("TaskStats stream ends with PluginShutdownError", async () => {
    const it = client().taskStats({ taskId: "t1" })[Symbol.asyncIterator]();
    const first = await it.next();
    expect(first.value?.stats?.id).toBe("t1");
    await child.waitFor("taskStats");
    child.proc.kill("SIGKILL");
    const err = await errorOf(it);
    expect(err).toBeInstanceOf(PluginShutdownError);
    expect((err as Error).message).toBe("plugin is shut down");
    expect((err as Error).cause).toBeInstanceOf(ConnectError);
    expect(isCancellation(err)).toBe(false);
  });

  it("a unary call in flight rejects with PluginShutdownError", async () => {
    const call = client().waitTask({ taskId: "t1" }).then(
      () => new Error("WaitTask answered"),
      (e: unknown) => e,
    );
    await child.waitFor("waitTask");
    child.proc.kill("SIGKILL");
    expect(await call).toBeInstanceOf(PluginShutdownError);
  });

  it("ExecTaskStreaming (bidi) ends with PluginShutdownError", async () => {
    const stdin = new RequestQueue<{ setup?: { taskId: string; command: string[] }; stdin?: { data: Uint8Array } }>();
    stdin.push({ setup: { taskId: "t1", command: ["sh"] } });
    const it = client().execTaskStreaming(stdin)[Symbol.asyncIterator]();
    const first = await it.next();
    expect(new TextDecoder().decode(first.value?.stdout?.data)).toBe("hello\n");
    await child.waitFor("exec");
    child.proc.kill("SIGKILL");
    const err = await errorOf(it);
    expect(err).toBeInstanceOf(PluginShutdownError);
  });

  it("a call to a plugin that already exited rejects with PluginShutdownError", async () => {
    child.proc.kill("SIGKILL");
    await new Promise<void>((r) => child.exited.addEventListener("abort", () => r(), { once: true }));
    expect(await client().waitTask({ taskId: "t1" }).catch((e: unknown) => e)).toBeInstanceOf(PluginShutdownError);
  });

  it("without an exit signal the transport error is returned unchanged", async () => {
    const call = new DriverClient(createUnixSocketTransport(socketPath)).waitTask({ taskId: "t1" }).catch((e: unknown) => e);
    await child.waitFor("waitTask");
    child.proc.kill("SIGKILL");
    const err = await call;
    expect(err).toBeInstanceOf(ConnectError);
    expect(err).not.toBeInstanceOf(PluginShutdownError);
  });
});
