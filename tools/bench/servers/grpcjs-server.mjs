// The peer: the same Driver handlers (InspectTask, TaskStats, ExecTaskStreaming) served by
// @grpc/grpc-js with @grpc/proto-loader on the repository's proto/ files. ExecTaskStreaming runs the
// setup command as a child process (pipes) and streams its stdout/stderr as ExecTaskStreamingResponse
// chunks with backpressure, then the close markers and one exited message, like the SDK does.
// Prints the unix socket path on the first stdout line. Options: one JSON argument
// ({"readSize": bytes of each read from the child's pipes}).
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const opts = JSON.parse(process.argv[2] ?? "{}");
const protoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../../proto");
const def = protoLoader.loadSync(["hashicorp/nomad/plugins/drivers/proto/driver.proto"], {
  includeDirs: [protoRoot],
  keepCase: false,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
});
const pkg = grpc.loadPackageDefinition(def);
const Driver = pkg.hashicorp.nomad.plugins.drivers.proto.Driver;

const startedAt = { seconds: String(Math.floor(Date.now() / 1000)), nanos: 0 };
// Same minimum period as the SDK: 10 ms.
const intervalMs = (d) => {
  if (!d) return 1000;
  const ms = Number(d.seconds ?? 0) * 1000 + (d.nanos ?? 0) / 1e6;
  return ms > 0 ? Math.max(10, ms) : 1000;
};

const handlers = {
  inspectTask(call, cb) {
    cb(null, {
      task: { id: call.request.taskId, name: "bench", state: "RUNNING", startedAt },
      driver: { attributes: { pid: String(process.pid), executor_pid: String(process.pid) } },
    });
  },

  taskStats(call) {
    const period = intervalMs(call.request.collectionInterval);
    let timer;
    const send = () => {
      const now = Date.now();
      call.write({
        stats: {
          id: call.request.taskId,
          timestamp: { seconds: String(Math.floor(now / 1000)), nanos: (now % 1000) * 1e6 },
          aggResourceUsage: {
            cpu: { percent: 1.5, totalTicks: 36, measuredFields: ["PERCENT", "TOTAL_TICKS"] },
            memory: { rss: String(12 << 20), measuredFields: ["RSS"] },
          },
        },
      });
      timer = setTimeout(send, period);
    };
    send();
    const stop = () => clearTimeout(timer);
    call.on("cancelled", stop);
    call.on("error", stop);
    call.on("close", stop);
  },

  execTaskStreaming(call) {
    let child;
    call.on("error", () => child?.kill("SIGKILL"));
    call.on("cancelled", () => child?.kill("SIGKILL"));
    call.once("data", (first) => {
      const setup = first.setup;
      if (!setup || !setup.command?.length) {
        call.emit("error", { code: grpc.status.INVALID_ARGUMENT, details: "first message must be setup" });
        return;
      }
      child = spawn(setup.command[0], setup.command.slice(1), { stdio: ["pipe", "pipe", "pipe"] });
      if (opts.readSize) {
        // Same read size as the nomadkit exec engine uses for the child's pipes.
        for (const s of [child.stdout, child.stderr]) s._readableState.highWaterMark = opts.readSize;
      }
      call.on("data", (m) => {
        if (m.stdin?.data?.length) child.stdin.write(m.stdin.data);
        if (m.stdin?.close) child.stdin.end();
      });
      child.stdin.on("error", () => {});
      let pending = 2;
      const pump = (src, field) =>
        new Promise((done) => {
          src.on("data", (data) => {
            if (!call.write({ [field]: { data } })) {
              src.pause();
              call.once("drain", () => src.resume());
            }
          });
          src.once("end", () => {
            call.write({ [field]: { close: true } });
            done();
          });
        });
      const out = Promise.all([pump(child.stdout, "stdout"), pump(child.stderr, "stderr")]);
      child.once("close", async (code, sig) => {
        await out;
        const signal = sig ? ({ SIGKILL: 9, SIGTERM: 15, SIGINT: 2 }[sig] ?? 0) : 0;
        call.write({ exited: true, result: { exitCode: signal ? 128 + signal : code ?? 0, signal } });
        call.end();
        void pending;
      });
    });
  },
};

const dir = mkdtempSync(join(tmpdir(), "nk-bench-grpcjs-"));
const socket = join(dir, "grpc.sock");
const server = new grpc.Server({ "grpc.max_receive_message_length": -1, "grpc.max_send_message_length": -1 });
server.addService(Driver.service, handlers);
server.bindAsync(`unix://${socket}`, grpc.ServerCredentials.createInsecure(), (err) => {
  if (err) {
    process.stderr.write(`grpc-js bind: ${err.message}\n`);
    process.exit(1);
  }
  process.stdout.write(socket + "\n");
});
const bye = () => {
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
};
process.on("SIGTERM", bye);
process.on("SIGINT", bye);
