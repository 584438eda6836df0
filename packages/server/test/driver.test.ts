// The driver authoring API through the real wire: a TypeScript driver (fixtures/driver/test-driver.ts)
// served by serveDriver in a child process, launched like Nomad launches plugins, driven by the
// generated clients and by @grpc/grpc-js.
import { readdirSync, readFileSync } from "node:fs";
import { create, toJson } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type * as grpc from "@grpc/grpc-js";
import { encode } from "@msgpack/msgpack";
import { RecoverableError, type PluginClient } from "@nomadkit/client";
import { PluginType } from "@nomadkit/protocol/base";
import {
  DriverCapabilities_FSIsolation,
  DriverCapabilities_MountConfigs,
  FingerprintResponse_HealthState,
  FingerprintResponseSchema,
  NetworkIsolationSpec_NetworkIsolationMode,
  TaskState,
} from "@nomadkit/protocol/driver";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { grpcDriverClient, launchFixture } from "./fixtures/driver/harness.js";

let plugin: PluginClient;
let seq = 0;

const taskConfig = (cfg: Record<string, unknown>, id = `task-${++seq}`) => ({
  id,
  name: `web-${seq}`,
  allocId: `alloc-${seq}`,
  msgpackDriverConfig: encode(cfg),
});

async function code(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectError);
    return err as ConnectError;
  }
  throw new Error("expected the call to fail");
}

/** Nomad's topology: 4 cores at 2000 MHz base speed. */
const nomadConfig = {
  driver: {
    ClientMinPort: 20000,
    ClientMaxPort: 32000,
    Topology: {
      cores: [0, 1, 2, 3].map((i) => ({ coreId: i, baseSpeed: 2000n })),
    },
  },
};

beforeAll(async () => {
  plugin = await launchFixture("test-driver");
  // Nomad's validation pass calls SetConfig twice with the same config, then Init.
  for (let i = 0; i < 2; i++) {
    await plugin.basePlugin.setConfig({ msgpackConfig: encode({ greeting: "hi", level: null }), nomadConfig, pluginApiVersion: "v0.1.0" });
  }
  await plugin.driver.init({});
});

afterAll(async () => {
  await plugin?.kill();
});

describe("BasePlugin", () => {
  it("answers PluginInfo as a DRIVER with API version v0.1.0", async () => {
    const info = await plugin.basePlugin.pluginInfo({});
    expect(info.type).toBe(PluginType.DRIVER);
    expect(info.pluginApiVersions).toEqual(["v0.1.0"]);
    expect(info.pluginVersion).toBe("1.2.3");
    expect(info.name).toBe("nomadkit-test");
  });

  it("returns both schemas built with the hclspec builder", async () => {
    const cfg = await plugin.basePlugin.configSchema({});
    expect(cfg.spec?.block.case).toBe("object");
    const task = await plugin.driver.taskConfigSchema({});
    const attrs = task.spec?.block.case === "object" ? task.spec.block.value.attributes : {};
    expect(Object.keys(attrs).sort()).toEqual(["args", "command", "fail", "percent", "ticks"]);
    expect(attrs["command"]?.block).toMatchObject({ case: "Attr", value: { name: "command", type: "string", required: true } });
  });

  it("rejects a bad plugin config with InvalidArgument naming the field", async () => {
    const err = await code(plugin.basePlugin.setConfig({ msgpackConfig: encode({ greeting: 42 }) }));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toBe('plugin config: field "greeting": expected string, got number');
    const bytes = await code(plugin.basePlugin.setConfig({ msgpackConfig: Uint8Array.of(0x85, 0xa1) }));
    expect(bytes.code).toBe(Code.InvalidArgument);
    expect(bytes.rawMessage).toMatch(/^plugin config: malformed msgpack/);
    // A good config afterwards is still accepted (and the plugin is alive).
    await plugin.basePlugin.setConfig({ msgpackConfig: encode({ greeting: "hi" }), nomadConfig });
  });
});

describe("Driver", () => {
  it("reports capabilities merged over the defaults", async () => {
    const { capabilities } = await plugin.driver.capabilities({});
    expect(capabilities).toMatchObject({
      sendSignals: true,
      exec: true,
      fsIsolation: DriverCapabilities_FSIsolation.NONE,
      // Not the wire's 0 (ANY_MOUNTS): the test driver makes no mounts.
      mountConfigs: DriverCapabilities_MountConfigs.NO_MOUNTS,
      mustCreateNetwork: true,
      disableLogCollection: true,
      networkIsolationModes: [NetworkIsolationSpec_NetworkIsolationMode.HOST, NetworkIsolationSpec_NetworkIsolationMode.GROUP],
    });
  });

  it("fingerprint: first message at once, stream stays open and carries pushed updates", async () => {
    const ac = new AbortController();
    const it = plugin.driver.fingerprint({}, { signal: ac.signal })[Symbol.asyncIterator]();
    const first = (await it.next()).value!;
    expect(first.health).toBe(FingerprintResponse_HealthState.HEALTHY);
    expect(first.healthDescription).toBe("Healthy");
    expect(toJson(FingerprintResponseSchema, first)).toMatchObject({
      attributes: {
        "driver.nomadkit-test.greeting": { stringVal: "hi" },
        "driver.nomadkit-test.ratio": { floatVal: 0.5, unit: "x" },
      },
    });
    const before = first.attributes["driver.nomadkit-test.tasks"]?.value.value;
    // Starting a task makes the driver push a new fingerprint on the same (still open) stream.
    const cfg = taskConfig({ command: "sleep", args: ["30"] });
    await plugin.driver.startTask({ task: cfg });
    const second = (await it.next()).value!;
    expect(second.attributes["driver.nomadkit-test.tasks"]?.value.value).toBe(BigInt(before as bigint) + 1n);
    ac.abort();
    await plugin.driver.destroyTask({ taskId: cfg.id, force: true });
  });

  it("runs a task through its lifecycle with events, inspect, wait, stop and destroy", async () => {
    const ac = new AbortController();
    const events = plugin.driver.taskEvents({}, { signal: ac.signal })[Symbol.asyncIterator]();
    const cfg = taskConfig({ command: "sleep", args: ["60"] });
    const started = await plugin.driver.startTask({ task: cfg });
    expect(started.handle?.state).toBe(TaskState.RUNNING);
    expect(started.handle?.config?.id).toBe(cfg.id);
    expect(JSON.parse(Buffer.from(started.handle!.driverState).toString())).toHaveProperty("pid");
    expect(started.networkOverride).toMatchObject({ addr: "10.0.0.1", portMap: { http: 8080 } });

    let ev = (await events.next()).value!;
    while (ev.taskId !== cfg.id) ev = (await events.next()).value!;
    expect(ev).toMatchObject({ taskId: cfg.id, allocId: cfg.allocId, taskName: cfg.name, message: "task started", annotations: { command: "sleep" } });
    expect(ev.timestamp).toBeDefined();

    const inspected = await plugin.driver.inspectTask({ taskId: cfg.id });
    expect(inspected.task).toMatchObject({ id: cfg.id, name: cfg.name, state: TaskState.RUNNING });
    expect(inspected.task?.startedAt).toBeDefined();
    expect(inspected.driver?.attributes["pid"]).toMatch(/^\d+$/);

    const waiting = plugin.driver.waitTask({ taskId: cfg.id });
    await plugin.driver.stopTask({ taskId: cfg.id, signal: "TERM", timeout: { seconds: 10n } });
    const stopEvent = (await events.next()).value!;
    expect(stopEvent.message).toBe("stopping with SIGTERM");
    const exit = await waiting;
    expect(exit.result).toMatchObject({ signal: 15 });

    const after = await plugin.driver.inspectTask({ taskId: cfg.id });
    expect(after.task?.state).toBe(TaskState.EXITED);
    expect(after.task?.result?.signal).toBe(15);
    await plugin.driver.destroyTask({ taskId: cfg.id });
    ac.abort();
    const gone = await code(plugin.driver.inspectTask({ taskId: cfg.id }));
    expect(gone.code).toBe(Code.NotFound);
  });

  it("answers WaitTask with the exit code", async () => {
    const cfg = taskConfig({ command: "sh", args: ["-c", "exit 7"] });
    await plugin.driver.startTask({ task: cfg });
    const r = await plugin.driver.waitTask({ taskId: cfg.id });
    expect(r.result?.exitCode).toBe(7);
    expect(r.err).toBe("");
    await plugin.driver.destroyTask({ taskId: cfg.id });
  });

  it("names the field of a bad task config, the bad signal and the unknown task id", async () => {
    const bad = await code(plugin.driver.startTask({ task: taskConfig({ command: "true", args: ["a", 1] }) }));
    expect(bad.code).toBe(Code.InvalidArgument);
    expect(bad.rawMessage).toBe('task config: field "args[1]": expected string, got number');
    const missing = await code(plugin.driver.startTask({ task: taskConfig({ args: [] }) }));
    expect(missing.rawMessage).toBe('task config: field "command": required attribute is missing');
    const garbage = await code(plugin.driver.startTask({ task: { ...taskConfig({}), msgpackDriverConfig: Uint8Array.of(0xdc, 0xff) } }));
    expect(garbage.code).toBe(Code.InvalidArgument);

    const unknown = await code(plugin.driver.waitTask({ taskId: "no-such-task" }));
    expect(unknown.code).toBe(Code.NotFound);
    expect(unknown.rawMessage).toContain('"no-such-task"');
    for (const p of [
      plugin.driver.stopTask({ taskId: "nope-1", signal: "SIGTERM" }),
      plugin.driver.signalTask({ taskId: "nope-2", signal: "SIGHUP" }),
      plugin.driver.destroyTask({ taskId: "nope-3" }),
      plugin.driver.execTask({ taskId: "nope-4", command: ["true"] }),
    ]) {
      const e = await code(p);
      expect(e.code).toBe(Code.NotFound);
      expect(e.rawMessage).toMatch(/"nope-\d"/);
    }

    const cfg = taskConfig({ command: "sleep", args: ["60"] });
    await plugin.driver.startTask({ task: cfg });
    const sig = await code(plugin.driver.signalTask({ taskId: cfg.id, signal: "SIGFOO" }));
    expect(sig.code).toBe(Code.InvalidArgument);
    expect(sig.rawMessage).toBe('signal: unknown signal "SIGFOO"');
    const stop = await code(plugin.driver.stopTask({ taskId: cfg.id, signal: "NOPE" }));
    expect(stop.rawMessage).toBe('signal: unknown signal "NOPE"');
    // Numbers without a name (real-time signals) are the executor's Signal RPC's only: drivers get names.
    for (const signal of ["34", "0"]) {
      const n = await code(plugin.driver.signalTask({ taskId: cfg.id, signal }));
      expect(n.rawMessage, signal).toBe(`signal: unknown signal ${signal}`);
    }
    // Names Nomad's executor accepts though Node's table lacks them (SIGCHLD's alias: sleep ignores it).
    await plugin.driver.signalTask({ taskId: cfg.id, signal: "SIGCLD" });
    const dup = await code(plugin.driver.startTask({ task: cfg }));
    expect(dup.code).toBe(Code.AlreadyExists);
    expect(dup.rawMessage).toContain(cfg.id);
    const empty = await code(plugin.driver.execTask({ taskId: cfg.id, command: [] }));
    expect(empty.rawMessage).toBe("command: must not be empty");
    await plugin.driver.destroyTask({ taskId: cfg.id, force: true });
  });

  it("maps RecoverableError from startTask to FailedPrecondition with the Go detail", async () => {
    const r = plugin.driver.startTask({ task: taskConfig({ command: "true", fail: "recoverable" }) });
    await expect(r).rejects.toBeInstanceOf(RecoverableError);
    await expect(r).rejects.toMatchObject({ recoverable: true, message: "temporary failure, try again" });
    const u = plugin.driver.startTask({ task: taskConfig({ command: "true", fail: "unrecoverable" }) });
    await expect(u).rejects.toMatchObject({ recoverable: false });
  });

  it("recovers a task from its handle, once", async () => {
    const cfg = taskConfig({ command: "sleep", args: ["60"] });
    const { handle } = await plugin.driver.startTask({ task: cfg });
    await plugin.driver.destroyTask({ taskId: cfg.id, force: true });
    await plugin.driver.recoverTask({ taskId: cfg.id, handle });
    await plugin.driver.recoverTask({ taskId: cfg.id, handle }); // already managed: no-op
    expect((await plugin.driver.inspectTask({ taskId: cfg.id })).task?.state).toBe(TaskState.RUNNING);
    const noHandle = await code(plugin.driver.recoverTask({ taskId: "x" }));
    expect(noHandle.rawMessage).toBe("handle: required");
    await plugin.driver.destroyTask({ taskId: cfg.id, force: true });
  });

  it("recovers a task whose handle has no config block, as Nomad's state database returns it after an agent restart", async () => {
    // `command` is required by the task schema: decoding the empty block would fail the recovery.
    const cfg = taskConfig({ command: "sleep", args: ["60"] });
    const { handle } = await plugin.driver.startTask({ task: cfg });
    await plugin.driver.destroyTask({ taskId: cfg.id, force: true });
    await plugin.driver.recoverTask({ taskId: cfg.id, handle: { ...handle!, config: { ...handle!.config!, msgpackDriverConfig: new Uint8Array() } } });
    expect((await plugin.driver.inspectTask({ taskId: cfg.id })).driver?.attributes).toMatchObject({ recovered_config: "null" });
    await plugin.driver.destroyTask({ taskId: cfg.id, force: true });
    // A block that no longer fits the schema (an upgraded plugin): recovered without it, not refused.
    await plugin.driver.recoverTask({ taskId: cfg.id, handle: { ...handle!, config: { ...handle!.config!, msgpackDriverConfig: encode({ args: [] }) } } });
    expect((await plugin.driver.inspectTask({ taskId: cfg.id })).driver?.attributes).toMatchObject({ recovered_config: "null" });
    await plugin.driver.destroyTask({ taskId: cfg.id, force: true });
    // A handle that still has it (a plugin restart under the same agent) gets it decoded.
    await plugin.driver.recoverTask({ taskId: cfg.id, handle });
    expect((await plugin.driver.inspectTask({ taskId: cfg.id })).driver?.attributes.recovered_config).toBe(
      JSON.stringify({ command: "sleep", args: ["60"], percent: 50 }),
    );
    await plugin.driver.destroyTask({ taskId: cfg.id, force: true });
  });

  it("undoes a start whose driverState cannot be encoded: Internal naming it, the task destroyed and forgotten", async () => {
    // A duration no other process uses, to find this task's process by its command line.
    const duration = `60.${process.pid}${++seq}`;
    const cfg = taskConfig({ command: "sleep", args: [duration], fail: "state" });
    const err = await code(plugin.driver.startTask({ task: cfg }));
    expect(err.code).toBe(Code.Internal);
    expect(err.rawMessage).toMatch(/^startTask returned a driverState that is neither bytes nor JSON: .*BigInt/);
    // Killed (destroyTask with force), not left running without a handle Nomad could destroy it with.
    const running = readdirSync("/proc").filter((d) => {
      try {
        return /^\d+$/.test(d) && readFileSync(`/proc/${d}/cmdline`, "utf8") === `sleep\0${duration}\0`;
      } catch {
        return false;
      }
    });
    expect(running).toEqual([]);
    expect((await code(plugin.driver.inspectTask({ taskId: cfg.id }))).code).toBe(Code.NotFound);
    // The id is free again.
    await plugin.driver.startTask({ task: { ...cfg, msgpackDriverConfig: encode({ command: "sleep", args: ["60"] }) } });
    await plugin.driver.destroyTask({ taskId: cfg.id, force: true });
  });


  it("streams stats with timestamp, cpu, memory and total_ticks from Nomad's topology", async () => {
    const a = taskConfig({ command: "sleep", args: ["60"], percent: 50 });
    const b = taskConfig({ command: "sleep", args: ["60"], percent: 50, ticks: 1234.5 });
    await plugin.driver.startTask({ task: a });
    await plugin.driver.startTask({ task: b });
    const ac = new AbortController();
    const samples = [];
    for await (const s of plugin.driver.taskStats({ taskId: a.id, collectionInterval: { nanos: 20_000_000 } }, { signal: ac.signal })) {
      samples.push(s.stats!);
      if (samples.length === 2) break;
    }
    ac.abort();
    for (const s of samples) {
      expect(s.id).toBe(a.id);
      expect(s.timestamp).toBeDefined();
      expect(s.aggResourceUsage?.cpu).toBeDefined();
      expect(s.aggResourceUsage?.memory?.rss).toBe(4096n);
      // 50% of one core of 4 x 2000 MHz = 1000 MHz.
      expect(s.aggResourceUsage?.cpu?.totalTicks).toBe(1000);
      expect(s.resourceUsageByPid["1"]?.cpu?.totalTicks).toBe(500);
      expect(s.resourceUsageByPid["1"]?.memory).toBeDefined();
    }
    const first = await plugin.driver.taskStats({ taskId: b.id })[Symbol.asyncIterator]().next();
    expect(first.value?.stats?.aggResourceUsage?.cpu?.totalTicks).toBe(1234.5);
    const unknown = plugin.driver.taskStats({ taskId: "ghost" })[Symbol.asyncIterator]().next();
    await expect(unknown).rejects.toMatchObject({ code: Code.NotFound });
    await plugin.driver.destroyTask({ taskId: a.id, force: true });
    await plugin.driver.destroyTask({ taskId: b.id, force: true });
  });

  it("answers a failure with a huge message with its code and the message shortened, not a reset stream (Internal)", async () => {
    // The message names the 64 KiB id: percent-encoded in the trailers, it would not fit Node's 64 KiB header block.
    for (const taskId of ["x".repeat(64 * 1024), "\u{1F600}".repeat(16 * 1024), "é".repeat(8191) + "\u{1F600}".repeat(10)]) {
      const err = await plugin.driver.waitTask({ taskId }).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: Code.NotFound, rawMessage: expect.stringMatching(/… \(\d+ more characters\)$/) });
    }
    // The plugin goes on serving.
    await expect(plugin.driver.waitTask({ taskId: "ghost" })).rejects.toMatchObject({ code: Code.NotFound });
  });

  it("runs buffered ExecTask on top of the high-level exec form", async () => {
    const cfg = taskConfig({ command: "sleep", args: ["60"] });
    await plugin.driver.startTask({ task: cfg });
    const r = await plugin.driver.execTask({ taskId: cfg.id, command: ["sh", "-c", "echo out; echo err >&2; exit 3"], timeout: { seconds: 30n } });
    expect(Buffer.from(r.stdout).toString()).toBe("out\n");
    expect(Buffer.from(r.stderr).toString()).toBe("err\n");
    expect(r.result?.exitCode).toBe(3);
    const killed = await plugin.driver.execTask({ taskId: cfg.id, command: ["sh", "-c", "kill -9 $$"] });
    // As Nomad's ExecScript reports a command killed by a signal.
    expect(killed.result).toMatchObject({ exitCode: -1, signal: 0 });
    await plugin.driver.destroyTask({ taskId: cfg.id, force: true });
  });

  it("creates and destroys networks idempotently", async () => {
    const first = await plugin.driver.createNetwork({ allocId: "alloc-net", hostname: "web" });
    expect(first).toMatchObject({ created: true, isolationSpec: { mode: NetworkIsolationSpec_NetworkIsolationMode.GROUP, path: "/var/run/netns/alloc-net", labels: { hostname: "web" } } });
    const again = await plugin.driver.createNetwork({ allocId: "alloc-net", hostname: "web" });
    expect(again.created).toBe(false);
    await plugin.driver.destroyNetwork({ allocId: "alloc-net", isolationSpec: first.isolationSpec });
    await plugin.driver.destroyNetwork({ allocId: "alloc-net" });
    const bad = await code(plugin.driver.createNetwork({ allocId: "" }));
    expect(bad.rawMessage).toBe("alloc_id: must not be empty");
    // A hostname with a newline would put a line of its own into a hosts file written from it.
    const injected = await code(plugin.driver.createNetwork({ allocId: "alloc-net2", hostname: "web\n10.0.0.1 vault.service.consul" }));
    expect(injected.rawMessage).toBe(`hostname: "web\\n10.0.0.1 vault.service.consul" is not a host name: whitespace, control characters and '#' are not allowed`);
    const comment = await code(plugin.driver.createNetwork({ allocId: "alloc-net2", hostname: "web#x" }));
    expect(comment.code).toBe(Code.InvalidArgument);
    const long = await code(plugin.driver.createNetwork({ allocId: "alloc-net2", hostname: `${"a".repeat(64)}.example` }));
    expect(long.rawMessage).toMatch(/is not a host name: a label is longer than 63 characters$/);
    // What Nomad lets through: ${NOMAD_ALLOC_NAME} interpolated (its job check skips interpolations).
    const named = await plugin.driver.createNetwork({ allocId: "alloc-net3", hostname: "example.cache[0]" });
    expect(named.isolationSpec?.labels.hostname).toBe("example.cache[0]");
    await plugin.driver.destroyNetwork({ allocId: "alloc-net3", isolationSpec: named.isolationSpec });
  });

  it("answers the same through @grpc/grpc-js", async () => {
    const client = grpcDriverClient(plugin.address);
    try {
      const call = <T>(method: string, req: unknown) =>
        new Promise<T>((resolve, reject) =>
          (client[method] as (r: unknown, cb: (e: grpc.ServiceError | null, v: T) => void) => void).call(client, req, (e, v) => (e ? reject(e) : resolve(v))),
        );
      const caps = await call<{ capabilities: { send_signals: boolean; must_create_network: boolean } }>("Capabilities", {});
      expect(caps.capabilities).toMatchObject({ send_signals: true, must_create_network: true });
      const err = await call("WaitTask", { task_id: "grpc-ghost" }).catch((e: grpc.ServiceError) => e);
      // grpc-message is encoded as the gRPC spec says: grpc-js (decodeURI) reads it as grpc-go does.
      expect(err).toMatchObject({ code: 5 });
      expect((err as grpc.ServiceError).details).toContain('"grpc-ghost"');
      const cfg = taskConfig({ command: "sh", args: ["-c", "exit 4"] });
      await call("StartTask", { task: { id: cfg.id, name: cfg.name, alloc_id: cfg.allocId, msgpack_driver_config: Buffer.from(cfg.msgpackDriverConfig) } });
      const w = await call<{ result: { exit_code: number } }>("WaitTask", { task_id: cfg.id });
      expect(w.result.exit_code).toBe(4);
      const bad = await call("StartTask", { task: { id: "grpc-bad", msgpack_driver_config: Buffer.from(encode({ command: ["x"] })) } }).catch((e: grpc.ServiceError) => e);
      expect(bad).toMatchObject({ code: 3 });
      expect((bad as grpc.ServiceError).details).toBe('task config: field "command": expected string, got list');
      // The fingerprint stream delivers its first message at once and stays open.
      const fp = (client["Fingerprint"] as (r: unknown) => grpc.ClientReadableStream<{ health: string }>).call(client, {});
      const msg = await new Promise<{ health: string }>((resolve) => fp.once("data", resolve));
      expect(msg.health).toBe("HEALTHY");
      fp.on("error", () => {});
      fp.cancel();
      await call("DestroyTask", { task_id: cfg.id });
    } finally {
      client.close();
    }
  });

  it("still answers after all of that (no crash)", async () => {
    const info = await plugin.basePlugin.pluginInfo({});
    expect(info.name).toBe("nomadkit-test");
    expect(create).toBeDefined();
  });
});
