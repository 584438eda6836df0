// nomadkit stats: the TaskStats stream as a live line.
import { toJson } from "@bufbuild/protobuf";
import {
  MemoryUsage_Fields,
  TaskStatsResponseSchema,
  type TaskStatsResponse,
} from "@nomadkit/protocol/driver";
import { durationOfMs, parseDurationMs } from "../files.js";
import { formatBytes } from "../output.js";
import { connectPlugin, rpcError, type GlobalOptions } from "../plugin.js";
import { CliError } from "../errors.js";

export function formatStats(res: TaskStatsResponse): string {
  const agg = res.stats?.aggResourceUsage;
  const cpu = agg?.cpu;
  const mem = agg?.memory;
  const parts = [
    `cpu ${(cpu?.percent ?? 0).toFixed(1)}%`,
    `${(cpu?.totalTicks ?? 0).toFixed(0)} MHz`,
  ];
  // A memory field the driver does not list in measured_fields is an unset 0, not a reading: show
  // only the listed ones, as Nomad does (and RSS when nothing is listed, Nomad's default measure).
  const measured = mem?.measuredFields ?? [];
  if (measured.length === 0 || measured.includes(MemoryUsage_Fields.RSS)) parts.push(`rss ${formatBytes(mem?.rss ?? 0n)}`);
  if (measured.includes(MemoryUsage_Fields.USAGE)) parts.push(`usage ${formatBytes(mem?.usage ?? 0n)}`);
  const pids = Object.keys(res.stats?.resourceUsageByPid ?? {}).length;
  if (pids) parts.push(`${pids} pid${pids === 1 ? "" : "s"}`);
  return parts.join("  ");
}

export async function statsCommand(
  plugin: string,
  taskId: string,
  opts: { interval: string; count?: string; json?: boolean },
  g: GlobalOptions,
): Promise<void> {
  const intervalMs = parseDurationMs("--interval", opts.interval);
  let count: number | undefined;
  if (opts.count !== undefined) {
    count = Number(opts.count);
    if (!Number.isInteger(count) || count <= 0)
      throw new CliError(
        `--count ${JSON.stringify(opts.count)}: expected a positive integer`,
      );
  }
  const c = await connectPlugin(plugin, g);
  const stop = new AbortController();
  // Ctrl-C ends the stream; the command then exits 130 (128 + SIGINT), as `nomadkit --help` says.
  const onSigint = () => {
    process.exitCode = 130;
    stop.abort();
  };
  process.on("SIGINT", onSigint);
  const live = !opts.json && process.stdout.isTTY === true;
  let n = 0;
  try {
    const stream = c.plugin.driver.taskStats(
      { taskId, collectionInterval: durationOfMs(intervalMs) },
      { signal: stop.signal },
    );
    for await (const res of stream) {
      n++;
      if (opts.json)
        process.stdout.write(
          JSON.stringify(toJson(TaskStatsResponseSchema, res)) + "\n",
        );
      else if (live) process.stdout.write(`\r\x1b[K${formatStats(res)}`);
      else process.stdout.write(formatStats(res) + "\n");
      if (count !== undefined && n >= count) break;
    }
    if (n === 0 && !stop.signal.aborted)
      throw new CliError(`plugin ${c.name}: Driver.TaskStats ended without sending a sample`);
  } catch (e) {
    if (!stop.signal.aborted) throw await rpcError(c, "Driver.TaskStats", e);
  } finally {
    if (live && n > 0) process.stdout.write("\n");
    stop.abort();
    process.off("SIGINT", onSigint);
    await c.release();
  }
}
