// A task's executor outlives the driver plugin's connections to it: Nomad's executor keeps its CPU
// trackers for its whole life (procstats.New once per executor), so a Stats stream opened again
// (after a plugin restart, or when Nomad reopens TaskStats) reports the CPU used since the previous
// reading, not 0 % as a process seen for the first time.
import { existsSync, readFileSync } from "node:fs";
import { afterEach, beforeAll, expect, it } from "vitest";
import {
  executorBinPath,
  launchExecutor,
  type ExecutorHandle,
} from "../src/executor.js";

const PATH = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
const handles: ExecutorHandle[] = [];

beforeAll(() => {
  if (!existsSync(executorBinPath()))
    throw new Error(
      `build first: ${executorBinPath()} is missing (npx turbo run build)`,
    );
});
afterEach(async () => {
  for (const h of handles.splice(0)) {
    await h.shutdownTask("SIGKILL", 0).catch(() => undefined);
    await h.kill();
  }
});

/** utime + stime of a process, in clock ticks. */
function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]);
}

/** Polls a condition; the generous deadline only turns a hang into a message naming what never happened. */
async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

it("reports the CPU used since the previous stream's last sample in the first sample of a Stats stream opened again", async () => {
  const exe = await launchExecutor();
  handles.push(exe);
  const { process: p } = await exe.client.launch({
    cmd: "/bin/sh",
    args: ["-c", "while :; do :; done"],
    env: [PATH],
  });
  const pid = p!.pid;

  // A first stream (the plugin before its restart): two samples, so the task has been seen.
  const first = new AbortController();
  let samples = 0;
  for await (const _ of exe.client.stats(
    { interval: 50_000_000n },
    { signal: first.signal },
  )) {
    if (++samples === 2) break;
  }
  first.abort();
  // The last sample was taken before this read: once the busy loop has burnt two more ticks, the
  // next reading is sure to differ from it.
  const after = cpuTicks(pid);
  await until(() => cpuTicks(pid) >= after + 2, "the busy loop to use CPU");

  const second = new AbortController();
  let sample;
  for await (const r of exe.client.stats(
    { interval: 50_000_000n },
    { signal: second.signal },
  )) {
    sample = r.stats;
    break;
  }
  second.abort();
  const cpu = sample!.aggResourceUsage!.cpu!;
  const shown = `${cpu.percent}% user ${cpu.userMode} system ${cpu.systemMode}`;
  expect(cpu.percent, shown).toBeGreaterThan(0);
  expect(cpu.totalTicks, shown).toBeGreaterThan(0);
  expect(
    sample!.resourceUsageByPid[String(pid)]!.cpu!.percent,
    shown,
  ).toBeGreaterThan(0);
});
