// createDriverHandlers served on a plain h2c connect-node server over a unix socket (no go-plugin):
// periodic fingerprints, the events backlog, Init/SetConfig tolerance, optional methods answering
// Unimplemented, each call's context, and close() ending the long-lived streams.
import { mkdtempSync, rmSync } from "node:fs";
import * as http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { BasePluginClient, DriverClient, createUnixSocketTransport } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDriverHandlers, defineDriver, type CallContext, type DriverHost } from "../src/driver/index.js";
import { registerBasePlugin } from "../src/gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js";
import { registerDriver } from "../src/gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { createPluginHandler } from "../src/runtime/adapter.js";
import { ServerRuntime } from "../src/runtime/server-runtime.js";

let dir: string;
let server: http2.Http2Server;
let host: DriverHost;
let driver: DriverClient;
let base: BasePluginClient;
let fingerprints = 0;
/** Calls of waitTask for a "hold-…" task: they wait until their call's signal aborts. */
const holding: { ctx: CallContext; aborted: Promise<void> }[] = [];
let onHold: (() => void) | undefined;
let shutdowns = 0;
/** waitTask calls of "ignore-…" tasks: they never settle and never look at their signal. */
let ignoring = 0;
/** What the server runtime logged at debug (cancelled calls among it). */
const debugLog: { fields: Record<string, unknown>; message: string | undefined }[] = [];
let onDebug: (() => void) | undefined;
const sessions = new Set<http2.ServerHttp2Session>();

beforeAll(async () => {
  host = createDriverHandlers(
    defineDriver({
      name: "inproc",
      version: "0.0.1",
      fingerprint: () => ({ health: "healthy", attributes: { "driver.inproc.calls": ++fingerprints } }),
      startTask: () => {},
      waitTask: async (taskId, ctx) => {
        if (taskId.startsWith("ignore-")) {
          ignoring++;
          onHold?.();
          return new Promise<never>(() => {});
        }
        if (!taskId.startsWith("hold-")) return { exitCode: 0 };
        const aborted = new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
        holding.push({ ctx, aborted });
        onHold?.();
        await aborted;
        return { exitCode: 1 };
      },
      stopTask: () => {},
      destroyTask: () => {},
      shutdown: () => void shutdowns++,
    }),
    { fingerprintIntervalMs: 20 },
  );
  const drop = () => {};
  const runtime = new ServerRuntime({
    logger: {
      trace: drop,
      debug: (fields, message) => {
        debugLog.push({ fields, message });
        onDebug?.();
      },
      info: drop,
      warn: drop,
      error: drop,
    },
  });
  server = http2.createServer(
    createPluginHandler((router) => {
      registerBasePlugin(router, host.base, runtime);
      registerDriver(router, host.driver, runtime);
    }),
  );
  server.on("session", (s) => sessions.add(s));
  dir = mkdtempSync(join(tmpdir(), "nomadkit-driver-"));
  const sock = join(dir, "plugin.sock");
  await new Promise<void>((resolve) => server.listen(sock, resolve));
  const transport = createUnixSocketTransport(sock);
  driver = new DriverClient(transport);
  base = new BasePluginClient(transport);
});

afterAll(async () => {
  await host?.close();
  const closed = new Promise<void>((resolve) => server?.close(() => resolve()));
  // The client keeps its HTTP/2 session for reuse; end it so the server can close.
  for (const s of sessions) s.destroy();
  await closed;
  rmSync(dir, { recursive: true, force: true });
});

describe("createDriverHandlers on a plain h2c server", () => {
  it("tolerates Init without SetConfig, and SetConfig with empty bytes", async () => {
    await driver.init({});
    await base.setConfig({});
    await base.setConfig({});
    await driver.init({});
    expect(host.context.config).toBeUndefined();
  });

  it("re-sends the fingerprint periodically on an open stream", async () => {
    const ac = new AbortController();
    const seen: bigint[] = [];
    for await (const fp of driver.fingerprint({}, { signal: ac.signal })) {
      seen.push(fp.attributes["driver.inproc.calls"]!.value.value as bigint);
      if (seen.length === 3) break;
    }
    ac.abort();
    expect(seen[2]! > seen[0]!).toBe(true);
  });

  it("keeps events emitted while no stream is open and delivers them to the next one", async () => {
    host.context.events.emit({ taskId: "t-early", message: "before anyone listened" });
    const ac = new AbortController();
    const it = driver.taskEvents({}, { signal: ac.signal })[Symbol.asyncIterator]();
    expect((await it.next()).value).toMatchObject({ taskId: "t-early", message: "before anyone listened" });
    host.context.events.emit({ taskId: "t-late", message: "live", annotations: { k: "v" } });
    expect((await it.next()).value).toMatchObject({ taskId: "t-late", annotations: { k: "v" } });
    ac.abort();
  });

  it("answers Unimplemented for what the driver does not implement", async () => {
    for (const p of [
      driver.signalTask({ taskId: "x", signal: "SIGHUP" }),
      driver.createNetwork({ allocId: "a" }),
      driver.recoverTask({ taskId: "x", handle: { config: { id: "x" } } }),
      driver.taskStats({ taskId: "x" })[Symbol.asyncIterator]().next(),
    ]) {
      await expect(p).rejects.toMatchObject({ code: Code.Unimplemented });
    }
    const caps = await driver.capabilities({});
    expect(caps.capabilities).toMatchObject({ sendSignals: false, exec: false, mustCreateNetwork: false });
  });

  /** Starts task `id` and a WaitTask on it that the test can cancel, once the driver's waitTask runs. */
  async function cancellableWait(id: string) {
    await driver.startTask({ task: { id, name: id.split("-")[0] } });
    const entered = new Promise<void>((resolve) => (onHold = resolve));
    const ac = new AbortController();
    const call = driver.waitTask({ taskId: id }, { signal: ac.signal });
    await entered;
    return { call, cancel: () => ac.abort() };
  }

  it("gives each call the driver's context and a signal that aborts when Nomad cancels the call", async () => {
    const { call, cancel } = await cancellableWait("hold-1");
    const { ctx, aborted } = holding[0]!;
    expect(ctx.signal.aborted).toBe(false);
    expect(ctx.logger).toBe(host.context.logger);
    expect(ctx.events).toBe(host.context.events);
    expect(ctx.fingerprint).toBe(host.context.fingerprint);
    expect(ctx.lifetime).toBe(host.context.lifetime);
    expect(ctx.tasks.get("hold-1")?.task.name).toBe("hold");
    cancel();
    await expect(call).rejects.toMatchObject({ code: Code.Canceled });
    await aborted;
    expect(ctx.signal.aborted).toBe(true);
  });

  it("answers a cancelled WaitTask itself, as Nomad's shim does, when the driver's waitTask ignores its signal", async () => {
    const { call, cancel } = await cancellableWait("ignore-1");
    expect(ignoring).toBe(1);
    const isWaitCancelled = (e: (typeof debugLog)[number]) => e.message === "call cancelled" && String(e.fields.rpc).endsWith("/WaitTask");
    const before = debugLog.filter(isWaitCancelled).length;
    const answered = new Promise<void>((resolve) => {
      onDebug = () => debugLog.filter(isWaitCancelled).length > before && resolve();
    });
    cancel();
    await expect(call).rejects.toMatchObject({ code: Code.Canceled });
    // The SDK ended the call on the server side too, though waitTask never settles.
    await answered;
    onDebug = undefined;
  });

  it("maps a bad request to a status, never a crash", async () => {
    const err = await driver.startTask({}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).rawMessage).toBe("task: required");
  });

  it("Driver.Shutdown ends the long-lived streams (as Nomad's drivers do); shutdown runs once", async () => {
    const fp = driver.fingerprint({})[Symbol.asyncIterator]();
    await fp.next();
    const ev = driver.taskEvents({})[Symbol.asyncIterator]();
    const pending = ev.next();
    await driver.shutdown({});
    // Both streams finish cleanly (OK), before the plugin itself is stopped.
    let r = await fp.next();
    while (!r.done) r = await fp.next();
    expect((await pending).done).toBe(true);
    await host.close();
    await host.close();
    expect(shutdowns).toBe(1);
  });
});
