// TaskStats of a task doing known work, in the units Nomad's client reads them (plugins/drivers
// TaskStatsFromProto, the executor's procstats): memory in bytes, CPU percent of ONE core (a
// single-threaded busy loop is at most ~100 whatever the host's core count), user + system = the
// percent per process, the timestamp a protobuf Timestamp of the sample's wall-clock time, and one
// resource_usage_by_pid entry per task process keyed by its decimal pid.
import type { PluginClient } from "@nomadkit/client";
import { MemoryUsage_Fields, type TaskStats } from "@nomadkit/protocol/driver";
import { afterAll, beforeAll, expect, it } from "vitest";
import {
  cleanup,
  newTask,
  read,
  start,
  startPlugin,
  until,
} from "./helpers.js";

const MIB = 1024n * 1024n;
/** What the task holds: a 32 MiB string, every page written. */
const HELD = 32n * MIB;

let p: PluginClient;
beforeAll(async () => {
  p = await startPlugin();
});
afterAll(cleanup);

it("reports a task's memory in bytes, its CPU in percent of one core, and a wall-clock timestamp", async () => {
  // perl: a small interpreter, so the held string dominates its resident memory. vec() grows the
  // string in place, zero-filling it (`"a" x N` would briefly hold two copies: over the task's 64 MiB).
  const t = newTask({
    command: "/usr/bin/perl",
    args: [
      "-e",
      `my $x = ""; vec($x, ${HELD - 1n}, 8) = 1; $| = 1; print "ready\\n"; 1 while 1;`,
    ],
  });
  const handle = await start(p, t);
  const taskPid = String(
    (
      JSON.parse(new TextDecoder().decode(handle.driverState)) as {
        driver: { pid: number };
      }
    ).driver.pid,
  );
  await until(
    () => read(t.stdoutPath).includes("ready"),
    "the task to hold its string",
  );
  const ac = new AbortController();
  const started = Date.now();
  let busy: { stats: TaskStats; after: number } | undefined;
  let last: TaskStats | undefined;
  try {
    for await (const r of p.driver.taskStats(
      { taskId: t.id, collectionInterval: { nanos: 250_000_000 } },
      { signal: ac.signal },
    )) {
      const after = Date.now();
      last = r.stats!;
      // The loop has shown in a sample (the executor's first of the task reports 0 %, as Nomad's).
      if ((last.resourceUsageByPid[taskPid]?.cpu?.percent ?? 0) > 5) {
        busy = { stats: last, after };
        break;
      }
      // A generous bound (50 s), only so a percent on the wrong scale fails instead of hanging.
      if (after - started > 50_000) break;
    }
  } finally {
    ac.abort();
  }
  if (busy === undefined)
    throw new Error(
      `no sample showed the busy loop; the last: ${JSON.stringify(last?.resourceUsageByPid[taskPid]?.cpu)}`,
    );
  const { stats, after } = busy;

  // Seconds and nanoseconds since the epoch: the sample was taken after the stream opened.
  const at =
    Number(stats.timestamp!.seconds) * 1000 + stats.timestamp!.nanos / 1e6;
  expect(stats.timestamp!.nanos).toBeLessThan(1e9);
  expect(at).toBeGreaterThanOrEqual(started);
  expect(at).toBeLessThanOrEqual(after);

  // Per process: decimal pid keys, the task's own among them; bytes (not KiB, not pages).
  for (const pid of Object.keys(stats.resourceUsageByPid))
    expect(pid).toMatch(/^[1-9]\d*$/);
  const own = stats.resourceUsageByPid[taskPid]!;
  expect(own.memory!.rss).toBeGreaterThanOrEqual(HELD);
  expect(own.memory!.rss).toBeLessThan(HELD + 32n * MIB);
  expect(own.memory!.measuredFields).toContain(MemoryUsage_Fields.RSS);
  const cpu = own.cpu!;
  const shown = `${cpu.percent}% user ${cpu.userMode} system ${cpu.systemMode}`;
  // One thread: at most one core, give or take a tick of the kernel's accounting per interval.
  expect(cpu.percent, shown).toBeLessThanOrEqual(100 * 1.25);
  expect(cpu.userMode + cpu.systemMode, shown).toBeCloseTo(cpu.percent, 6);

  // The task as a whole: its memory holds the string, in bytes, in every field it lists.
  const mem = stats.aggResourceUsage!.memory!;
  expect(mem.measuredFields).toContain(MemoryUsage_Fields.RSS);
  expect(mem.rss).toBeGreaterThanOrEqual(HELD);
  expect(mem.rss).toBeLessThan(HELD + 64n * MIB);
  if (mem.measuredFields.includes(MemoryUsage_Fields.USAGE))
    expect(mem.usage).toBeGreaterThanOrEqual(HELD);
  expect(stats.aggResourceUsage!.cpu!.percent).toBeGreaterThan(0);
  await p.driver.destroyTask({ taskId: t.id, force: true });
});
