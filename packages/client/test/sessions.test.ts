// The host's HTTP/2 sessions to a plugin (PluginSessionManager) must survive a plugin that closes
// its connection as the host lets go of it: connect-node destroys a session with an error when a
// GOAWAY comes with no stream open, after an abort() has removed connect-node's own listeners
// (launchPlugin's kill() aborts as the plugin exits). The error must not crash the host process.
import * as http2 from "node:http2";
import { connect } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { PluginSessionManager } from "../src/runtime/sessions.js";
import { tempDir } from "./helpers.js";

describe("PluginSessionManager", () => {
  let cleanup: (() => void)[] = [];
  afterEach(() => {
    for (const c of cleanup.splice(0)) c();
  });

  it("survives a GOAWAY with no stream open that arrives as it is aborted", async () => {
    const tmp = tempDir();
    const socket = `${tmp.dir}/plugin.sock`;
    const server = http2.createServer();
    // One call answered, then the server goes away (GOAWAY) with no stream open: a plugin exiting.
    server.on("stream", (stream) => {
      const session = stream.session!;
      stream.respond({ ":status": 200 });
      stream.end("ok");
      stream.on("close", () => session.close());
    });
    await new Promise<void>((r) => server.listen(socket, r));
    cleanup.push(() => server.close(), () => tmp.cleanup());

    const manager = new PluginSessionManager("http://localhost", { createConnection: () => connect(socket) });
    const stream = await manager.request("POST", "/x", {}, {});
    const session = stream.session!;
    // After connect-node's own GOAWAY listener (which destroys the session with an error on the
    // next tick): the host lets go of the connection, as kill() does when the plugin exits.
    session.on("goaway", () => manager.abort());
    stream.resume();
    stream.end();
    await new Promise<void>((r) => session.once("close", r));
    // Nothing was thrown at the process (vitest fails the run on an uncaught error); the manager
    // is done with the connection.
    expect(session.destroyed).toBe(true);
    expect(manager.state()).not.toBe("open");
  });
});
