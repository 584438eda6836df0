// A streaming call is over once its status arrives, whatever the request side still has to send
// (grpc-go's client ends the stream then too). A request iterable that never ends (an exec
// session's stdin that stays open, as Nomad's never half-closes) must not keep the HTTP/2 stream,
// and all the server holds for it, open for the life of the connection. And a stream that runs out
// of its timeout says which call it was.
import { once } from "node:events";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import * as http2 from "node:http2";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, describe, expect, it } from "vitest";
import { driver } from "@nomadkit/protocol";
import { Code } from "@connectrpc/connect";
import { DriverClient, RequestQueue, createUnixSocketTransport, reattachPlugin } from "../src/index.js";
import { tempDir } from "./helpers.js";

const tmp = tempDir();
afterAll(() => tmp.cleanup());

describe("streaming calls", () => {
  it("closes its HTTP/2 stream when the status arrives, though its requests never end", async () => {
    const exited = toBinary(driver.ExecTaskStreamingResponseSchema, create(driver.ExecTaskStreamingResponseSchema, { exited: true, result: { exitCode: 0 } }));
    const body = Buffer.alloc(5 + exited.length);
    body.writeUInt32BE(exited.length, 1);
    body.set(exited, 5);
    const closed: Promise<unknown>[] = [];
    const server = http2.createServer();
    // The client's close at the end (GOAWAY CANCEL) is not this test's business.
    server.on("session", (session) => session.on("error", () => {}));
    server.on("stream", (s, h) => {
      s.on("error", () => {});
      // reattachPlugin's health check: no health service here.
      if (h[":path"]!.includes("Health")) return s.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12" }, { endStream: true });
      if (!h[":path"]!.endsWith("/ExecTaskStreaming")) return; // GRPCStdio: reattachPlugin's
      closed.push(once(s, "close"));
      s.resume(); // reads the requests as a gRPC server does
      // Answers at once, without waiting for the client's half-close.
      s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      s.once("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
      s.end(body);
    });
    const sock = join(tmp.dir, "end.sock");
    await new Promise<void>((r) => server.listen(sock, r));
    // A plugin connection, as launchPlugin makes it (its own HTTP/2 sessions).
    const plugin = await reattachPlugin({ pid: process.pid, network: "unix", address: sock });
    const client = plugin.driver;
    // An async generator waiting for input that never comes (an exec session's open stdin): its
    // return() waits for that input too, so the call cannot end the request side through it.
    const stdin = new RequestQueue<Uint8Array>();
    const requests = (async function* () {
      yield { setup: { taskId: "t", command: ["true"] } };
      for await (const data of stdin) yield { stdin: { data } };
    })();
    try {
      const got = [];
      for await (const r of client.execTaskStreaming(requests)) got.push(r.exited);
      expect(got).toEqual([true]);
      // Before: the stream stayed half-closed (remote) on our side, open on the server's, until the
      // connection went away.
      await Promise.all(closed);
      expect(closed).toHaveLength(1);
    } finally {
      plugin.close();
      server.close();
    }
  }, 20_000);

  it("closes its HTTP/2 stream when a request is still being sent as the status arrives", async () => {
    // A command that fails to start: the executor answers at once while Nomad's stdin close is on
    // its way. connect-node's request writer stops without ending the request side when, once a
    // write completes, it finds the response over: each such session left a stream open on both
    // sides for the life of the connection (about one in twenty failed sessions with a real
    // executor). Here the server's small window holds the write until the call has failed.
    let closed: Promise<unknown> | undefined;
    let drain!: () => void;
    const server = http2.createServer({ settings: { initialWindowSize: 256 } });
    server.on("session", (session) => session.on("error", () => {}));
    server.on("stream", (s, h) => {
      s.on("error", () => {});
      if (h[":path"]!.includes("Health")) return s.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12" }, { endStream: true });
      if (!h[":path"]!.endsWith("/ExecTaskStreaming")) return;
      closed = once(s, "close");
      // Reads the requests (as a gRPC server reads the rest), but only once the client has seen
      // the answer: until then the second request waits for window.
      s.on("data", () => {});
      s.pause();
      drain = () => s.resume();
      // Headers, then the status in trailers, as the executor answers.
      s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      s.once("wantTrailers", () => s.sendTrailers({ "grpc-status": "3", "grpc-message": "no such command" }));
      s.end();
    });
    const sock = join(tmp.dir, "late.sock");
    await new Promise<void>((r) => server.listen(sock, r));
    const plugin = await reattachPlugin({ pid: process.pid, network: "unix", address: sock });
    const stdin = new RequestQueue<Uint8Array>();
    const requests = (async function* () {
      yield { setup: { taskId: "t", command: ["/no/such/command"] } };
      yield { stdin: { data: new Uint8Array(4096) } }; // more than the server's window
      for await (const data of stdin) yield { stdin: { data } };
    })();
    try {
      const err = await (async () => {
        for await (const _ of plugin.driver.execTaskStreaming(requests)) void _;
      })().catch((e: unknown) => e);
      expect(err).toMatchObject({ code: Code.InvalidArgument });
      drain();
      const settled = await Promise.race([closed!.then(() => "closed"), new Promise((r) => setTimeout(r, 10_000, "still open"))]);
      expect(settled).toBe("closed");
    } finally {
      plugin.close();
      server.close();
    }
  }, 30_000);

  it("reads every message and the status while its requests go on after the trailers", async () => {
    // A command that exits while stdin still flows, read by a slow reader (nomadkit exec -i with a
    // slow terminal): connect-node writes requests until the caller has read the whole response,
    // so the request side must not end before that (a write after the end failed the response).
    const COUNT = 40;
    const out = toBinary(driver.ExecTaskStreamingResponseSchema, create(driver.ExecTaskStreamingResponseSchema, { stdout: { data: new Uint8Array(16 * 1024) } }));
    const exited = toBinary(driver.ExecTaskStreamingResponseSchema, create(driver.ExecTaskStreamingResponseSchema, { exited: true, result: { exitCode: 0 } }));
    const frame = (m: Uint8Array) => {
      const b = Buffer.alloc(5 + m.length);
      b.writeUInt32BE(m.length, 1);
      b.set(m, 5);
      return b;
    };
    const server = http2.createServer();
    server.on("session", (session) => session.on("error", () => {}));
    server.on("stream", (s, h) => {
      s.on("error", () => {});
      if (h[":path"]!.includes("Health")) return s.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12" }, { endStream: true });
      if (!h[":path"]!.endsWith("/ExecTaskStreaming")) return;
      s.resume();
      if (h["x-trailers-only"] !== undefined) return s.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "0" }, { endStream: true });
      s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      s.once("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
      for (let i = 0; i < COUNT; i++) s.write(frame(out));
      s.end(frame(exited));
    });
    const sock = join(tmp.dir, "slow.sock");
    await new Promise<void>((r) => server.listen(sock, r));
    const plugin = await reattachPlugin({ pid: process.pid, network: "unix", address: sock });
    let reading = true;
    const requests = async function* () {
      yield { setup: { taskId: "t", command: ["cat"] } };
      // stdin keeps coming while the output is read
      while (reading) {
        yield { stdin: { data: new Uint8Array(8) } };
        await new Promise((r) => setImmediate(r));
      }
    };
    try {
      let stdout = 0;
      let exit: boolean | undefined;
      for await (const r of plugin.driver.execTaskStreaming(requests())) {
        if (r.stdout !== undefined) stdout++;
        if (r.exited) exit = r.exited;
        await new Promise((res) => setTimeout(res, 5)); // a slow reader
      }
      expect(stdout).toBe(COUNT);
      expect(exit).toBe(true);
      // The same with an answer in one HEADERS frame (no messages, status OK).
      let messages = 0;
      for await (const _ of plugin.driver.execTaskStreaming(requests(), { headers: { "x-trailers-only": "1" } })) messages++;
      expect(messages).toBe(0);
    } finally {
      reading = false;
      plugin.close();
      server.close();
    }
  }, 30_000);

  it("a stream that outlives its timeout names the method and the timeout", async () => {
    const server = http2.createServer();
    server.on("session", (session) => session.on("error", () => {}));
    server.on("stream", (s) => {
      s.on("error", () => {});
      s.respond({ ":status": 200, "content-type": "application/grpc" }); // and nothing more
    });
    const sock = join(tmp.dir, "silent.sock");
    await new Promise<void>((r) => server.listen(sock, r));
    const client = new DriverClient(createUnixSocketTransport(sock));
    try {
      const err = await (async () => {
        for await (const _ of client.taskEvents({}, { timeoutMs: 100 })) void _;
      })().catch((e: unknown) => e);
      expect(err).toMatchObject({ code: Code.DeadlineExceeded, rawMessage: "Driver.TaskEvents: no answer within 100 ms (the call's timeout)" });
    } finally {
      server.close();
    }
  });

  it("holds no request message once it is sent, while the call goes on", async () => {
    const gc = (() => {
      setFlagsFromString("--expose-gc");
      const fn = runInNewContext("gc") as () => void;
      setFlagsFromString("--no-expose-gc");
      return fn;
    })();
    let received = 0;
    const server = http2.createServer();
    server.on("session", (session) => session.on("error", () => {}));
    server.on("stream", (s) => {
      s.on("error", () => {});
      s.on("data", (d: Buffer) => void (received += d.length));
      s.respond({ ":status": 200, "content-type": "application/grpc" }); // answers only at the end
    });
    const sock = join(tmp.dir, "held.sock");
    await new Promise<void>((r) => server.listen(sock, r));
    const client = new DriverClient(createUnixSocketTransport(sock));
    let collected = 0;
    const registry = new FinalizationRegistry<void>(() => void collected++);
    const COUNT = 20;
    const SIZE = 256 * 1024;
    const ac = new AbortController();
    let sent!: () => void;
    const allSent = new Promise<void>((r) => (sent = r));
    async function* requests() {
      yield { setup: { taskId: "t", command: ["cat"] } };
      for (let i = 0; i < COUNT; i++) {
        const data = new Uint8Array(SIZE);
        registry.register(data, undefined);
        yield { stdin: { data } };
      }
      sent();
      await new Promise(() => {}); // stdin stays open, as Nomad's
    }
    const call = (async () => {
      for await (const _ of client.execTaskStreaming(requests(), { signal: ac.signal })) void _;
    })().catch(() => undefined);
    try {
      await allSent;
      for (let i = 0; i < 200 && received < COUNT * SIZE; i++) await new Promise((r) => setTimeout(r, 10));
      for (let i = 0; i < 20 && collected < COUNT - 2; i++) {
        gc();
        await new Promise((r) => setTimeout(r, 10));
      }
      // Before: every message stayed reachable until the call ended (a race per message on a pending promise).
      expect(collected).toBeGreaterThanOrEqual(COUNT - 2);
    } finally {
      ac.abort();
      await call;
      server.close();
    }
  }, 30_000);
});
