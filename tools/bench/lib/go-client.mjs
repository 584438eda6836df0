// The second client: tools/bench/client-go, grpc-go dialled as go-plugin dials a plugin, so the
// servers are also measured from the client stack Nomad itself uses (its own threads, grpc-go's
// flow control and 16 KiB frames), not only from this process's node:http2 client; and the
// start-up cycle with go-plugin's own Client as the host. Built with tools/go/build.sh (Debian's Go
// packages, offline); exec and unary measures take `goExecOnce` / `goUnaryRound` bound to it in
// place of the Node client's functions.
import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "./targets.mjs";
import { cpuMeter } from "./util.mjs";

export const GO_CLIENT_DESCRIPTION =
  "grpc-go 1.33 (Debian) as go-plugin dials a plugin: h2c over the unix socket, grpc-go's default windows (BDP-sized) and 16 KiB frames, no message size limits; message fields read with protowire, payload never copied out (tools/bench/client-go)";

/** Builds the client (installing Debian's Go packages when missing); resolves to its path. */
export function buildGoClient() {
  if (process.platform !== "linux" || !existsSync("/usr/bin/dpkg")) {
    return Promise.reject(new Error("the grpc-go client is built from Debian's Go packages (Linux with dpkg)"));
  }
  return new Promise((resolve, reject) => {
    execFile(join(repoRoot, "tools/go/build.sh"), [join(repoRoot, "tools/bench/client-go")], { encoding: "utf8", maxBuffer: 1 << 20 }, (err, stdout, stderr) =>
      err ? reject(new Error(`tools/go/build.sh tools/bench/client-go failed: ${stderr.trim() || err.message}`)) : resolve(stdout.trim()),
    );
  });
}

/**
 * Runs the client with `args` against `target`; `onLine(obj)` gets each JSON line it prints. Rejects
 * with its stderr when it exits non-zero (a protocol error it found, or a failed call), or when it
 * is still running after `timeoutMs` (killed: a server that stopped answering).
 */
function runClient(bin, target, args, onLine, timeoutMs) {
  return new Promise((resolve, reject) => {
    const connect = target.socket ? ["-socket", target.socket, "-task", target.taskId] : [];
    const child = spawn(bin, [...connect, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, timeoutMs);
    let out = "";
    let err = "";
    child.stdout.setEncoding("utf8").on("data", (d) => {
      out += d;
      for (let nl = out.indexOf("\n"); nl >= 0; nl = out.indexOf("\n")) {
        const line = out.slice(0, nl);
        out = out.slice(nl + 1);
        if (!line.trim()) continue;
        let value;
        try {
          value = JSON.parse(line);
        } catch {
          child.kill("SIGKILL");
          return reject(new Error(`${target.name} (client-go): not a JSON line: ${line.slice(0, 200)}`));
        }
        onLine(value);
      }
    });
    child.stderr.setEncoding("utf8").on("data", (d) => (err += d));
    child.once("error", reject);
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else if (timedOut) reject(new Error(`${target.name} (client-go): no result after ${timeoutMs / 1000} s`));
      else reject(new Error(`${target.name} (client-go): ${err.trim() || `exit ${code ?? signal}`}`));
    });
  });
}

/** `execOnce` with the grpc-go client: same result shape, the client's CPU from its own getrusage. */
export function goExecOnce(bin) {
  const once = async (target, bytes) => {
    let result;
    // Counted from the spawn: the client's start and dial (a few ms) fall inside, against ~1 s of output.
    const served = cpuMeter(target.pids);
    await runClient(bin, target, ["-mode", "exec", "-bytes", String(bytes), "-timeout", "10m"], (r) => (result = r), 11 * 60_000);
    const cpu = served();
    if (!result) throw new Error(`${target.name} (grpc-go client): no result`);
    return {
      seconds: result.seconds,
      mbPerSec: bytes / 1e6 / result.seconds,
      serverCpuSeconds: cpu.seconds,
      serverCpuSecondsByProcess: cpu.byProcess,
      clientCpuSeconds: result.clientCpuSeconds,
      messages: result.messages,
    };
  };
  once.clientName = "grpc-go client";
  return once;
}

/** `unaryRound` with the grpc-go client: the server's CPU is read between its "counting" line and its result. */
export function goUnaryRound(bin) {
  const round = async (target, { seconds, concurrency, warmupSeconds }) => {
    let served;
    let cpu;
    let result;
    const args = ["-mode", "unary", "-concurrency", String(concurrency), "-warmup", `${warmupSeconds}s`, "-seconds", `${seconds}s`];
    const onLine = (line) => {
      if (line.phase === "counting") served = cpuMeter(target.pids);
      else {
        cpu = served?.();
        result = line;
      }
    };
    await runClient(bin, target, args, onLine, (warmupSeconds + seconds + 60) * 1000);
    if (!result || !cpu) throw new Error(`${target.name} (grpc-go client): no result`);
    return {
      callsPerSec: result.callsPerSec,
      serverCpuMicrosPerCall: (cpu.seconds / result.calls) * 1e6,
      clientCpuMicrosPerCall: (result.clientCpuSeconds / result.calls) * 1e6,
      concurrency,
    };
  };
  round.clientName = "grpc-go client";
  return round;
}

/**
 * The start-up measure with go-plugin as the host, as Nomad's plugin loader launches a plugin:
 * rounds of `node -e 0`, the plugin's cycle (spawn → go-plugin handshake → PluginInfo → Kill done)
 * and the floor's, in the Go process; medians.
 */
export async function goStartup(bin, pluginBin, { runs, floor }) {
  const args = ["-mode", "startup", "-plugin", pluginBin, "-node", process.execPath, "-runs", String(runs), "-floor", floor.bin];
  for (const [k, v] of Object.entries(floor.env ?? {})) args.push("-floor-env", `${k}=${v}`);
  let result;
  await runClient(bin, { name: "start-up" }, args, (r) => (result = r), runs * 3 * 60_000);
  if (!result) throw new Error("start-up (go-plugin host): no result");
  return {
    ...result,
    ratio: result.pluginMs / result.bareNodeMs,
    floorRatio: result.floorMs / result.bareNodeMs,
  };
}
