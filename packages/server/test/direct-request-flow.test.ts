// The direct path's request side under flow control: it pauses the HTTP/2 stream while too many
// request messages wait for the handler, and a call that ends while paused (the handler done
// without reading them all, a unary call sent extra messages) must still let the stream close.
// Otherwise Node waits for the unread data to be consumed before destroying the stream: it, and
// the call's objects, stay for the life of the connection, and a graceful session close waits on it.
import * as http2 from "node:http2";
import * as net from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { ExecTaskStreamingRequestSchema } from "@nomadkit/protocol/driver";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { registerDriver } from "../src/gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import { ServerRuntime, createPluginHandler } from "../src/runtime.js";
import { streamListener } from "../src/runtime/adapter.js";
import { deferred } from "./runtime-helpers.js";

const DRIVER = "/hashicorp.nomad.plugins.drivers.proto.Driver";

const frame = (bytes: Uint8Array) => {
  const b = Buffer.alloc(5 + bytes.byteLength);
  b.writeUInt32BE(bytes.byteLength, 1);
  b.set(bytes, 5);
  return b;
};

describe.each(["stream", "request"] as const)(
  "request flow control (%s entry)",
  (entry) => {
    let dir: string;
    let server: http2.Http2Server;
    let socket: string;
    /** The server's streams not closed yet. */
    const open = new Set<http2.ServerHttp2Stream>();
    /** Resolved when the direct path first pauses a request stream. */
    let paused = deferred();

    beforeAll(async () => {
      const handler = createPluginHandler((router) =>
        registerDriver(
          router,
          {
            // Answers once the request side is paused, without reading a single request.
            async *execTaskStreaming() {
              await paused.promise;
              yield { exited: true, result: { exitCode: 0 } };
            },
            inspectTask: () => ({}),
          },
          new ServerRuntime(),
        ),
      );
      server =
        entry === "stream"
          ? http2.createServer()
          : http2.createServer(handler as never);
      if (entry === "stream")
        server.on("stream", streamListener(server, handler as never));
      server.on("stream", (stream) => {
        open.add(stream);
        stream.once("close", () => open.delete(stream));
        const pause = stream.pause;
        stream.pause = function (this: http2.ServerHttp2Stream) {
          paused.resolve();
          return pause.call(this);
        };
      });
      dir = mkdtempSync(join(tmpdir(), "nk-flow-"));
      socket = join(dir, "s.sock");
      await new Promise<void>((r) => server.listen(socket, r));
    });

    afterAll(async () => {
      for (const s of open) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
      rmSync(dir, { recursive: true, force: true });
    });

    /** Sends `first` then `rest` (more than a stream's flow-control window) and half-closes. */
    async function callAndClose(
      path: string,
      first: Buffer,
      rest: Buffer,
    ): Promise<Record<string, unknown>> {
      paused = deferred();
      const session = http2.connect("http://localhost", {
        createConnection: () => net.connect(socket),
      });
      const req = session.request({
        ":method": "POST",
        ":path": path,
        "content-type": "application/grpc",
        te: "trailers",
      });
      req.on("data", () => {});
      const trailers = new Promise<Record<string, unknown>>((r) =>
        req.once("trailers", (t) => r(t)),
      );
      req.write(first);
      req.write(rest);
      req.end();
      const t = await trailers;
      // The call is over; its server stream must close (and the client's with it).
      await vi.waitFor(() => expect(open.size).toBe(0), { timeout: 10_000 });
      await vi.waitFor(() => expect(req.closed).toBe(true), {
        timeout: 10_000,
      });
      session.close();
      return t;
    }

    it("a streaming call that ends without reading its paused requests closes its stream", async () => {
      const stdin = frame(
        toBinary(
          ExecTaskStreamingRequestSchema,
          create(ExecTaskStreamingRequestSchema, {
            stdin: { data: Buffer.alloc(1000) },
          }),
        ),
      );
      const t = await callAndClose(
        `${DRIVER}/ExecTaskStreaming`,
        Buffer.concat(Array(40).fill(stdin)),
        Buffer.concat(Array(160).fill(stdin)),
      );
      expect(t["grpc-status"]).toBe("0");
    });

    it("a unary call sent too many messages is refused and closes its stream", async () => {
      // Empty messages: the first chunk alone fills the queue (the stream is paused), and the rest
      // (over 64 KiB) is still unread when the call is refused.
      const empty = frame(new Uint8Array());
      const t = await callAndClose(
        `${DRIVER}/InspectTask`,
        Buffer.concat(Array(40).fill(empty)),
        Buffer.concat(Array(20_000).fill(empty)),
      );
      expect(t["grpc-status"]).toBe("12");
      expect(String(t["grpc-message"])).toMatch(/extra%20input%20message/);
    });
  },
);
