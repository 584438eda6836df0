// A minimal nomadkit driver for the measures the reference driver cannot isolate: exec served in the
// plugin process itself (one gRPC hop, high-level form + runExecCommand, the same engine the executor
// runs), and TaskStats with a synthetic sample (the reference driver's come from its executor's
// /proc and cgroup sampler, a cost of its own). Public @nomadkit/server API only; launched with
// launchPlugin like any plugin.
import { CPUUsage_Fields, MemoryUsage_Fields } from "@nomadkit/protocol/driver";
import { defineDriver, runExecCommand, serveDriver } from "@nomadkit/server";

const tasks = new Map();

const driver = defineDriver({
  name: "nomadkit-bench",
  version: "0.1.0",
  startTask(task) {
    let exit;
    const exited = new Promise((r) => (exit = r));
    tasks.set(task.id, { exited, exit });
  },
  waitTask(taskId, ctx) {
    const t = tasks.get(taskId);
    return new Promise((resolve, reject) => {
      t.exited.then(resolve);
      ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason), { once: true });
    });
  },
  stopTask(taskId) {
    tasks.get(taskId)?.exit({ exitCode: 0 });
  },
  destroyTask(taskId) {
    tasks.get(taskId)?.exit({ exitCode: 0 });
    tasks.delete(taskId);
  },
  inspectTask() {
    return { attributes: { pid: String(process.pid), executor_pid: String(process.pid) } };
  },
  taskStats() {
    return {
      cpu: { percent: 1.5, measuredFields: [CPUUsage_Fields.PERCENT] },
      memory: { rss: BigInt(12 << 20), measuredFields: [MemoryUsage_Fields.RSS] },
    };
  },
  execTaskStreaming(session) {
    return runExecCommand({ command: session.command, tty: session.tty }, session);
  },
});

void serveDriver(driver);
