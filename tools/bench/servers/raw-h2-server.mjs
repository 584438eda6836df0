// The limit: a bare node:http2 server (enlarged windows and frames) answering ExecTaskStreaming with
// the output already framed as gRPC messages: one pre-built message (5-byte prefix + protobuf header
// 0a <len> 0a <len> + zeros) written again and again with backpressure, no child process, no
// encoding, no copy; then the stdout/stderr close markers, exited, and grpc-status 0. The byte
// count comes from the setup command (`head -c N ...`). Prints the unix socket path first.
// Options: one JSON argument ({"messageSize": payload bytes per message, default 1 MiB;
// "relay": true to run the setup command instead and send each read of its stdout as one message,
// the gRPC prefix and protobuf header written beside the data, never copied: the plain relay, what
// a hand-written Node server pays for the real command with Node's own pipe reads}).
import * as http2 from "node:http2";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { ExecTaskStreamingRequestSchema } from "@nomadkit/protocol/driver";

const opts = JSON.parse(process.argv[2] ?? "{}");
const messageSize = opts.messageSize ?? 1024 * 1024;

function varint(n) {
  const out = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}

/** The gRPC prefix and protobuf header of {stdout: {data: <n bytes>}}, the data not included. */
function header(n) {
  const inner = [0x0a, ...varint(n)];
  const outer = [0x0a, ...varint(inner.length + n)];
  const buf = Buffer.alloc(5 + outer.length + inner.length);
  buf.writeUInt32BE(outer.length + inner.length + n, 1);
  buf.set(outer, 5);
  buf.set(inner, 5 + outer.length);
  return buf;
}
/** The gRPC frame of {stdout: {data: <n zero bytes>}}. */
const framed = (n) => Buffer.concat([header(n), Buffer.alloc(n)]);
const small = (hex) => {
  const p = Buffer.from(hex, "hex");
  const b = Buffer.alloc(5 + p.length);
  b.writeUInt32BE(p.length, 1);
  p.copy(b, 5);
  return b;
};
// stdout close, stderr close, exited + result{exit_code 0}.
const tail = Buffer.concat([small("0a021001"), small("12021001"), small("18012200")]);
// The same with result{exit_code: code} (1..127).
const tailWith = (code) => Buffer.concat([small("0a021001"), small("12021001"), small(`1801220208${code.toString(16).padStart(2, "0")}`)]);
const full = framed(messageSize);

const server = http2.createServer({
  settings: { initialWindowSize: 16 * 1024 * 1024, maxFrameSize: 16 * 1024 * 1024 - 1 },
});
server.on("session", (s) => s.setLocalWindowSize(64 * 1024 * 1024));
server.on("stream", (stream) => {
  let buf = Buffer.alloc(0);
  let started = false;
  stream.on("error", () => {});
  stream.on("data", (chunk) => {
    if (started) return;
    buf = Buffer.concat([buf, chunk]);
    if (buf.length < 5 || buf.length < 5 + buf.readUInt32BE(1)) return;
    started = true;
    const setup = fromBinary(ExecTaskStreamingRequestSchema, buf.subarray(5, 5 + buf.readUInt32BE(1))).setup;
    const i = setup?.command.indexOf("-c") ?? -1;
    const total = i >= 0 ? Number(setup.command[i + 1]) : 0;
    stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
    stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
    if (opts.relay) return void relay(stream, setup.command);
    let left = total;
    const pump = () => {
      while (left > 0) {
        const n = Math.min(left, messageSize);
        left -= n;
        const ok = stream.write(n === messageSize ? full : framed(n));
        if (!ok) return void stream.once("drain", pump);
      }
      stream.end(tail);
    };
    pump();
  });
});

/** Runs `argv` and sends each read of its stdout as one message, pausing it while the stream is full. */
function relay(stream, argv) {
  const child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "ignore"] });
  child.stdout.on("data", (chunk) => {
    stream.cork();
    stream.write(header(chunk.length));
    const ok = stream.write(chunk);
    stream.uncork();
    if (!ok) {
      child.stdout.pause();
      stream.once("drain", () => child.stdout.resume());
    }
  });
  child.on("error", () => {}); // then "close", with a negative code
  child.on("close", (code) => stream.end(code === 0 ? tail : tailWith(code > 0 ? Math.min(code, 127) : 127)));
}

const dir = mkdtempSync(join(tmpdir(), "nk-bench-raw-"));
const socket = join(dir, "raw.sock");
server.listen(socket, () => process.stdout.write(socket + "\n"));
const bye = () => {
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
};
process.on("SIGTERM", bye);
process.on("SIGINT", bye);
