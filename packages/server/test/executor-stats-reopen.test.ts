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

it("gives two Stats streams at the same interval, open at once, each its own CPU readings", async () => {
  const exe = await launchExecutor();
  handles.push(exe);
  await exe.client.launch({ cmd: "/bin/sh", args: ["-c", "while :; do :; done"], env: [PATH] });

  // One busy thread uses at most one core: a stream whose readings another stream advanced would
  // divide the CPU of its interval by the few milliseconds since the other's sample (~1600 % seen).
  const read = async (signal: AbortSignal): Promise<number[]> => {
    const percents: number[] = [];
    for await (const r of exe.client.stats({ interval: 200_000_000n }, { signal })) {
      percents.push(r.stats!.aggResourceUsage!.cpu!.percent);
      if (percents.length === 6) break;
    }
    return percents;
  };
  // Opened together, their timers fire together: the second sample of each pair would come a
  // fraction of a clock tick after the first, reading 0 % or a multiple of 100 % if they shared.
  const a = new AbortController();
  const b = new AbortController();
  const [pa, pb] = await Promise.all([read(a.signal), read(b.signal)]);
  a.abort();
  b.abort();
  const shown = `A ${pa.join(" ")} / B ${pb.join(" ")}`;
  // A 200 ms interval read in 10 ms clock ticks: one core, give or take a tick of each reading.
  for (const p of [...pa, ...pb]) expect(p, shown).toBeLessThanOrEqual(115);
  // And each stream sees the loop run (the first sample of a new sampler is 0 %).
  for (const p of [pa, pb]) expect(p.slice(1).reduce((x, y) => x + y, 0), shown).toBeGreaterThan(0);
});
