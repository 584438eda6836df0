// Cancellations at scale (issue 8): 1,000 streams — TaskStats, Fingerprint, TaskEvents and
// ExecTaskStreaming (pipes and tty; chatty, echoing and silent commands) — against one real plugin
// process, each cancelled by its caller at a moment picked by a seeded RNG: before the first
// message, after k messages, or after a random delay. Every caller sees a cancellation
// (isCancellation), and afterwards:
// - zero error-level log lines on either side: the plugin's hclog stderr (launchPlugin's log
//   callback), and on the client side console.error/console.warn and process warnings (e.g. a
//   MaxListenersExceeded warning from leaked abort listeners);
// - the plugin's active resources (process.getActiveResourcesInfo(), reported by the fixture) and
//   its child processes are back to the baseline, and so are this process's active resources;
// - no unhandled rejection.
// Cancellation of every method once, in process, is proven by packages/server/test/cancellation.test.ts.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { encode } from "@msgpack/msgpack";
import { isCancellation, type PluginClient, RequestQueue } from "@nomadkit/client";
import {
  LogSink,
  descendantsOf,
  launchRelDriver,
  pool,
  recordUnhandledRejections,
  resourceCounts,
  rng,
  until,
  withinBaseline,
} from "../reliability/helpers.js";

const STREAMS = 1000;
const CONCURRENCY = 16;
const SEED = 0x8badf00d;

type Kind = "taskStats" | "fingerprint" | "taskEvents" | "exec";
const KINDS: Kind[] = ["taskStats", "fingerprint", "taskEvents", "exec"];
const EXEC_COMMANDS: { command: string[]; tty: boolean; chatty: boolean; stdin: boolean }[] = [
  { command: ["yes", "flow control applies"], tty: false, chatty: true, stdin: false },
  { command: ["cat"], tty: false, chatty: false, stdin: true },
  { command: ["sleep", "3600"], tty: false, chatty: false, stdin: false },
  { command: ["cat"], tty: true, chatty: false, stdin: true },
];

let plugin: PluginClient;
let logs: LogSink;
const clientComplaints: string[] = [];
let unhandled: ReturnType<typeof recordUnhandledRejections>;
const onWarning = (w: Error) => clientComplaints.push(`process warning: ${w.name}: ${w.message}`);

function readCmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").trim();
  } catch {
    return "?";
  }
}

async function probe(): Promise<{ resources: Record<string, number>; execs: number }> {
  const r = await plugin.driver.inspectTask({ taskId: "probe" });
  return { resources: JSON.parse(r.driver!.attributes.resources!) as Record<string, number>, execs: Number(r.driver!.attributes.execs) };
}

beforeAll(async () => {
  unhandled = recordUnhandledRejections();
  process.on("warning", onWarning);
  for (const level of ["error", "warn"] as const) {
    const original = console[level].bind(console);
    vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
      clientComplaints.push(`console.${level}: ${args.map(String).join(" ")}`);
      original(...args);
    });
  }
  ({ plugin, logs } = await launchRelDriver({ REL_FP_MS: "10", REL_EVENTS_MS: "10", NOMADKIT_LOG_LEVEL: "debug" }));
  for (const id of ["t", "probe"]) await plugin.driver.startTask({ task: { id, msgpackDriverConfig: encode({ command: "none" }) } });
});

afterAll(async () => {
  process.off("warning", onWarning);
  vi.restoreAllMocks();
  unhandled.uninstall();
  if (plugin) expect(await plugin.kill()).toEqual({ code: 0, signal: null });
});

interface Plan {
  kind: Kind;
  /** "first": cancel before anything arrives; "after": after `messages`; "delay": after `delayMs`. */
  when: "first" | "after" | "delay";
  messages: number;
  delayMs: number;
  exec: (typeof EXEC_COMMANDS)[number];
  intervalMs: number;
}

function plans(): Plan[] {
  const r = rng(SEED);
  return Array.from({ length: STREAMS }, (_, i) => {
    const kind = KINDS[i % KINDS.length]!;
    const exec = EXEC_COMMANDS[r.int(0, EXEC_COMMANDS.length - 1)]!;
    let when = (["first", "after", "delay"] as const)[r.int(0, 2)]!;
    // A silent command never produces a message to count.
    if (kind === "exec" && when === "after" && !exec.chatty && !exec.stdin) when = "delay";
    return { kind, when, messages: r.int(1, 5), delayMs: r.int(0, 60), exec, intervalMs: r.int(5, 50) };
  });
}

/** Runs one stream and cancels it as planned; resolves with what the caller saw. */
async function runOne(plan: Plan): Promise<{ error: unknown; received: number }> {
  const ac = new AbortController();
  const opts = { signal: ac.signal };
  let requests: RequestQueue<object> | undefined;
  let iterable: AsyncIterable<unknown>;
  switch (plan.kind) {
    case "taskStats":
      iterable = plugin.driver.taskStats({ taskId: "t", collectionInterval: { seconds: 0n, nanos: plan.intervalMs * 1_000_000 } }, opts);
      break;
    case "fingerprint":
      iterable = plugin.driver.fingerprint({}, opts);
      break;
    case "taskEvents":
      iterable = plugin.driver.taskEvents({}, opts);
      break;
    case "exec":
      requests = new RequestQueue<object>();
      requests.push({ setup: { taskId: "t", command: plan.exec.command, tty: plan.exec.tty } });
      if (plan.exec.stdin) requests.push({ stdin: { data: Buffer.from("echo me\n") } });
      iterable = plugin.driver.execTaskStreaming(requests, opts);
      break;
  }
  let timer: NodeJS.Timeout | undefined;
  if (plan.when === "first") ac.abort();
  if (plan.when === "delay") timer = setTimeout(() => ac.abort(), plan.delayMs);
  let received = 0;
  try {
    for await (const _ of iterable) {
      received++;
      if (plan.when === "after" && received >= plan.messages) ac.abort();
      // Keep an echoing exec talking so there is something to count.
      if (requests && plan.exec.stdin && received < 10) requests.push({ stdin: { data: Buffer.from(`line ${received}\n`) } }, {});
    }
    return { error: new Error(`stream ended without cancellation after ${received} messages`), received };
  } catch (err) {
    return { error: err, received };
  } finally {
    clearTimeout(timer);
    requests?.end();
  }
}

describe(`${STREAMS} streams cancelled by the caller at random moments (seed ${SEED.toString(16)})`, () => {
  it("every caller sees a cancellation; no error logs on either side; resources and children back to baseline", async () => {
    // Warm up every kind once so lazily created resources (the HTTP/2 session, pty machinery) are
    // part of the baseline.
    const warm = plans().slice(0, 8).map((p) => ({ ...p, when: "after" as const, messages: 1 }));
    for (const p of warm) if (p.kind !== "exec" || p.exec.chatty || p.exec.stdin) await runOne(p);
    await until(
      "warm-up execs to finish",
      async () => (await probe()).execs === 0 && descendantsOf(plugin.pid).length === 0,
      async () => ({ execs: (await probe()).execs, procs: descendantsOf(plugin.pid) }),
    );
    const pluginBaseline = (await probe()).resources;
    const clientBaseline = resourceCounts();

    const started = performance.now();
    const all = plans();
    const results = await pool(CONCURRENCY, all, runOne);
    const wall = performance.now() - started;

    const notCancelled = results
      .map((r, i) => ({ ...r, i, plan: all[i]! }))
      .filter((r) => !isCancellation(r.error))
      .map((r) => `#${r.i} ${r.plan.kind} ${r.plan.when}: ${String(r.error)}`);
    expect(notCancelled).toEqual([]);
    const byKind = Object.fromEntries(KINDS.map((k) => [k, all.filter((p) => p.kind === k).length]));
    const messages = results.reduce((n, r) => n + r.received, 0);
    console.log(`cancel: ${STREAMS} streams ${JSON.stringify(byKind)}, ${messages} messages, ${(wall / 1000).toFixed(1)} s; plugin logged ${logs.entries.filter((e) => e.message === "call cancelled").length} "call cancelled" (debug), ${logs.entries.filter((e) => e.level === "error").length} errors`);

    const procs = () => descendantsOf(plugin.pid).map((p) => `${p.pid} ${p.state} ${readCmdline(p.pid)}`);
    await until(
      "the plugin's exec sessions and child processes to be gone",
      async () => (await probe()).execs === 0 && descendantsOf(plugin.pid).length === 0,
      async () => ({ execs: (await probe()).execs, procs: procs() }),
    );
    await until(
      "the plugin's active resources to return to the baseline",
      async () => withinBaseline((await probe()).resources, pluginBaseline),
      async () => ({ now: (await probe()).resources, baseline: pluginBaseline }),
    );
    await until(
      "this process's active resources to return to the baseline",
      () => withinBaseline(resourceCounts(), clientBaseline),
      () => ({ now: resourceCounts(), baseline: clientBaseline }),
    );

    expect(logs.errors()).toEqual([]);
    expect(clientComplaints).toEqual([]);
    expect(unhandled.seen.map(String)).toEqual([]);
    // The plugin saw cancellations as such (debug), not as failures. (Not one per stream: a stream
    // cancelled before its request left, or while its response waited for flow control, logs none.)
    expect(logs.entries.filter((e) => e.message === "call cancelled").length).toBeGreaterThan(0);
  }, 900_000);
});
