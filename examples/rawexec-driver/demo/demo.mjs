#!/usr/bin/env node
// `npm start`: launches the nomadkit-rawexec plugin exactly as a Nomad client does (the plugin_dir
// executable, the go-plugin magic cookie, the handshake line, gRPC over a unix socket) and narrates
// a task's life: identity, capabilities, fingerprint, start, live stats, exec, stop, shutdown.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { encode } from "@msgpack/msgpack";
import { createTaskDirs, launchPlugin, nomadTaskConfig } from "@nomadkit/client";

const PLUGIN = fileURLToPath(new URL("../bin/nomadkit-rawexec", import.meta.url));
const color = process.stdout.isTTY && !process.env.NO_COLOR;
const bold = (s) => (color ? `\x1b[1m${s}\x1b[0m` : s);
const dim = (s) => (color ? `\x1b[2m${s}\x1b[0m` : s);
const say = (line = "") => process.stdout.write(line + "\n");
const step = (title) => say(`\n${bold(`▸ ${title}`)}`);
const field = (k, v) => say(`  ${k.padEnd(14)}${v}`);
const enc = new TextEncoder();
const dec = new TextDecoder();

const HEALTH = ["UNDETECTED", "UNHEALTHY", "HEALTHY"];
const MODES = ["HOST", "GROUP", "TASK", "NONE"];
const SIGNALS = { 1: "SIGHUP", 2: "SIGINT", 9: "SIGKILL", 15: "SIGTERM" };

function mib(n) {
  return `${(Number(n) / 1024 / 1024).toFixed(1)} MiB`;
}

/** One ExecTaskStreaming call as Nomad's client makes it: send, keep the request side open, collect. */
async function exec(plugin, taskId, command, input) {
  let release;
  const finished = new Promise((r) => (release = r));
  async function* requests() {
    yield { setup: { taskId, command, tty: false } };
    if (input !== undefined) {
      yield { stdin: { data: enc.encode(input) } };
      yield { stdin: { close: true } };
    }
    await finished;
  }
  let stdout = "";
  let stderr = "";
  let exitCode;
  try {
    for await (const m of plugin.driver.execTaskStreaming(requests(), { timeoutMs: 60_000 })) {
      if (m.stdout?.data.length) stdout += dec.decode(m.stdout.data);
      if (m.stderr?.data.length) stderr += dec.decode(m.stderr.data);
      if (m.exited) exitCode = m.result?.exitCode ?? 0;
    }
  } finally {
    release();
  }
  return { stdout, stderr, exitCode };
}

/** Resolves with the first value `next` yields within `ms`, or undefined. */
async function within(ms, promise) {
  let timer;
  const r = await Promise.race([promise, new Promise((res) => (timer = setTimeout(() => res(undefined), ms)))]);
  clearTimeout(timer);
  return r;
}

async function main() {
  say(bold("nomadkit demo: a TypeScript Nomad task driver, driven the way Nomad drives it"));
  const root = mkdtempSync(join(tmpdir(), "nomadkit-demo-"));
  let plugin;
  let taskId;
  try {
    step("Launch the plugin as Nomad does");
    say(dim(`  ${PLUGIN}`));
    say(dim("  env NOMAD_PLUGIN_MAGIC_COOKIE=e4327c2e…  PLUGIN_PROTOCOL_VERSIONS=2  PLUGIN_MIN_PORT=0  PLUGIN_MAX_PORT=0"));
    plugin = await launchPlugin(PLUGIN, [], {});
    const h = plugin.handshake;
    field("handshake", `${h.coreVersion}|${h.protocolVersion}|${h.network}|${h.address}|${h.protocol}|${h.serverCert}`);
    field("network", h.network);
    field("address", h.address);
    field("protocol", `${h.protocol} (core ${h.coreVersion}, app protocol ${h.protocolVersion})`);
    field("pid", String(plugin.pid));
    const health = await plugin.health.check({ service: "plugin" });
    field("health", health.status === 1 ? "SERVING" : `status ${health.status}`);

    step("PluginInfo");
    const info = await plugin.basePlugin.pluginInfo({});
    field("name", info.name);
    field("type", info.type === 2 ? "DRIVER" : String(info.type));
    field("version", `${info.pluginVersion} (plugin API ${info.pluginApiVersions.join(", ")})`);

    step("SetConfig, Init");
    const config = { create_network: false };
    await plugin.basePlugin.setConfig({ msgpackConfig: encode(config), pluginApiVersion: "v0.1.0" });
    await plugin.driver.init({});
    field("config", `${JSON.stringify(config)} (sent as msgpack)`);

    step("Capabilities");
    const { capabilities: c } = await plugin.driver.capabilities({});
    field("send_signals", String(c.sendSignals));
    field("exec", String(c.exec));
    field("network", `${c.networkIsolationModes.map((m) => MODES[m] ?? m).join(", ")}; must_create_network ${c.mustCreateNetwork}`);

    step("Fingerprint (first response)");
    const events = [];
    const streams = new AbortController();
    const fingerprints = plugin.driver.fingerprint({}, { signal: streams.signal })[Symbol.asyncIterator]();
    const fp = (await fingerprints.next()).value;
    field("health", `${HEALTH[fp.health] ?? fp.health}: ${fp.healthDescription}`);
    for (const [k, v] of Object.entries(fp.attributes)) field(k === Object.keys(fp.attributes)[0] ? "attributes" : "", `${k} = ${v.value.value}`);
    let onEvent;
    void (async () => {
      try {
        for await (const e of plugin.driver.taskEvents({}, { signal: streams.signal })) {
          events.push(e);
          onEvent?.();
        }
      } catch {
        // ends with the plugin
      }
    })();

    step("StartTask");
    const allocId = randomUUID();
    const allocDir = join(root, allocId);
    const name = "ticker";
    const dirs = createTaskDirs(allocDir, name); // what Nomad makes before StartTask
    // Prints a tick every half second and does a little arithmetic in between, so stats show CPU.
    const script = 'i=0; while :; do i=$((i+1)); echo "tick $i"; j=0; while [ $j -lt 5000 ]; do j=$((j+1)); done; sleep 0.5; done';
    const stdoutPath = join(dirs.logsDir, `${name}.stdout.0`);
    // The TaskConfig Nomad's task runner would send: ids, NOMAD_* variables, resources, paths.
    const task = nomadTaskConfig({
      name,
      dirs,
      allocId,
      jobName: "demo",
      stdoutPath,
      stderrPath: join(dirs.logsDir, `${name}.stderr.0`),
      msgpackDriverConfig: encode({ command: "/bin/sh", args: ["-c", script] }),
    });
    taskId = task.id;
    const firstEvent = new Promise((r) => (onEvent = r));
    const { handle } = await plugin.driver.startTask({ task });
    const state = JSON.parse(dec.decode(handle.driverState));
    field("config", `command = "/bin/sh", args = ["-c", ${JSON.stringify(script)}]`);
    field("task id", taskId);
    field("pid", `${state.driver.pid} (supervised by executor pid ${state.executor.pid})`);
    field("handle", `driver_state ${handle.driverState.length} bytes: executor ${state.executor.network}:${state.executor.address}`);
    await within(10_000, firstEvent);
    if (events[0]) field("task event", events[0].message);
    const waiting = plugin.driver.waitTask({ taskId });

    step("TaskStats (collection_interval 1s): live samples of the task's process tree");
    const statsStop = new AbortController();
    let n = 0;
    for await (const r of plugin.driver.taskStats({ taskId, collectionInterval: { seconds: 1n } }, { signal: statsStop.signal })) {
      const { cpu, memory } = r.stats.aggResourceUsage;
      const at = new Date(Number(r.stats.timestamp.seconds) * 1000 + r.stats.timestamp.nanos / 1e6);
      say(`  #${++n}  ${at.toISOString().slice(11, 23)}  cpu ${cpu.percent.toFixed(2).padStart(6)}%  rss ${mib(memory.rss).padStart(9)}  total_ticks ${cpu.totalTicks.toFixed(2)} MHz  pids ${Object.keys(r.stats.resourceUsageByPid).length}`);
      if (n === 3) break;
    }
    statsStop.abort();
    const ticks = readFileSync(stdoutPath, "utf8").trim().split("\n");
    field("task stdout", `${ticks.length} lines so far, last: ${JSON.stringify(ticks.at(-1))}`);

    step("ExecTaskStreaming: uname -a");
    const uname = await exec(plugin, taskId, ["uname", "-a"]);
    say(`  ${uname.stdout.trim()}`);
    field("exit", String(uname.exitCode));

    step('ExecTaskStreaming with stdin: tr a-z A-Z  <<< "hello from nomadkit"');
    const tr = await exec(plugin, taskId, ["tr", "a-z", "A-Z"], "hello from nomadkit\n");
    say(`  ${tr.stdout.trim()}`);
    field("exit", String(tr.exitCode));

    step("StopTask (SIGTERM, timeout 5s), then WaitTask");
    await plugin.driver.stopTask({ taskId, signal: "SIGTERM", timeout: { seconds: 5n } });
    const { result } = await waiting;
    field("result", `exit_code ${result.exitCode}, signal ${result.signal}${SIGNALS[result.signal] ? ` (${SIGNALS[result.signal]})` : ""}`);
    await plugin.driver.destroyTask({ taskId, force: false });
    taskId = undefined;
    field("destroyed", "task forgotten, executor gone");

    step("Shutdown: Driver.Shutdown, then GRPCController.Shutdown (SIGKILL after 2 s, as Nomad)");
    streams.abort();
    await plugin.driver.shutdown({}, { timeoutMs: 2000 });
    const t0 = performance.now();
    const exit = await plugin.kill();
    plugin = undefined;
    field("plugin exit", `${exit.signal ? `signal ${exit.signal}` : `status ${exit.code}`} after ${((performance.now() - t0) / 1000).toFixed(2)}s`);
    say(`\n${bold("Done.")} The same binary runs under a real Nomad agent: see README "Install a nomadkit driver into Nomad".`);
  } finally {
    if (plugin) {
      if (taskId) await plugin.driver.destroyTask({ taskId, force: true }).catch(() => undefined);
      await plugin.kill();
    }
    rmSync(root, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`\ndemo failed: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
