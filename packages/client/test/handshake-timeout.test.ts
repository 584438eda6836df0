// A connection to the plugin that never becomes a working HTTP/2 connection must fail the calls
// waiting on it as grpc-go's client does (Nomad's): Unavailable, naming the socket, on every call
// path, once the connect timeout has passed without the plugin's SETTINGS ("failed to receive server
// preface within timeout"), or as soon as the plugin closes the connection or answers something that
// is not HTTP/2 ("connection closed before server preface received"). Being Unavailable, such a
// failure waits for the plugin's exit like any transport failure. The sockets are real: a hung
// plugin process (its kernel still accepts connections), and listeners that accept and then keep
// the connection silent, close it, or answer HTTP/1.1.
import { createServer, type Server, type Socket } from "node:net";
import { driver } from "@nomadkit/protocol";
import {
  afterAll,
  afterEach,
  beforeAll,
  describe,
  expect,
  it,
  vi,
} from "vitest";
import {
  ClientRuntime,
  DriverClient,
  PluginLaunchError,
  PluginShutdownError,
  createUnixSocketTransport,
  rawBidiStream,
  reattachPlugin,
  type ClientOptions,
} from "../src/index.js";
import { generateSelfSignedCertificate } from "../src/goplugin/certificate.js";
import { registerPluginSessions } from "../src/runtime/h2-call.js";
import { PluginSessionManager } from "../src/runtime/sessions.js";
import { connectUnixSocket } from "../src/runtime/unix-socket.js";
import { callPathFailures, status } from "./call-paths.js";
import { spawnFixture, tempDir, type Child } from "./helpers.js";

/** The connect timeout the tests use. */
const TIMEOUT_MS = 300;

const failures = (socketPath: string, options: ClientOptions = {}) =>
  callPathFailures(socketPath, options, TIMEOUT_MS);

const paths = [
  "unary, direct",
  "unary, through connect",
  "server stream",
  "raw bidi relay",
];

/** Every connection the listeners below accepted, destroyed after each test. */
const accepted: Socket[] = [];

/** A listener on `path` that hands each accepted connection to `onConnection`; what it receives is read and dropped. */
async function listen(
  path: string,
  onConnection: (socket: Socket) => void,
): Promise<Server> {
  const server = createServer((s) => {
    accepted.push(s);
    s.on("error", () => {});
    // Read: an unread preface would hold back the end of the connection, and with it its close.
    s.resume();
    onConnection(s);
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return server;
}

describe("a connection that never completes its HTTP/2 handshake", () => {
  const tmp = tempDir();
  const hungPath = `${tmp.dir}/hung.sock`;
  let hung: Child;
  const servers: Server[] = [];
  const silent = (socketPath: string) =>
    `cannot connect to the plugin at unix:${socketPath}: no HTTP/2 handshake within ${TIMEOUT_MS} ms (the connection was accepted, but the plugin did not answer)`;

  beforeAll(async () => {
    hung = spawnFixture("hung-plugin.mjs", [hungPath]);
    await hung.waitFor("ready");
  });
  afterEach(async () => {
    for (const s of accepted.splice(0)) s.destroy();
    for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
  });
  afterAll(() => {
    hung.proc.kill("SIGKILL");
    tmp.cleanup();
  });

  it("a hung plugin process (its socket accepts, nothing answers): every call path fails with Unavailable naming the socket after the connect timeout", async () => {
    const got = await failures(hungPath);
    expect(Object.keys(got)).toEqual(paths);
    for (const [path, err] of Object.entries(got)) {
      expect(status(err), path).toEqual({
        code: "Unavailable",
        message: silent(hungPath),
      });
    }
  }, 30_000);

  it("the failure counts as a transport failure: PluginShutdownError when the plugin's exit comes within the grace", async () => {
    const path = `${tmp.dir}/silent.sock`;
    // The "plugin" exits once this side has given up on a connection (the first timeout): the exit
    // arrives while the failed call waits the grace for it.
    const exit = new AbortController();
    servers.push(await listen(path, (s) => s.on("close", () => exit.abort())));
    const got = await failures(path, {
      pluginExited: exit.signal,
      shutdownGraceMs: 60_000,
    });
    for (const [p, err] of Object.entries(got)) {
      expect(err, p).toBeInstanceOf(PluginShutdownError);
      expect(status((err as Error).cause), p).toEqual({
        code: "Unavailable",
        message: silent(path),
      });
    }
  }, 30_000);

  it("a listener that closes each connection at once: Unavailable naming the socket, at once", async () => {
    const path = `${tmp.dir}/closing.sock`;
    servers.push(await listen(path, (s) => s.destroy()));
    for (const [p, err] of Object.entries(await failures(path))) {
      expect(status(err), p).toEqual({
        code: "Unavailable",
        message: `cannot connect to the plugin at unix:${path}: it closed the connection before the HTTP/2 handshake`,
      });
    }
  }, 30_000);

  it("a listener that answers HTTP/1.1: Unavailable naming the socket and saying it is not HTTP/2", async () => {
    const path = `${tmp.dir}/http1.sock`;
    servers.push(
      await listen(path, (s) =>
        s.end("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"),
      ),
    );
    for (const [p, err] of Object.entries(await failures(path))) {
      expect(status(err), p).toEqual({
        code: "Unavailable",
        message: `cannot connect to the plugin at unix:${path}: it does not answer in HTTP/2 (Protocol error)`,
      });
    }
  }, 30_000);

  it("a call cancelled or past its deadline while it waits for the handshake lets go of the connection at once, on every call path", async () => {
    // No connect timeout: only the call's own end can let go of what it holds. Before, each such
    // call kept its stream open, the connection referenced and the host process alive.
    const sessions = new PluginSessionManager(
      "http://localhost",
      { createConnection: () => connectUnixSocket(hungPath) },
      { connectTimeoutMs: 0, target: `unix:${hungPath}` },
    );
    const plugin = createUnixSocketTransport(hungPath, {
      sessionManager: sessions,
    });
    registerPluginSessions(plugin, sessions);
    const direct = new DriverClient(new ClientRuntime(plugin));
    const viaConnect = new DriverClient(
      new ClientRuntime(
        createUnixSocketTransport(hungPath, { sessionManager: sessions }),
      ),
    );
    const drain = async (it: AsyncIterable<unknown>) => {
      for await (const _ of it) return new Error("a response arrived");
      return new Error("ended without an error");
    };
    const calls: Record<string, (signal: AbortSignal) => Promise<unknown>> = {
      "unary, direct": (signal) => direct.capabilities({}, { signal }),
      "unary, direct, deadline": () =>
        direct.capabilities({}, { timeoutMs: 200 }),
      "unary, through connect": (signal) =>
        viaConnect.capabilities({}, { signal }),
      "unary, through connect, deadline": () =>
        viaConnect.capabilities({}, { timeoutMs: 200 }),
      "server stream": (signal) =>
        drain(direct.taskStats({ taskId: "t1" }, { signal })),
      "raw bidi relay": (signal) =>
        drain(
          rawBidiStream(
            new ClientRuntime(plugin),
            driver.Driver.method.execTaskStreaming,
            (async function* () {})(),
            { signal },
          )!,
        ),
    };
    try {
      for (const [path, call] of Object.entries(calls)) {
        const cancel = new AbortController();
        const ended = call(cancel.signal).catch((e: unknown) => e);
        if (!path.endsWith("deadline")) {
          // The call is waiting on the connection: its stream is open.
          await vi.waitFor(() => expect(sessions.state(), path).toBe("open"));
          cancel.abort();
        }
        expect(status(await ended), path).toMatchObject({
          code: path.endsWith("deadline") ? "DeadlineExceeded" : "Canceled",
        });
        await vi.waitFor(() => expect(sessions.state(), path).toBe("idle"), {
          timeout: 10_000,
        });
      }
    } finally {
      sessions.abort();
    }
  }, 60_000);

  it("reattachPlugin to a hung plugin fails after connectTimeoutMs, with or without AutoMTLS (a TLS handshake nobody answers)", async () => {
    const client = await generateSelfSignedCertificate();
    const server = await generateSelfSignedCertificate();
    for (const tls of [
      undefined,
      {
        serverCertPem: server.certPem,
        clientCertPem: client.certPem,
        clientKeyPem: client.keyPem,
      },
    ]) {
      const err = await reattachPlugin(
        {
          pid: hung.proc.pid!,
          network: "unix",
          address: hungPath,
          ...(tls && { tls }),
        },
        { connectTimeoutMs: TIMEOUT_MS },
      ).catch((e: unknown) => e);
      expect(err, tls ? "TLS" : "plain").toBeInstanceOf(PluginLaunchError);
      expect((err as Error).message, tls ? "TLS" : "plain").toBe(
        `reattach: cannot talk gRPC to plugin ${hung.proc.pid} at unix:${hungPath}: [unavailable] ${silent(hungPath)}`,
      );
    }
  }, 30_000);
});
