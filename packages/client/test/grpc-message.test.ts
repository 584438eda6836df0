// A grpc-message that is not valid percent-encoding (a bare "%", an escape that is not UTF-8) must
// not cost the caller the status: the gRPC spec says a client decoding an invalid value MUST NOT
// error or throw the message away, and grpc-go and grpc-js decode it leniently. connect's
// decodeURIComponent threw a URIError instead (a unary call rejected with that, not a ConnectError;
// a stream failed with Unknown "URI malformed").
import * as http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { DriverClient, createUnixSocketTransport, reattachPlugin, type PluginClient } from "../src/index.js";
import { tempDir } from "./helpers.js";

const grpcHeaders = { ":status": 200, "content-type": "application/grpc" };

describe("a grpc-message that is not valid percent-encoding", () => {
  const tmp = tempDir();
  const sock = `${tmp.dir}/plugin.sock`;
  const server = http2.createServer();
  let plugin: PluginClient;

  beforeAll(async () => {
    server.on("session", (s) => s.on("error", () => {}));
    server.on("stream", (s, h) => {
      s.on("error", () => {});
      // Health: Unimplemented, which reattachPlugin's check accepts.
      if (h[":path"]!.includes("Health"))
        return s.respond(
          { ...grpcHeaders, "grpc-status": "12" },
          { endStream: true },
        );
      if (h[":path"]!.includes("GRPCStdio")) return;
      const status = {
        "grpc-status": "9",
        "grpc-message": h["x-message"] as string,
      };
      // Trailers-only (the status in the response header), or a trailer after the header.
      if (h["x-where"] === "header")
        return s.respond({ ...grpcHeaders, ...status }, { endStream: true });
      s.respond(grpcHeaders, { waitForTrailers: true });
      s.once("wantTrailers", () => s.sendTrailers(status));
      s.end();
    });
    await new Promise<void>((r) => server.listen(sock, r));
    plugin = await reattachPlugin({
      pid: process.pid,
      network: "unix",
      address: sock,
    });
  });
  afterAll(() => {
    plugin?.close();
    server.close();
    tmp.cleanup();
  });

  const cases: [string, string][] = [
    ["100% sure", "100% sure"],
    ["bad %zz escape, good %41 one", "bad %zz escape, good A one"],
    ["caf%C3%A9 at 50%", "café at 50%"],
    ["not UTF-8: %FF", "not UTF-8: \uFFFD"],
    ["trailing %4", "trailing %4"],
  ];

  // The connection reattachPlugin makes, and the public transport for a socket (which decoded
  // with connect's decodeURIComponent, and failed with a URIError).
  const viaSocket = new DriverClient(createUnixSocketTransport(sock));
  const clients: [string, () => DriverClient][] = [
    ["reattachPlugin", () => plugin.driver],
    ["createUnixSocketTransport", () => viaSocket],
  ];
  for (const [via, client] of clients) {
    for (const where of ["header", "trailer"]) {
      it.each(cases)(`${via}: unary, status in the ${where}: %j`, async (sent, shown) => {
        const headers = { "x-message": sent, "x-where": where };
        const err = await client()
          .capabilities({}, { headers })
          .catch((e: unknown) => e);
        expect(err).toBeInstanceOf(ConnectError);
        expect((err as ConnectError).code).toBe(Code.FailedPrecondition);
        expect((err as ConnectError).rawMessage).toBe(shown);
      });

      it.each(cases)(
        `${via}: server stream, status in the ${where}: %j`,
        async (sent, shown) => {
          const headers = { "x-message": sent, "x-where": where };
          const err = await (async () => {
            for await (const _ of client().taskStats(
              { taskId: "t" },
              { headers },
            ))
              void _;
          })().catch((e: unknown) => e);
          expect(err).toBeInstanceOf(ConnectError);
          expect((err as ConnectError).code).toBe(Code.FailedPrecondition);
          expect((err as ConnectError).rawMessage).toBe(shown);
        },
      );
    }
  }

  it("a valid grpc-message is decoded as before", async () => {
    const headers = {
      "x-message": "task%20t1%20not%20found%3A%2050%25",
      "x-where": "trailer",
    };
    const err = await plugin.driver
      .capabilities({}, { headers })
      .catch((e: unknown) => e);
    expect((err as ConnectError).rawMessage).toBe("task t1 not found: 50%");
  });
});
