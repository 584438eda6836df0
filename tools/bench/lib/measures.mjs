// The measures (the six the performance issue asks for, and what each task costs). Each returns plain numbers for the JSON report.
import { spawn } from "node:child_process";
import { setMaxListeners } from "node:events";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { encode } from "@msgpack/msgpack";
import { Code } from "@connectrpc/connect";
import { launchPlugin } from "@nomadkit/client";
import {
  ExecTaskStreamingRequestSchema,
  ExecTaskStreamingResponseSchema,
  InspectTaskRequestSchema,
  InspectTaskResponseSchema,
  TaskStatsRequestSchema,
  TaskStatsResponseSchema,
} from "@nomadkit/protocol/driver";
import { EnvelopeReader, GrpcH2Client } from "./h2client.mjs";
import { benchTask, heapProbePreload, profileEnv } from "./targets.mjs";
import { cpuMeter, median, privateMemory, procMemory, rssOf, rssSampler, sleep, timeMs } from "./util.mjs";

const DRIVER = "/hashicorp.nomad.plugins.drivers.proto.Driver";

/**
 * One ExecTaskStreaming of `head -c <bytes> /dev/zero`, checking the protocol on the way: all
 * stdout bytes, no stderr, each close marker once after its data, exactly one exited (code 0) last,
 * grpc-status 0. With `rate` (bytes/s) the client reads no faster than that (pausing the stream).
 * Returns seconds, MB/s and the CPU seconds the target's processes used.
 */
export async function execOnce(target, bytes, { rate, onTick } = {}) {
  const setup = toBinary(
    ExecTaskStreamingRequestSchema,
    create(ExecTaskStreamingRequestSchema, {
      setup: { taskId: target.taskId, command: ["head", "-c", String(bytes), "/dev/zero"], tty: false },
    }),
  );
  let stdout = 0;
  let stderr = 0;
  let stdoutClosed = false;
  let stderrClosed = false;
  let exited = 0;
  let exitCode;
  const fail = (msg) => {
    throw new Error(`${target.name}: exec: ${msg}`);
  };
  const data = (field, n) => {
    if (exited) fail("output after exited");
    if (field === 1) {
      if (stdoutClosed) fail("stdout data after its close marker");
      stdout += n;
    } else {
      if (stderrClosed) fail("stderr data after its close marker");
      stderr += n;
    }
  };
  const reader = new EnvelopeReader((m) => {
    const r = fromBinary(ExecTaskStreamingResponseSchema, m);
    if (r.stdout) {
      if (r.stdout.data.length) data(1, r.stdout.data.length);
      if (r.stdout.close) {
        if (stdoutClosed) fail("second stdout close marker");
        stdoutClosed = true;
      }
    }
    if (r.stderr) {
      if (r.stderr.data.length) data(2, r.stderr.data.length);
      if (r.stderr.close) {
        if (stderrClosed) fail("second stderr close marker");
        stderrClosed = true;
      }
    }
    if (r.exited) {
      if (!stdoutClosed || !stderrClosed) fail("exited before both close markers");
      if (exited++) fail("second exited message");
      exitCode = r.result?.exitCode;
    }
  }, data);

  let onChunk;
  let t0 = performance.now();
  if (rate) {
    let read = 0;
    onChunk = (chunk, req) => {
      read += chunk.length;
      onTick?.();
      const wait = t0 + (read / rate) * 1000 - performance.now();
      if (wait > 1) {
        req.pause();
        setTimeout(() => req.resume(), wait);
      }
    };
  }
  const client = await GrpcH2Client.connect(target.socket);
  t0 = performance.now();
  const served = cpuMeter(target.pids);
  const client0 = process.cpuUsage();
  let result;
  try {
    result = await client.call(`${DRIVER}/ExecTaskStreaming`, [setup], reader, {
      halfClose: false, // Nomad never half-closes the exec request side
      onChunk,
    });
  } finally {
    client.close();
  }
  const { status, message } = result;
  const seconds = (performance.now() - t0) / 1000;
  const cpu = served();
  const c = process.cpuUsage(client0);
  const clientCpu = (c.user + c.system) / 1e6;
  if (status !== 0) fail(`grpc-status ${status}: ${message}`);
  if (exited !== 1) fail(`expected one exited message, got ${exited}`);
  if (exitCode !== 0) fail(`exit code ${exitCode}`);
  if (stdout !== bytes) fail(`got ${stdout} stdout bytes, expected ${bytes}`);
  if (stderr !== 0) fail(`got ${stderr} stderr bytes`);
  return { seconds, mbPerSec: bytes / 1e6 / seconds, serverCpuSeconds: cpu.seconds, serverCpuSecondsByProcess: cpu.byProcess, clientCpuSeconds: clientCpu, messages: reader.messages };
}

/**
 * Exec throughput of each of `targets` (by key): `runs` rounds alternating between the targets
 * (so drift in the machine's speed favours none), best run per target kept. `once` is one exec
 * with a client: `execOnce` (this process's HTTP/2 client) by default.
 */
export async function execThroughputs(targets, bytes, runs, log = () => {}, once = execOnce) {
  const best = {};
  for (let i = 0; i < runs; i++) {
    for (const [k, target] of Object.entries(targets)) {
      log(`exec ${bytes} bytes via ${target.name}${once === execOnce ? "" : ` (${once.clientName})`}, run ${i + 1} of ${runs}`);
      const r = await once(target, bytes);
      if (best[k] === undefined || r.mbPerSec > best[k].mbPerSec) best[k] = r;
    }
  }
  return Object.fromEntries(
    Object.entries(best).map(([k, b]) => [
      k,
      {
        mbPerSec: b.mbPerSec,
        seconds: b.seconds,
        serverCpuSecondsPerGiB: (b.serverCpuSeconds / bytes) * 1024 ** 3,
        // Per served process (plugin first, then the executor) and for this (the client) process:
        // on 2 cores the client's share bounds every target.
        serverCpuSecondsPerGiBByProcess: b.serverCpuSecondsByProcess.map((s) => (s / bytes) * 1024 ** 3),
        clientCpuSecondsPerGiB: (b.clientCpuSeconds / bytes) * 1024 ** 3,
        messages: b.messages,
      },
    ]),
  );
}

/**
 * Unary InspectTask calls per second: `concurrency` calls in flight on one connection, for each of
 * `targets` (by key). Rounds alternate between the targets (a warm-up round first, then `rounds`
 * counted ones) and each target's median round is kept: a machine whose speed drifts over the run
 * then favours no target. `round` is one round with a client: `unaryRound` (this process's HTTP/2
 * client) by default.
 */
export async function unaryRates(targets, { seconds, concurrency, warmupSeconds = 3, rounds = 1, log = () => {}, round = unaryRound }) {
  const runs = Object.fromEntries(Object.keys(targets).map((k) => [k, []]));
  for (let i = 0; i < rounds; i++) {
    for (const [k, target] of Object.entries(targets)) {
      log(`unary InspectTask via ${target.name}${round === unaryRound ? "" : ` (${round.clientName})`}, round ${i + 1} of ${rounds}`);
      runs[k].push(await round(target, { seconds, concurrency, warmupSeconds: i === 0 ? warmupSeconds : 0.5 }));
    }
  }
  return Object.fromEntries(
    Object.entries(runs).map(([k, rs]) => {
      const sorted = [...rs].sort((a, b) => a.callsPerSec - b.callsPerSec);
      return [k, { ...sorted[(sorted.length - 1) >> 1], rounds, roundsCallsPerSec: rs.map((r) => r.callsPerSec) }];
    }),
  );
}

export async function unaryRound(target, { seconds, concurrency, warmupSeconds }) {
  const req = toBinary(InspectTaskRequestSchema, create(InspectTaskRequestSchema, { taskId: target.taskId }));
  const path = `${DRIVER}/InspectTask`;
  const client = await GrpcH2Client.connect(target.socket);
  try {
    // Sanity: the reply decodes and names the task.
    const first = fromBinary(InspectTaskResponseSchema, await client.unary(path, req));
    if (first.task?.id !== target.taskId) throw new Error(`${target.name}: InspectTask answered for ${first.task?.id}`);
    let counting = false;
    let calls = 0;
    let stop = false;
    let failure;
    const worker = async () => {
      while (!stop) {
        try {
          await client.unary(path, req);
        } catch (err) {
          failure ??= err;
          stop = true;
          return;
        }
        if (counting) calls++;
      }
    };
    const workers = Array.from({ length: concurrency }, worker);
    await sleep(warmupSeconds * 1000);
    const served = cpuMeter(target.pids);
    counting = true;
    const t0 = performance.now();
    await sleep(seconds * 1000);
    counting = false;
    const elapsed = (performance.now() - t0) / 1000;
    const cpu = served().seconds;
    stop = true;
    await Promise.all(workers);
    if (failure) throw new Error(`${target.name}: InspectTask failed: ${failure.message}`);
    return { callsPerSec: calls / elapsed, serverCpuMicrosPerCall: (cpu / calls) * 1e6, concurrency };
  } finally {
    client.close();
  }
}

/** Opens `n` TaskStats streams on one connection; returns their message counters and a close function. */
async function openStatsStreams(target, n, intervalMs) {
  const client = await GrpcH2Client.connect(target.socket);
  const req = toBinary(
    TaskStatsRequestSchema,
    create(TaskStatsRequestSchema, {
      taskId: target.taskId,
      collectionInterval: { seconds: BigInt(Math.floor(intervalMs / 1000)), nanos: (intervalMs % 1000) * 1e6 },
    }),
  );
  const ac = new AbortController();
  setMaxListeners(0, ac.signal); // one listener per stream
  const counts = new Array(n).fill(0);
  let checked = false;
  const done = [];
  for (let i = 0; i < n; i++) {
    const reader = new EnvelopeReader(
      (m) => {
        if (!checked) {
          checked = true;
          const s = fromBinary(TaskStatsResponseSchema, m).stats;
          if (!s?.timestamp || !s.aggResourceUsage?.cpu || !s.aggResourceUsage.memory) {
            throw new Error(`${target.name}: TaskStats sample without timestamp/cpu/memory`);
          }
        }
        counts[i]++;
      },
      () => {
        throw new Error("unexpected large TaskStats message");
      },
    );
    done.push(client.call(`${DRIVER}/TaskStats`, [req], reader, { signal: ac.signal }).catch(() => {}));
  }
  return {
    counts,
    total: () => counts.reduce((a, b) => a + b, 0),
    async close() {
      ac.abort();
      await Promise.race([Promise.all(done), sleep(2000)]);
      client.close();
    },
  };
}

/** TaskStats messages per second over `streams` streams at the smallest interval (10 ms). */
export async function statsRate(target, { streams, seconds, intervalMs = 1 }) {
  const s = await openStatsStreams(target, streams, intervalMs);
  await sleep(500);
  const c0 = s.total();
  const served = cpuMeter(target.pids);
  const t0 = performance.now();
  await sleep(seconds * 1000);
  const msgs = s.total() - c0;
  const elapsed = (performance.now() - t0) / 1000;
  const cpu = served().seconds;
  await s.close();
  return { msgsPerSec: msgs / elapsed, streams, serverCpuMicrosPerMsg: (cpu / Math.max(1, msgs)) * 1e6 };
}

/** Median VmRSS of `pid` over `n` samples 100 ms apart (smooths allocator and GC noise). */
async function steadyRss(pid, n = 5) {
  const v = [];
  for (let i = 0; i < n; i++) {
    v.push(procMemory(pid).rss);
    if (i < n - 1) await sleep(100);
  }
  return median(v);
}

/**
 * RSS growth of the serving process per open TaskStats stream (1 s interval): median RSS before,
 * then `streams` streams opened on one connection, median RSS after they settled.
 */
export async function statsMemory(target, { streams, settleMs = 1500, heapDir }) {
  const before = await steadyRss(target.pid);
  const heapBefore = heapDir ? await liveHeap(target.pid, heapDir) : undefined;
  const s = await openStatsStreams(target, streams, 1000);
  await sleep(settleMs);
  const after = await steadyRss(target.pid);
  const heapAfter = heapDir ? await liveHeap(target.pid, heapDir) : undefined;
  const received = s.total();
  await s.close();
  return {
    bytesPerStream: (after - before) / streams,
    heapBytesPerStream: heapBefore && heapAfter ? (heapAfter.heapUsed - heapBefore.heapUsed) / streams : undefined,
    streams,
    rssBefore: before,
    rssAfter: after,
    heapBefore,
    heapAfter,
    messagesSeen: received,
  };
}

/**
 * process.memoryUsage() of `pid` after full collections, from the preloaded heap probe
 * (lib/heap-probe.cjs): SIGUSR2, then its file in `heapDir`.
 */
async function liveHeap(pid, heapDir) {
  const file = join(heapDir, `heap-${pid}.json`);
  rmSync(file, { force: true });
  process.kill(pid, "SIGUSR2");
  const deadline = Date.now() + 30_000;
  while (!existsSync(file)) {
    if (Date.now() > deadline) throw new Error(`pid ${pid}: no heap report in ${heapDir} (is lib/heap-probe.cjs preloaded?)`);
    await sleep(20);
  }
  return JSON.parse(readFileSync(file, "utf8"));
}

function spawnTimed(cmd, args) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(cmd, args, { stdio: "ignore" });
    child.once("error", reject);
    child.once("exit", () => resolve(performance.now() - t0));
  });
}

/**
 * Start-up cycle: launchPlugin (spawn + go-plugin handshake) → PluginInfo answered → kill()
 * complete (GRPCController.Shutdown, process exit), versus spawning `node -e 0` until it exits, and
 * the same cycle of `floor` (the minimal Node plugin). Median of `runs`, alternating.
 */
export async function startup(bin, { runs, floor }) {
  const bare = [];
  const plugin = [];
  const floorMs = [];
  const phases = { handshake: [], pluginInfo: [], shutdown: [] };
  for (let i = 0; i < runs; i++) {
    bare.push(await spawnTimed(process.execPath, ["-e", "0"]));
    const c = await pluginCycle(bin, {});
    plugin.push(c.total);
    phases.handshake.push(c.handshake);
    phases.pluginInfo.push(c.pluginInfo);
    phases.shutdown.push(c.shutdown);
    floorMs.push((await pluginCycle(floor.bin, floor.env)).total);
  }
  return {
    pluginMs: median(plugin),
    bareNodeMs: median(bare),
    ratio: median(plugin) / median(bare),
    runs,
    phasesMs: { handshake: median(phases.handshake), pluginInfo: median(phases.pluginInfo), shutdown: median(phases.shutdown) },
    floorMs: median(floorMs),
    floorRatio: median(floorMs) / median(bare),
  };
}

async function pluginCycle(bin, env) {
  const t0 = performance.now();
  const p = await launchPlugin(bin, [], { env });
  const t1 = performance.now();
  const info = await p.basePlugin.pluginInfo({});
  const t2 = performance.now();
  await p.kill();
  const t3 = performance.now();
  if (info.type === undefined || !info.name) throw new Error(`${bin}: PluginInfo without name`);
  return { total: t3 - t0, handshake: t1 - t0, pluginInfo: t2 - t1, shutdown: t3 - t2 };
}

/**
 * What an agent's start costs a driver (not a target): the three launches Nomad makes (the
 * protocol's "What Nomad calls, in order") one after the other — load (PluginInfo, ConfigSchema,
 * kill), validate (SetConfig twice, kill) and run (SetConfig, Init, TaskEvents opened, until the
 * first Fingerprint message) — next to three `node -e 0`; median of `runs`, alternating. The load
 * launch is what the start-up cycle measures (the launcher's fast path answers it); the other two
 * load the driver.
 */
export async function agentBoot(bin, { runs }) {
  const phases = { load: [], validate: [], run: [], total: [], bare: [] };
  const config = { msgpackConfig: encode({}), pluginApiVersion: "v0.1.0" };
  for (let i = 0; i < runs; i++) {
    phases.bare.push(await spawnTimed(process.execPath, ["-e", "0"]));
    const { ms: load } = await timeMs(() =>
      launchedOnce(bin, async (p) => {
        const info = await p.basePlugin.pluginInfo({});
        await p.basePlugin.configSchema({});
        if (!info.name) throw new Error(`${bin}: PluginInfo without name`);
      }),
    );
    const { ms: validate } = await timeMs(() =>
      launchedOnce(bin, async (p) => {
        await p.basePlugin.setConfig(config);
        await p.basePlugin.setConfig(config);
      }),
    );
    const { ms: run, value: serving } = await timeMs(() => servingAsNomad(bin));
    await serving.stop();
    phases.load.push(load);
    phases.validate.push(validate);
    phases.run.push(run);
    phases.total.push(load + validate + run);
  }
  const m = Object.fromEntries(Object.entries(phases).map(([k, v]) => [k, median(v)]));
  return { runs, loadMs: m.load, validateMs: m.validate, runMs: m.run, totalMs: m.total, bareNodeMs: m.bare, ratio: m.total / (3 * m.bare) };
}

/** Launch `bin`, make `calls`, kill it (also when a call failed). */
async function launchedOnce(bin, calls) {
  const p = await launchPlugin(bin, [], {});
  try {
    await calls(p);
  } finally {
    await p.kill();
  }
}

/**
 * Idle RSS of a freshly started plugin (1 s after PluginInfo) versus an idle bare node (1 s after
 * spawn) and `floor` (the minimal Node plugin, 1 s after PluginInfo), medians of `runs`; the first
 * run also waits until `settledMs` and reads the plugin and bare node again (V8's memory reducer
 * shrinks an idle heap after about 8 s). "serving": the same driver as Nomad keeps one
 * ({@link servingAsNomad}), 1 s after its first Fingerprint.
 */
export async function idleRss(bin, { runs = 3, settleMs = 1000, settledMs = 12_000, floor }) {
  const plugin = [];
  const bare = [];
  const floorBytes = [];
  const serving = [];
  let settled;
  for (let i = 0; i < runs; i++) {
    const p = await launchPlugin(bin, [], {});
    await p.basePlugin.pluginInfo({});
    const f = await launchPlugin(floor.bin, [], { env: floor.env });
    await f.basePlugin.pluginInfo({});
    const n = await servingAsNomad(bin);
    const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 1e6)"], { stdio: "ignore" });
    await sleep(settleMs);
    plugin.push(procMemory(p.pid).rss);
    bare.push(procMemory(child.pid).rss);
    floorBytes.push(procMemory(f.pid).rss);
    serving.push(procMemory(n.plugin.pid).rss);
    await n.stop();
    if (i === 0 && settledMs > settleMs) {
      await sleep(settledMs - settleMs);
      settled = { afterMs: settledMs, pluginBytes: procMemory(p.pid).rss, bareNodeBytes: procMemory(child.pid).rss };
      settled.ratio = settled.pluginBytes / settled.bareNodeBytes;
    }
    child.kill("SIGKILL");
    await p.kill();
    await f.kill();
  }
  return {
    pluginBytes: median(plugin),
    bareNodeBytes: median(bare),
    ratio: median(plugin) / median(bare),
    runs,
    settled,
    floorBytes: median(floorBytes),
    floorRatio: median(floorBytes) / median(bare),
    servingBytes: median(serving),
    servingRatio: median(serving) / median(bare),
  };
}

/**
 * A driver plugin as Nomad keeps one once the agent is up: SetConfig and Init answered (Init's
 * Unimplemented counts as success, as in Nomad), the TaskEvents stream open and the Fingerprint
 * stream's first message received (no tasks).
 */
async function servingAsNomad(bin) {
  const plugin = await launchPlugin(bin, [], {});
  const ac = new AbortController();
  try {
    await plugin.basePlugin.setConfig({ msgpackConfig: encode({}), pluginApiVersion: "v0.1.0" });
    await plugin.driver.init({}).catch((err) => {
      if (err?.code !== Code.Unimplemented) throw err;
    });
    const events = plugin.driver.taskEvents({}, { signal: ac.signal })[Symbol.asyncIterator]();
    const eventsDone = events.next().catch(() => {});
    const fingerprints = plugin.driver.fingerprint({}, { signal: ac.signal })[Symbol.asyncIterator]();
    const first = await fingerprints.next();
    if (first.done || first.value.health === undefined) throw new Error(`${bin}: Fingerprint ended without a message`);
    const fingerprintsDone = (async () => {
      for (;;) if ((await fingerprints.next()).done) return;
    })().catch(() => {});
    return {
      plugin,
      async stop() {
        ac.abort();
        await Promise.race([Promise.all([eventsDone, fingerprintsDone]), sleep(2000)]);
        await plugin.kill();
      },
    };
  } catch (err) {
    ac.abort();
    await plugin.kill().catch(() => {});
    throw err;
  }
}

/**
 * The task executor each StartTask of the reference driver starts and waits for (its bundled
 * launcher `executorPath`, started by `launchExecutor` as the driver starts it): launch → go-plugin
 * handshake → client connected, median of `runs`, alternating with `node -e 0`; then, median of
 * `memoryRuns`, what one costs per task 1 s after it launched its task (`sleep`) next to an idle
 * bare node: VmRSS and private memory (smaps_rollup Private_Clean + Private_Dirty: what its exit
 * gives back; the pages of the node binary are shared by every node process).
 */
export async function executorCosts(executorPath, { runs, memoryRuns = 3, settleMs = 1000 }) {
  const { launchExecutor } = await import("@nomadkit/server/executor");
  const launch = [];
  const bare = [];
  for (let i = 0; i < runs; i++) {
    bare.push(await spawnTimed(process.execPath, ["-e", "0"]));
    const t0 = performance.now();
    const ex = await launchExecutor({ executorPath });
    launch.push(performance.now() - t0);
    await ex.kill();
  }
  const mem = { rss: [], private: [], bareRss: [], barePrivate: [] };
  for (let i = 0; i < memoryRuns; i++) {
    const ex = await launchExecutor({ executorPath });
    const idle = spawn(process.execPath, ["-e", "setInterval(() => {}, 1e6)"], { stdio: "ignore" });
    try {
      await ex.client.launch({ cmd: "/bin/sleep", args: ["3600"] });
      await sleep(settleMs);
      mem.rss.push(procMemory(ex.pid).rss);
      mem.private.push(privateMemory(ex.pid));
      mem.bareRss.push(procMemory(idle.pid).rss);
      mem.barePrivate.push(privateMemory(idle.pid));
    } finally {
      idle.kill("SIGKILL");
      await ex.shutdownTask().catch(() => {});
      await ex.kill().catch(() => {});
    }
  }
  return {
    launchMs: median(launch),
    bareNodeMs: median(bare),
    launchRatio: median(launch) / median(bare),
    runs,
    rssBytes: median(mem.rss),
    privateBytes: median(mem.private),
    bareNodeRssBytes: median(mem.bareRss),
    bareNodePrivateBytes: median(mem.barePrivate),
    memoryRuns,
  };
}

/**
 * What each task costs the driver plugin itself, as Nomad runs tasks: a fresh reference driver
 * (`bin`, the heap probe preloaded) with one task started, then `tasks` more, each with a WaitTask
 * call and a TaskStats stream (1 s) open; live V8 heap (after full collections) and VmRSS before
 * and after, per task. The first task warms the code paths up, so the figure is per extra task.
 */
export async function pluginPerTask(bin, { tasks, heapDir, settleMs = 3000 }) {
  const plugin = await launchPlugin(bin, [], { env: { ...profileEnv(undefined, [heapProbePreload]), NOMADKIT_BENCH_HEAP_DIR: heapDir } });
  const allocDir = mkdtempSync(join(tmpdir(), "nk-bench-tasks-"));
  const ac = new AbortController();
  setMaxListeners(0, ac.signal); // two calls per task
  const ids = [];
  const start = async (i) => {
    const task = benchTask(join(allocDir, `alloc-${i}`), `task-${i}`, { command: "/bin/sleep", args: ["3600"] });
    await plugin.driver.startTask({ task });
    ids.push(task.id);
    plugin.driver.waitTask({ taskId: task.id }, { signal: ac.signal }).catch(() => {});
    (async () => {
      for await (const _ of plugin.driver.taskStats({ taskId: task.id, collectionInterval: { seconds: 1n, nanos: 0 } }, { signal: ac.signal }));
    })().catch(() => {});
  };
  try {
    await plugin.basePlugin.setConfig({ msgpackConfig: encode({}), pluginApiVersion: "v0.1.0" });
    await start(0);
    await sleep(settleMs);
    const rssBefore = await steadyRss(plugin.pid);
    const heapBefore = await liveHeap(plugin.pid, heapDir);
    for (let i = 1; i <= tasks; i++) await start(i);
    await sleep(settleMs);
    const rssAfter = await steadyRss(plugin.pid);
    const heapAfter = await liveHeap(plugin.pid, heapDir);
    return {
      tasks,
      heapBytesPerTask: (heapAfter.heapUsed - heapBefore.heapUsed) / tasks,
      rssBytesPerTask: (rssAfter - rssBefore) / tasks,
      heapBefore: heapBefore.heapUsed,
      heapAfter: heapAfter.heapUsed,
      rssBefore,
      rssAfter,
    };
  } finally {
    ac.abort();
    for (const taskId of ids) await plugin.driver.destroyTask({ taskId, force: true }).catch(() => {});
    await plugin.kill().catch(() => {});
    rmSync(allocDir, { recursive: true, force: true });
  }
}

/** Peak RSS growth (summed over the target's processes) during one slowly-read exec. */
export async function slowReader(target, bytes, rate) {
  await sleep(300);
  const base = rssOf(target.pids);
  const baseByProcess = target.pids.map((p) => rssOf([p]));
  const sampler = rssSampler(() => target.pids, 10);
  const r = await execOnce(target, bytes, { rate });
  const { peak, samples, peakByPid } = sampler.stop();
  return {
    growthBytes: Math.max(0, peak - base),
    // Each served process on its own (plugin first, then the executor): its peak minus its base.
    growthBytesByProcess: target.pids.map((p, i) => Math.max(0, (peakByPid[p] ?? 0) - baseByProcess[i])),
    baseBytes: base,
    peakBytes: peak,
    seconds: r.seconds,
    mbPerSec: r.mbPerSec,
    samples,
  };
}
