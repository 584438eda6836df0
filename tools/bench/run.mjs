#!/usr/bin/env node
// nomadkit benchmark (`npm run bench`, issue 7): exec throughput, unary rate, TaskStats streams,
// start-up, idle RSS and slow-reader memory, each next to its peers (@grpc/grpc-js serving the same
// handlers, a raw node:http2 limit and, for exec, a plain node:http2 relay of the command, bare node), and what each task costs (its executor's start and
// memory, the plugin's memory), printed as a table and written as JSON. Exec and unary are measured
// with two clients: this process's node:http2 client, and grpc-go (Nomad's client stack); start-up
// with two hosts: @nomadkit/client's launchPlugin, and go-plugin's Client (Nomad's).
// Not a test: numbers depend on the machine; targets are reported as PASS/MISS, never asserted.
//
//   node tools/bench/run.mjs [--exec-bytes 1GiB] [--exec-runs 2] [--slow-bytes <exec-bytes>]
//     [--slow-rate 128MiB] [--startup-runs 11] [--executor-runs 11] [--plugin-tasks 20] [--unary-seconds 3] [--unary-concurrency 16] [--unary-warmup 3]
//     [--stats-streams 100] [--heap-streams 500] [--only exec,unary,stats,startup,idle,slow,tasks] [--go-client auto|on|off]
//     [--quick] [--json tools/bench/results/latest.json] [--snapshot <name>]
import { execFileSync } from "node:child_process";
import { cpus, freemem, loadavg, tmpdir, totalmem } from "node:os";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { GO_CLIENT_DESCRIPTION, buildGoClient, goExecOnce, goStartup, goUnaryRound } from "./lib/go-client.mjs";
import { CLIENT_DESCRIPTION } from "./lib/h2client.mjs";
import { agentBoot, execThroughputs, executorCosts, idleRss, pluginPerTask, slowReader, startup, statsMemory, statsRate, unaryRates } from "./lib/measures.mjs";
import { benchDriverFile, fixedYoungGenerationPreload, heapProbePreload, launchDriver, minimalPlugin, referenceDriverBin, referenceExecutor, repoRoot, startServer } from "./lib/targets.mjs";
import { MiB, fmtBytes, parseSize } from "./lib/util.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const ALL = ["exec", "unary", "stats", "startup", "idle", "slow", "tasks"];

function parseArgs(argv) {
  const o = {
    execBytes: 1024 ** 3,
    execRuns: 2,
    slowBytes: undefined,
    slowRate: 128 * MiB,
    startupRuns: 11,
    executorRuns: 11,
    pluginTasks: 20,
    unarySeconds: 3,
    unaryWarmup: 3,
    unaryConcurrency: 16,
    statsStreams: 100,
    statsSeconds: 3,
    heapStreams: 500,
    idleRuns: 3,
    only: ALL,
    quick: false,
    json: join(here, "results/latest.json"),
    snapshot: undefined,
    profile: undefined,
    goClient: "auto",
  };
  const num = (flag, v) => {
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`${flag} ${JSON.stringify(v)}: expected a positive number`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const [flag, inline] = a.includes("=") ? [a.slice(0, a.indexOf("=")), a.slice(a.indexOf("=") + 1)] : [a, undefined];
    const val = () => {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new Error(`${flag}: missing value`);
      return v;
    };
    switch (flag) {
      case "--exec-bytes": o.execBytes = parseSize(val(), flag); break;
      case "--exec-runs": o.execRuns = num(flag, val()); break;
      case "--slow-bytes": o.slowBytes = parseSize(val(), flag); break;
      case "--slow-rate": o.slowRate = parseSize(val(), flag); break;
      case "--startup-runs": o.startupRuns = num(flag, val()); break;
      case "--executor-runs": o.executorRuns = num(flag, val()); break;
      case "--plugin-tasks": o.pluginTasks = num(flag, val()); break;
      case "--unary-seconds": o.unarySeconds = num(flag, val()); break;
      case "--unary-concurrency": o.unaryConcurrency = num(flag, val()); break;
      case "--unary-warmup": o.unaryWarmup = num(flag, val()); break;
      case "--stats-streams": o.statsStreams = num(flag, val()); break;
      case "--heap-streams": o.heapStreams = num(flag, val()); break;
      case "--only": {
        o.only = val().split(",").map((s) => s.trim()).filter(Boolean);
        for (const m of o.only) if (!ALL.includes(m)) throw new Error(`--only: unknown measure ${JSON.stringify(m)} (one of ${ALL.join(", ")})`);
        break;
      }
      case "--quick":
        o.quick = true;
        break;
      case "--json": o.json = resolve(val()); break;
      case "--snapshot": o.snapshot = val(); break;
      case "--profile": o.profile = resolve(val()); break;
      case "--go-client": {
        o.goClient = val();
        if (!["auto", "on", "off"].includes(o.goClient)) throw new Error(`--go-client ${JSON.stringify(o.goClient)}: expected auto, on or off`);
        break;
      }
      case "-h":
      case "--help":
        process.stdout.write(readHelp());
        process.exit(0);
      default:
        throw new Error(`unknown option ${a} (try --help)`);
    }
  }
  if (o.quick) {
    o.execRuns = 1;
    o.startupRuns = Math.min(o.startupRuns, 3);
    o.executorRuns = Math.min(o.executorRuns, 3);
    o.pluginTasks = Math.min(o.pluginTasks, 3);
    o.idleRuns = 1;
    o.unarySeconds = Math.min(o.unarySeconds, 0.5);
    o.unaryWarmup = Math.min(o.unaryWarmup, 0.5);
    o.statsSeconds = 0.5;
    o.statsStreams = Math.min(o.statsStreams, 10);
    o.heapStreams = Math.min(o.heapStreams, 20);
  }
  o.slowBytes ??= o.execBytes;
  return o;
}

function readHelp() {
  return `usage: node tools/bench/run.mjs [options]\n
  --exec-bytes SIZE       output of the exec measures (head -c SIZE /dev/zero); default 1GiB
  --exec-runs N           exec runs per target, best kept; default 2 (--quick: 1)
  --slow-bytes SIZE       output of the slow-reader exec; default --exec-bytes
  --slow-rate SIZE        slow reader's rate per second; default 128MiB
  --startup-runs N        start-up cycles (median); default 11
  --executor-runs N       task executor launches (median); default 11
  --plugin-tasks N        tasks started for the plugin's memory per task; default 20
  --unary-seconds S       measuring time of each unary round (5 rounds, --quick: 1); default 3
  --unary-concurrency N   unary calls in flight; default 16
  --unary-warmup S        warm-up before measuring the unary rate; default 3
  --stats-streams N       TaskStats streams for the message rate; default 100
  --heap-streams N        TaskStats streams for memory per stream; default 500
  --only LIST             some of ${ALL.join(",")}
  --quick                 few runs and short windows (smoke test)
  --json FILE             where to write the JSON; default tools/bench/results/latest.json
  --snapshot NAME         also write tools/bench/results/NAME.json
  --profile DIR           run the served processes with --cpu-prof into DIR (summarise with
                          node tools/bench/profile-summary.mjs DIR/*.cpuprofile)
  --go-client MODE        exec and unary also with the grpc-go client, start-up also with go-plugin
                          as the host (tools/bench/client-go, built by tools/go/build.sh from
                          Debian's Go packages, installed when missing): auto (default: skipped
                          with a message if it cannot be built), on, off\n`;
}

function machine() {
  let cpuModel = cpus()[0]?.model ?? "unknown";
  let gitHead;
  try {
    gitHead = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: repoRoot, encoding: "utf8" }).trim();
  } catch {
    gitHead = undefined;
  }
  return {
    nproc: cpus().length,
    cpuModel,
    memTotalBytes: totalmem(),
    memFreeBytes: freemem(),
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    loadAverage: loadavg().map((l) => Math.round(l * 100) / 100),
    gitHead,
  };
}

const fmt = {
  mbs: (v) => (v === undefined ? "-" : `${v.toFixed(0)} MB/s`),
  rate: (v, unit) => (v === undefined ? "-" : `${v.toFixed(0)} ${unit}`),
  ms: (v) => (v === undefined ? "-" : `${v.toFixed(0)} ms`),
  bytes: (v) => (v === undefined ? "-" : fmtBytes(v)),
  kib: (v) => (v === undefined ? "-" : `${(v / 1024).toFixed(1)} KiB`),
  x: (v) => (v === undefined || !Number.isFinite(v) ? "-" : `${v.toFixed(2)}x`),
};

/** Each nomadkit driver's exec throughput over the raw limit's and over grpc-js's, with one client. */
function execRatios(e) {
  const over = (k, peer) => e[k].mbPerSec / e[peer].mbPerSec;
  return {
    refVsRaw: over("ref", "raw"),
    refVsGrpcjs: over("ref", "grpcjs"),
    onehopVsRaw: over("onehop", "raw"),
    onehopVsGrpcjs: over("onehop", "grpcjs"),
    // Not targets: how the plain relay of the same command stands to the limit and to nomadkit.
    relayVsRaw: over("relay", "raw"),
    refVsRelay: over("ref", "relay"),
  };
}

/** The plain relay's row under one client's exec rows: its rate in the limit column, and its ratios. */
function relayRow(e, by) {
  const r = e.ratios;
  return [`  plain relay of the command${by} (MB/s)`, "", "", "", `${fmt.mbs(e.relay.mbPerSec)} (relay)`, `relay/raw ${fmt.x(r.relayVsRaw)}, ref/relay ${fmt.x(r.refVsRelay)}`];
}

function table(rows, headers) {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i] ?? "").length)));
  const line = (cells) => "| " + cells.map((c, i) => String(c ?? "").padEnd(widths[i])).join(" | ") + " |";
  return [line(headers), "|" + widths.map((w) => "-".repeat(w + 2)).join("|") + "|", ...rows.map(line)].join("\n");
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const want = new Set(o.only);
  const started = Date.now();
  const report = {
    date: new Date().toISOString(),
    command: `node tools/bench/run.mjs ${process.argv.slice(2).join(" ")}`.trim(),
    machine: machine(),
    client: CLIENT_DESCRIPTION,
    goClient: undefined,
    options: { ...o, json: undefined },
    measures: {},
    targets: [],
  };
  const log = (s) => process.stderr.write(`bench: ${s}\n`);
  const M = report.measures;

  const needTargets = ["exec", "unary", "stats", "slow"].some((m) => want.has(m));
  const targets = {};
  const cleanup = async () => {
    for (const t of Object.values(targets)) await t.stop().catch((e) => log(`stopping ${t.name}: ${e.message}`));
  };
  const onSignal = () => void cleanup().finally(() => process.exit(130));
  let goBin; // the grpc-go client / go-plugin host, when built
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    const profileDir = o.profile;
    if (profileDir) mkdirSync(profileDir, { recursive: true });
    // `preload`: extra files for NODE_OPTIONS=--require (the heap probe of the memory measures).
    const launch = {
      ref: (preload = []) =>
        launchDriver("reference driver", referenceDriverBin, [], { taskConfig: { command: "/bin/sleep", args: ["3600"] }, profileDir, preload }),
      // The same with the plugin's young generation fixed (the memory/unary trade driver authors may choose).
      refyg: () =>
        launchDriver("reference driver + fixYoungGenerationSize", referenceDriverBin, [], {
          taskConfig: { command: "/bin/sleep", args: ["3600"] },
          profileDir,
          preload: [fixedYoungGenerationPreload],
        }),
      onehop: (preload = []) => launchDriver("nomadkit one hop", process.execPath, [benchDriverFile], { profileDir, preload }),
      grpcjs: (preload = []) => startServer("grpc-js", "grpcjs-server.mjs", {}, { profileDir, preload }),
      raw: () => startServer("raw http2", "raw-h2-server.mjs", {}, { profileDir }),
      relay: () => startServer("plain relay", "raw-h2-server.mjs", { relay: true }, { profileDir }),
    };
    /** Memory measures run on freshly started processes: RSS a process already reached hides growth. */
    const withFresh = async (k, fn, preload) => {
      const t = await launch[k](preload);
      targets[`fresh-${k}`] = t;
      try {
        return await fn(t);
      } finally {
        delete targets[`fresh-${k}`];
        await t.stop().catch((e) => log(`stopping ${t.name}: ${e.message}`));
      }
    };
    if (o.goClient !== "off" && ["exec", "unary", "startup"].some((m) => want.has(m))) {
      log("building the grpc-go client (tools/go/build.sh tools/bench/client-go)");
      try {
        goBin = await buildGoClient();
        report.goClient = GO_CLIENT_DESCRIPTION;
      } catch (err) {
        if (o.goClient === "on") throw err;
        log(`no client-go: exec and unary with the node:http2 client only, start-up with launchPlugin only: ${err.message}`);
      }
    }
    if (needTargets) {
      log("starting the reference driver (launchPlugin + StartTask), the one-hop bench driver, grpc-js and the raw HTTP/2 server");
      for (const k of ["ref", "onehop", "grpcjs", "raw"]) targets[k] = await launch[k]();
      if (want.has("exec")) targets.relay = await launch.relay();
      if (want.has("unary")) targets.refyg = await launch.refyg();
    }

    if (want.has("stats")) {
      M.statsMemory = {
        what: `memory of the serving process per open TaskStats stream (1 s interval): ${o.heapStreams} streams opened on one connection to a freshly started process; V8 heap used after full collections and the new space's size (process.memoryUsage() and heap spaces reported by a preloaded probe on SIGUSR2, tools/bench/lib/heap-probe.cjs), and VmRSS from /proc/<pid>/status (median of 5 samples 100 ms apart), before, and again 1.5 s after`,
      };
      const heapDir = mkdtempSync(join(tmpdir(), "nk-bench-heap-"));
      // Inherited by every process the bench starts; only those with the probe preloaded use it.
      process.env.NOMADKIT_BENCH_HEAP_DIR = heapDir;
      try {
        for (const k of ["ref", "onehop", "grpcjs"]) {
          log(`TaskStats memory via a fresh ${targets[k].name}`);
          M.statsMemory[k] = await withFresh(k, (t) => statsMemory(t, { streams: o.heapStreams, heapDir }), [heapProbePreload]);
        }
      } finally {
        delete process.env.NOMADKIT_BENCH_HEAP_DIR;
        rmSync(heapDir, { recursive: true, force: true });
      }
      M.statsRate = {
        what: `TaskStats messages per second over ${o.statsStreams} streams asking collection_interval 1 ms (both servers clamp to 10 ms, so at most ${o.statsStreams * 100}/s); synthetic samples (the reference driver's come from its executor's /proc and cgroup sampler, a cost of its own)`,
      };
      for (const k of ["onehop", "grpcjs"]) {
        log(`TaskStats rate via ${targets[k].name}`);
        M.statsRate[k] = await statsRate(targets[k], { streams: o.statsStreams, seconds: o.statsSeconds });
      }
    }
    if (want.has("exec")) {
      const execTargets = { raw: targets.raw, relay: targets.relay, ref: targets.ref, onehop: targets.onehop, grpcjs: targets.grpcjs };
      M.exec = {
        bytes: o.execBytes,
        runs: o.execRuns,
        what: `ExecTaskStreaming of "head -c ${o.execBytes} /dev/zero", stdout MB/s (1 MB = 10^6 B) from request to trailers, best of ${o.execRuns} runs alternating between the targets; CPU seconds of the serving processes (plugin + executor for the reference driver) per GiB`,
        ...(await execThroughputs(execTargets, o.execBytes, o.execRuns, log)),
      };
      if (goBin) {
        M.exec.goClient = await execThroughputs(execTargets, o.execBytes, o.execRuns, log, goExecOnce(goBin));
      }
    }
    if (want.has("unary")) {
      const rounds = o.quick ? 1 : 5;
      M.unary = {
        what: `InspectTask round trips per second, ${o.unaryConcurrency} in flight on one connection, ${o.unarySeconds} s per round; ${rounds} rounds alternating between the targets (the first after ${o.unaryWarmup} s of warm-up), median round`,
        concurrency: o.unaryConcurrency,
        ...(await unaryRates(
          { ref: targets.ref, refyg: targets.refyg, onehop: targets.onehop, grpcjs: targets.grpcjs },
          { seconds: o.unarySeconds, concurrency: o.unaryConcurrency, warmupSeconds: o.unaryWarmup, rounds, log },
        )),
      };
      if (goBin) {
        M.unary.goClient = await unaryRates(
          { ref: targets.ref, onehop: targets.onehop, grpcjs: targets.grpcjs },
          { seconds: o.unarySeconds, concurrency: o.unaryConcurrency, warmupSeconds: o.unaryWarmup, rounds, log, round: goUnaryRound(goBin) },
        );
      }
    }
    if (want.has("slow")) {
      M.slowReader = {
        bytes: o.slowBytes,
        rateBytesPerSec: o.slowRate,
        what: `peak VmRSS growth (sum over plugin + executor of a freshly started driver; the server process for grpc-js) while the client reads "head -c ${o.slowBytes} /dev/zero" at ${fmtBytes(o.slowRate)}/s, sampled every 10 ms`,
      };
      for (const k of ["ref", "refyg", "grpcjs"]) {
        log(`slow reader via a fresh ${k === "refyg" ? "reference driver + fixYoungGenerationSize" : targets[k].name}`);
        M.slowReader[k] = await withFresh(k, (t) => slowReader(t, o.slowBytes, o.slowRate));
      }
    }
  } finally {
    await cleanup();
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
  if (want.has("startup")) {
    log(`start-up cycle x${o.startupRuns}`);
    M.startup = {
      what: "spawn → go-plugin handshake → PluginInfo answered → kill() done (GRPCController.Shutdown + exit), via launchPlugin, versus spawn of `node -e 0` until exit, and the same cycle of the minimal Node plugin (the floor); medians",
      ...(await startup(referenceDriverBin, { runs: o.startupRuns, floor: minimalPlugin() })),
    };
    if (goBin) {
      log(`start-up cycle x${o.startupRuns}, go-plugin host`);
      M.startup.goHost = await goStartup(goBin, referenceDriverBin, { runs: o.startupRuns, floor: minimalPlugin() });
      M.startup.what += "; go-plugin host: the same cycle and `node -e 0` timed in client-go, go-plugin's Client launching the plugin as Nomad's plugin loader does (handshake, Dispense, PluginInfo, Kill: GRPCController.Shutdown + exit)";
    }
    log(`agent start: Nomad's three launches x${o.startupRuns}`);
    M.startup.agentBoot = {
      what: "not a target: the three launches Nomad makes while an agent starts, one after the other, via launchPlugin — load (PluginInfo, ConfigSchema, kill), validate (SetConfig twice, kill), run (SetConfig, Init, TaskEvents opened, until the first Fingerprint message) — versus three `node -e 0`; medians",
      ...(await agentBoot(referenceDriverBin, { runs: o.startupRuns })),
    };
  }
  if (want.has("idle")) {
    log("idle RSS");
    M.idleRss = {
      what: 'VmRSS (/proc/<pid>/status) of the reference driver 1 s after PluginInfo versus `node -e "setInterval(()=>{},1e6)"` 1 s after spawn and the minimal Node plugin 1 s after PluginInfo, medians; "settled": the first two again after 12 s (first run); "serving": another reference driver 1 s after it answered SetConfig, sent its first Fingerprint and opened TaskEvents (as Nomad keeps a driver), not a target',
      ...(await idleRss(referenceDriverBin, { runs: o.idleRuns, settledMs: o.quick ? 0 : 12_000, floor: minimalPlugin() })),
    };
  }

  if (want.has("tasks")) {
    const ex = referenceExecutor();
    log(`task executor x${o.executorRuns}`);
    M.tasks = {
      what: `what each task costs, not targets. Its executor (${ex.what}), started by launchExecutor as the driver starts it: launch → go-plugin handshake → client connected, versus spawn of \`node -e 0\` until exit (medians of ${o.executorRuns}, alternating); and 1 s after it launched \`sleep 3600\`, VmRSS and private memory (smaps_rollup Private_Clean + Private_Dirty, what its exit gives back) next to an idle bare node (medians of ${o.quick ? 1 : 3}). The driver plugin: a fresh reference driver with one task, then ${o.pluginTasks} more, each with a WaitTask call and a TaskStats stream open as Nomad keeps them; growth of its live V8 heap (after full collections, preloaded heap probe) and VmRSS, per task`,
      executor: await executorCosts(ex.path, { runs: o.executorRuns, memoryRuns: o.quick ? 1 : 3 }),
    };
    log(`plugin memory per task (${o.pluginTasks} tasks)`);
    const heapDir = mkdtempSync(join(tmpdir(), "nk-bench-heap-"));
    try {
      M.tasks.plugin = await pluginPerTask(referenceDriverBin, { tasks: o.pluginTasks, heapDir, settleMs: o.quick ? 500 : 3000 });
    } finally {
      rmSync(heapDir, { recursive: true, force: true });
    }
  }

  // Targets.
  const T = report.targets;
  const target = (name, value, limit, pass, shown) => T.push({ name, value, limit, pass, shown });
  // The same targets for each client's results: the Node client's, then grpc-go's when it ran.
  const byClient = (m) => (m ? [[m, ""], [m.goClient, " (grpc-go client)"]].filter(([r]) => r !== undefined) : []);
  for (const [e, by] of byClient(M.exec)) {
    e.ratios = execRatios(e);
    const { refVsRaw: r, refVsGrpcjs: g } = e.ratios;
    target(`exec throughput vs raw HTTP/2 limit${by}`, r, ">= 0.6x", r >= 0.6, fmt.x(r));
    target(`exec throughput vs grpc-js${by}`, g, ">= 3x", g >= 3, fmt.x(g));
  }
  for (const [u, by] of byClient(M.unary)) {
    const r = u.ref.callsPerSec / u.grpcjs.callsPerSec;
    u.ratios = { refVsGrpcjs: r };
    target(`unary rate vs grpc-js${by}`, r, ">= 1x", r >= 1, fmt.x(r));
  }
  if (M.startup) target("start-up vs bare node", M.startup.ratio, "<= 1.5x", M.startup.ratio <= 1.5, fmt.x(M.startup.ratio));
  const goHost = M.startup?.goHost;
  if (goHost) target("start-up vs bare node (go-plugin host)", goHost.ratio, "<= 1.5x", goHost.ratio <= 1.5, fmt.x(goHost.ratio));
  if (M.idleRss) target("idle RSS vs bare node", M.idleRss.ratio, "<= 1.3x", M.idleRss.ratio <= 1.3, fmt.x(M.idleRss.ratio));
  if (M.slowReader) {
    const g = M.slowReader.ref.growthBytes;
    target("slow-reader RSS growth", g, "<= 32 MiB", g <= 32 * MiB, fmtBytes(g));
  }
  report.seconds = (Date.now() - started) / 1000;

  // Output.
  const rows = [];
  const X = fmt.x;
  if (M.exec) {
    const e = M.exec;
    rows.push([`exec stdout ${fmtBytes(e.bytes)} (MB/s)`, fmt.mbs(e.ref.mbPerSec), fmt.mbs(e.onehop.mbPerSec), fmt.mbs(e.grpcjs.mbPerSec), `${fmt.mbs(e.raw.mbPerSec)} (raw h2)`, `ref/raw ${X(e.ratios.refVsRaw)}, ref/grpc-js ${X(e.ratios.refVsGrpcjs)}`]);
    const split = (r) => (r.serverCpuSecondsPerGiBByProcess?.length > 1 ? ` (${r.serverCpuSecondsPerGiBByProcess.map((v) => v.toFixed(2)).join(" + ")})` : "");
    rows.push(["exec server CPU s per GiB", e.ref.serverCpuSecondsPerGiB.toFixed(2) + split(e.ref), e.onehop.serverCpuSecondsPerGiB.toFixed(2), e.grpcjs.serverCpuSecondsPerGiB.toFixed(2), `${e.raw.serverCpuSecondsPerGiB.toFixed(2)} (raw h2)`, "plugin + executor"]);
    rows.push(["exec client CPU s per GiB", e.ref.clientCpuSecondsPerGiB.toFixed(2), e.onehop.clientCpuSecondsPerGiB.toFixed(2), e.grpcjs.clientCpuSecondsPerGiB.toFixed(2), `${e.raw.clientCpuSecondsPerGiB.toFixed(2)} (raw h2)`, "the bench client, same for all"]);
    rows.push(relayRow(e, ""));
    const g = e.goClient;
    if (g) {
      rows.push([`exec stdout ${fmtBytes(e.bytes)}, grpc-go client (MB/s)`, fmt.mbs(g.ref.mbPerSec), fmt.mbs(g.onehop.mbPerSec), fmt.mbs(g.grpcjs.mbPerSec), `${fmt.mbs(g.raw.mbPerSec)} (raw h2)`, `ref/raw ${X(g.ratios.refVsRaw)}, ref/grpc-js ${X(g.ratios.refVsGrpcjs)}`]);
      rows.push(["  server CPU s per GiB", g.ref.serverCpuSecondsPerGiB.toFixed(2) + split(g.ref), g.onehop.serverCpuSecondsPerGiB.toFixed(2), g.grpcjs.serverCpuSecondsPerGiB.toFixed(2), `${g.raw.serverCpuSecondsPerGiB.toFixed(2)} (raw h2)`, "plugin + executor"]);
      rows.push(["  client CPU s per GiB", g.ref.clientCpuSecondsPerGiB.toFixed(2), g.onehop.clientCpuSecondsPerGiB.toFixed(2), g.grpcjs.clientCpuSecondsPerGiB.toFixed(2), `${g.raw.clientCpuSecondsPerGiB.toFixed(2)} (raw h2)`, "the grpc-go client"]);
      rows.push(relayRow(g, ", grpc-go client"));
    }
  }
  if (M.unary) {
    const u = M.unary;
    rows.push([`unary InspectTask (calls/s, ${u.concurrency} in flight)`, fmt.rate(u.ref.callsPerSec, "/s"), fmt.rate(u.onehop.callsPerSec, "/s"), fmt.rate(u.grpcjs.callsPerSec, "/s"), "", `ref/grpc-js ${X(u.ratios.refVsGrpcjs)}`]);
    rows.push(["  same, + fixYoungGenerationSize", fmt.rate(u.refyg.callsPerSec, "/s"), "-", "-", "", `ref+fyg/grpc-js ${X(u.refyg.callsPerSec / u.grpcjs.callsPerSec)}`]);
    const us = (r) => `${r.serverCpuMicrosPerCall.toFixed(1)} µs`;
    rows.push(["  server CPU per call", us(u.ref), us(u.onehop), us(u.grpcjs), "", `ref/grpc-js ${X(u.ref.serverCpuMicrosPerCall / u.grpcjs.serverCpuMicrosPerCall)} (lower is better)`]);
    const g = u.goClient;
    if (g) {
      rows.push([`unary InspectTask, grpc-go client (calls/s, ${u.concurrency} in flight)`, fmt.rate(g.ref.callsPerSec, "/s"), fmt.rate(g.onehop.callsPerSec, "/s"), fmt.rate(g.grpcjs.callsPerSec, "/s"), "", `ref/grpc-js ${X(g.ratios.refVsGrpcjs)}`]);
      rows.push(["  server CPU per call", us(g.ref), us(g.onehop), us(g.grpcjs), "", `ref/grpc-js ${X(g.ref.serverCpuMicrosPerCall / g.grpcjs.serverCpuMicrosPerCall)} (lower is better)`]);
    }
  }
  if (M.statsRate) {
    const s = M.statsRate;
    rows.push([`TaskStats msgs/s (${s.onehop.streams} streams, 10 ms)`, "-", fmt.rate(s.onehop.msgsPerSec, "/s"), fmt.rate(s.grpcjs.msgsPerSec, "/s"), `${s.onehop.streams * 100}/s (ideal)`, `nomadkit/grpc-js ${X(s.onehop.msgsPerSec / s.grpcjs.msgsPerSec)}`]);
    const us = (r) => `${r.serverCpuMicrosPerMsg.toFixed(1)} µs`;
    rows.push(["  server CPU per message", "-", us(s.onehop), us(s.grpcjs), "", `nomadkit/grpc-js ${X(s.onehop.serverCpuMicrosPerMsg / s.grpcjs.serverCpuMicrosPerMsg)} (lower is better)`]);
  }
  if (M.statsMemory) {
    const s = M.statsMemory;
    rows.push([`TaskStats heap per open stream (${s.ref.streams})`, fmt.kib(s.ref.heapBytesPerStream), fmt.kib(s.onehop.heapBytesPerStream), fmt.kib(s.grpcjs.heapBytesPerStream), "", ""]);
    rows.push([`TaskStats RSS per open stream (${s.ref.streams})`, fmt.kib(s.ref.bytesPerStream), fmt.kib(s.onehop.bytesPerStream), fmt.kib(s.grpcjs.bytesPerStream), "", ""]);
    // RSS growth is mostly the young generation V8 grows while the streams open, not live objects.
    const newSpace = (r) => {
      const size = (h) => h?.spaces?.find(([name]) => name === "new_space")?.[1];
      const [a, b] = [size(r.heapBefore), size(r.heapAfter)];
      return a === undefined || b === undefined ? "-" : `${fmt.bytes(a)} → ${fmt.bytes(b)}`;
    };
    rows.push(["  V8 new space (young generation)", newSpace(s.ref), newSpace(s.onehop), newSpace(s.grpcjs), "", "before → after"]);
  }
  if (M.startup) {
    const s = M.startup;
    rows.push([`start-up cycle (median of ${s.runs})`, fmt.ms(s.pluginMs), "-", "-", `${fmt.ms(s.bareNodeMs)} (node -e 0)`, `${X(s.ratio)} (handshake ${fmt.ms(s.phasesMs.handshake)}, PluginInfo ${fmt.ms(s.phasesMs.pluginInfo)}, shutdown ${fmt.ms(s.phasesMs.shutdown)})`]);
    rows.push(["  floor: minimal Node plugin", "-", "-", "-", fmt.ms(s.floorMs), `floor/bare ${X(s.floorRatio)}; ref/floor ${X(s.pluginMs / s.floorMs)}`]);
    const g = s.goHost;
    if (g) {
      rows.push([`start-up cycle, go-plugin host (median of ${g.runs})`, fmt.ms(g.pluginMs), "-", "-", `${fmt.ms(g.bareNodeMs)} (node -e 0)`, `${X(g.ratio)} (handshake ${fmt.ms(g.phasesMs.handshake)}, PluginInfo ${fmt.ms(g.phasesMs.pluginInfo)}, Kill ${fmt.ms(g.phasesMs.shutdown)})`]);
      rows.push(["  floor: minimal Node plugin", "-", "-", "-", fmt.ms(g.floorMs), `floor/bare ${X(g.floorRatio)}; ref/floor ${X(g.pluginMs / g.floorMs)}`]);
    }
    const a = s.agentBoot;
    if (a) {
      rows.push([`agent start: Nomad's 3 launches (median of ${a.runs})`, fmt.ms(a.totalMs), "-", "-", `${fmt.ms(3 * a.bareNodeMs)} (3 x node -e 0)`, `${X(a.ratio)} (load ${fmt.ms(a.loadMs)}, validate ${fmt.ms(a.validateMs)}, run to 1st Fingerprint ${fmt.ms(a.runMs)}; not a target)`]);
    }
  }
  if (M.idleRss) {
    const s = M.idleRss;
    rows.push(["idle RSS (1 s after PluginInfo)", fmt.bytes(s.pluginBytes), "-", "-", `${fmt.bytes(s.bareNodeBytes)} (bare node)`, X(s.ratio)]);
    rows.push(["  floor: minimal Node plugin", "-", "-", "-", fmt.bytes(s.floorBytes), `floor/bare ${X(s.floorRatio)}; ref/floor ${X(s.pluginBytes / s.floorBytes)}`]);
    rows.push(["  serving as Nomad keeps it (SetConfig, Fingerprint, TaskEvents)", fmt.bytes(s.servingBytes), "-", "-", `${fmt.bytes(s.bareNodeBytes)} (bare node)`, `${X(s.servingRatio)} (not a target)`]);
    if (s.settled) rows.push([`idle RSS (after ${s.settled.afterMs / 1000} s)`, fmt.bytes(s.settled.pluginBytes), "-", "-", `${fmt.bytes(s.settled.bareNodeBytes)} (bare node)`, X(s.settled.ratio)]);
  }
  if (M.tasks) {
    const s = M.tasks.executor;
    rows.push([`task executor start (median of ${s.runs})`, fmt.ms(s.launchMs), "-", "-", `${fmt.ms(s.bareNodeMs)} (node -e 0)`, `${X(s.launchRatio)} (every StartTask waits for it; not a target)`]);
    rows.push(["  executor memory per task: RSS / private", `${fmt.bytes(s.rssBytes)} / ${fmt.bytes(s.privateBytes)}`, "-", "-", `${fmt.bytes(s.bareNodeRssBytes)} / ${fmt.bytes(s.bareNodePrivateBytes)} (bare node)`, `private ${X(s.privateBytes / s.bareNodePrivateBytes)} (node's binary pages are shared)`]);
    const p = M.tasks.plugin;
    rows.push([`  plugin memory per task (${p.tasks} tasks): live heap / RSS`, `${fmt.kib(p.heapBytesPerTask)} / ${fmt.kib(p.rssBytesPerTask)}`, "-", "-", "", "WaitTask + TaskStats open per task"]);
  }
  if (M.slowReader) {
    const s = M.slowReader;
    // Total, and each process's own growth when there are several (plugin + executor).
    const growth = (r) => fmt.bytes(r.growthBytes) + (r.growthBytesByProcess?.length > 1 ? ` (${r.growthBytesByProcess.map((b) => fmt.bytes(b)).join(" + ")})` : "");
    rows.push([`slow reader ${fmtBytes(s.bytes)} at ${fmtBytes(s.rateBytesPerSec)}/s: peak RSS growth`, growth(s.ref), "-", fmt.bytes(s.grpcjs.growthBytes), "", "plugin + executor, fresh processes"]);
    rows.push(["  same, + fixYoungGenerationSize", growth(s.refyg), "-", "-", "", "the driver author's choice"]);
  }
  const out = [
    "",
    `nomadkit bench — ${report.date} — node ${report.machine.node}, ${report.machine.nproc} CPUs (${report.machine.cpuModel}), load ${report.machine.loadAverage.join(" ")}`,
    `client (all measures): ${CLIENT_DESCRIPTION}`,
    report.goClient
      ? `second client (exec and unary rows marked grpc-go client): ${report.goClient}; start-up rows marked go-plugin host: go-plugin's Client launching the plugin as Nomad's plugin loader does (handshake, Dispense, PluginInfo, Kill)`
      : "second client: none (grpc-go client not built; --go-client)",
    "",
    table(rows, ["measure", "nomadkit reference driver", "nomadkit one hop", "grpc-js", "limit / bare", "ratio"]),
    "",
    table(T.map((t) => [t.name, t.shown, t.limit, t.pass ? "PASS" : "MISS"]), ["target", "value", "target", "result"]),
    "",
    "what was measured:",
    ...Object.entries(M).map(([k, v]) => `  ${k}: ${v.what}`),
    ...(M.startup?.agentBoot ? [`  startup.agentBoot (agent start): ${M.startup.agentBoot.what}`] : []),
    `  reference driver = examples/rawexec-driver (launchPlugin; ExecTaskStreaming through the task's executor, which starts the child with its output handed off to the driver: child → driver → client)`,
    `  + fixYoungGenerationSize = the same driver with @nomadkit/server's fixYoungGenerationSize() called before it loads (preload), as a driver's entry file may`,
    `  nomadkit one hop = tools/bench/servers/nomadkit-driver.mjs (serveDriver; runExecCommand in the plugin)`,
    `  grpc-js = tools/bench/servers/grpcjs-server.mjs (@grpc/grpc-js + @grpc/proto-loader, same handlers)`,
    `  raw h2 = tools/bench/servers/raw-h2-server.mjs (node:http2, pre-framed 1 MiB messages)`,
    `  plain relay = the same server running the command and sending each read of its stdout as one message (header beside the data, no copy): not a target, what a hand-written Node server gets from the real command`,
    `  minimal Node plugin = tools/bench/servers/minimal-plugin.cjs (node:http2 on the unix socket, go-plugin handshake, canned answers; no protobuf runtime, no dependencies): the floor for start-up and idle RSS`,
    `done in ${report.seconds.toFixed(0)} s; JSON: ${o.json}${o.snapshot ? ` and results/${o.snapshot}.json` : ""}`,
    "",
  ];
  process.stdout.write(out.join("\n"));
  mkdirSync(dirname(o.json), { recursive: true });
  writeFileSync(o.json, JSON.stringify(report, null, 2) + "\n");
  if (o.snapshot) writeFileSync(join(here, "results", `${o.snapshot}.json`), JSON.stringify(report, null, 2) + "\n");
}

main().catch((err) => {
  process.stderr.write(`bench: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
