// A call's own timeout bounds everything the call does, the wait for the plugin's exit after a
// transport failure included: Nomad's HandleReqCtxGrpcErr ends that wait when the request's context
// is done (its deadline too) and returns the context's error. The connection here drops under each
// call while the "plugin" (this process) lives on, and the shutdown grace is far longer than the
// test may take: a call that waited out the grace instead of its timeout never settles in time.
import * as http2 from "node:http2";
import type { Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { reattachPlugin, type PluginClient } from "../src/index.js";
import { tempDir } from "./helpers.js";

describe("a call's timeout after a transport failure, with the plugin still running", () => {
  const tmp = tempDir();
  const sock = `${tmp.dir}/plugin.sock`;
  const server = http2.createServer();
  const sockets = new Set<Socket>();
  let plugin: PluginClient;

  beforeAll(async () => {
    server.on("connection", (c: Socket) => sockets.add(c));
    server.on("session", (s) => s.on("error", () => {}));
    server.on("stream", (s, h) => {
      s.on("error", () => {});
      // Health: Unimplemented, which reattachPlugin's check accepts.
      if (h[":path"]!.includes("Health"))
        return s.respond(
          {
            ":status": 200,
            "content-type": "application/grpc",
            "grpc-status": "12",
          },
          { endStream: true },
        );
      if (h[":path"]!.includes("GRPCStdio")) return;
      // Every other call: the connection drops under it, once the call has reached the server.
      for (const c of sockets) c.destroy();
    });
    await new Promise<void>((r) => server.listen(sock, r));
    plugin = await reattachPlugin(
      { pid: process.pid, network: "unix", address: sock },
      { shutdownGraceMs: 600_000 },
    );
  });
  afterAll(() => {
    plugin?.close();
    server.close();
    tmp.cleanup();
  });

  /** `p`'s outcome, or "still waiting" when it has not settled long after the call's timeout. */
  const settled = (p: Promise<unknown>) =>
    Promise.race([
      p.then(
        () => "answered",
        (e: unknown) => e,
      ),
      new Promise((r) => setTimeout(() => r("still waiting"), 10_000)),
    ]);

  const expectTimeout = (err: unknown, method: string) => {
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.DeadlineExceeded);
    expect((err as ConnectError).rawMessage).toBe(
      `${method}: no answer within 300 ms (the call's timeout)`,
    );
    // What broke is kept.
    expect((err as ConnectError).cause).toBeInstanceOf(ConnectError);
  };

  it("unary: DeadlineExceeded at the timeout, not after the shutdown grace", async () => {
    expectTimeout(
      await settled(plugin.driver.capabilities({}, { timeoutMs: 300 })),
      "Driver.Capabilities",
    );
  }, 20_000);

  it("server stream: the same", async () => {
    const call = (async () => {
      for await (const _ of plugin.driver.taskStats(
        { taskId: "t" },
        { timeoutMs: 300 },
      ))
        void _;
    })();
    expectTimeout(await settled(call), "Driver.TaskStats");
  }, 20_000);
});
