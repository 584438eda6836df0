// The four ways a call reaches a plugin, for tests of how each fails on a socket: unary directly on
// the plugin connection's sessions (as launchPlugin/reattachPlugin make it), unary through connect,
// a server stream, and a raw bidi relay.
import { Code, ConnectError } from "@connectrpc/connect";
import { driver } from "@nomadkit/protocol";
import {
  ClientRuntime,
  DriverClient,
  createUnixSocketTransport,
  rawBidiStream,
  type ClientOptions,
} from "../src/index.js";
import { registerPluginSessions } from "../src/runtime/h2-call.js";
import { PluginSessionManager } from "../src/runtime/sessions.js";
import { connectUnixSocket } from "../src/runtime/unix-socket.js";

/** How each call path fails on `socketPath`, by path name; `connectTimeoutMs` as the client's option. */
export async function callPathFailures(
  socketPath: string,
  options: ClientOptions = {},
  connectTimeoutMs?: number,
): Promise<Record<string, unknown>> {
  const timeout = connectTimeoutMs === undefined ? {} : { connectTimeoutMs };
  const sessions = new PluginSessionManager(
    "http://localhost",
    { createConnection: () => connectUnixSocket(socketPath) },
    { ...timeout, target: `unix:${socketPath}` },
  );
  const pluginConnection = createUnixSocketTransport(socketPath, {
    sessionManager: sessions,
  });
  registerPluginSessions(pluginConnection, sessions);
  const direct = new ClientRuntime(pluginConnection, options);
  const viaConnect = new ClientRuntime(
    createUnixSocketTransport(socketPath, timeout),
    options,
  );
  const drain = async (
    it: AsyncIterable<unknown> | undefined,
  ): Promise<unknown> => {
    try {
      for await (const _ of it ?? []) return new Error("a response arrived");
      return new Error("ended without an error");
    } catch (err) {
      return err;
    }
  };
  const out = {
    "unary, direct": await new DriverClient(direct)
      .capabilities({})
      .catch((e: unknown) => e),
    "unary, through connect": await new DriverClient(viaConnect)
      .capabilities({})
      .catch((e: unknown) => e),
    "server stream": await drain(
      new DriverClient(direct).taskStats({ taskId: "t1" }),
    ),
    "raw bidi relay": await drain(
      rawBidiStream(
        direct,
        driver.Driver.method.execTaskStreaming,
        (async function* () {})(),
      ),
    ),
  };
  sessions.abort();
  return out;
}

/** Code and message of a ConnectError; the error itself otherwise. */
export const status = (err: unknown) =>
  err instanceof ConnectError
    ? { code: Code[err.code], message: err.rawMessage }
    : err;
