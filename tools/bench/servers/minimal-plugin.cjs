#!/usr/bin/env node
// The start-up and idle-memory limit: the least a Node.js go-plugin gRPC plugin must do. One
// CommonJS file, no dependencies, no protobuf runtime: node:http2 on a unix socket, the go-plugin
// handshake line on stdout, canned answers (bytes made by the bench runner) for the health check
// and PluginInfo, GRPCStdio's stream left open, GRPCController.Shutdown answered and the process
// gone. Anything a real plugin adds on top (a protobuf runtime, descriptors, config decoding,
// logging, the driver API) is what the reference driver's start-up ratio pays for beyond this one.
// Env: NOMADKIT_BENCH_PLUGIN_INFO = hex of the PluginInfoResponse to answer.
"use strict";
if (process.env.NOMAD_PLUGIN_MAGIC_COOKIE === undefined) {
  process.stderr.write("minimal-plugin: start it through a go-plugin host (launchPlugin)\n");
  process.exit(1);
}
const http2 = require("node:http2");
const { mkdtempSync, rmSync } = require("node:fs");
const { tmpdir } = require("node:os");
const { join } = require("node:path");

const framed = (payload) => {
  const b = Buffer.alloc(5 + payload.length);
  b.writeUInt32BE(payload.length, 1);
  payload.copy(b, 5);
  return b;
};
const answers = {
  // HealthCheckResponse{status: SERVING}
  "/grpc.health.v1.Health/Check": framed(Buffer.from("0801", "hex")),
  "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo": framed(Buffer.from(process.env.NOMADKIT_BENCH_PLUGIN_INFO ?? "", "hex")),
  "/plugin.GRPCController/Shutdown": framed(Buffer.alloc(0)),
};

const dir = mkdtempSync(join(tmpdir(), "minimal-plugin-"));
const socket = join(dir, "plugin.sock");
const server = http2.createServer();
server.on("stream", (stream, headers) => {
  const path = headers[":path"];
  stream.on("error", () => {});
  if (path === "/plugin.GRPCStdio/StreamStdio") {
    stream.respond({ ":status": 200, "content-type": "application/grpc" });
    return; // nothing to forward; ends with the process
  }
  stream.resume();
  stream.on("end", () => {
    const answer = answers[path];
    if (answer === undefined) {
      stream.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12" }, { endStream: true });
      return;
    }
    stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
    stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
    stream.end(answer);
    if (path === "/plugin.GRPCController/Shutdown") {
      stream.on("close", () => {
        rmSync(dir, { recursive: true, force: true });
        process.exit(0);
      });
    }
  });
});
server.listen(socket, () => {
  process.stdout.write(`1|2|unix|${socket}|grpc|\n`);
});
