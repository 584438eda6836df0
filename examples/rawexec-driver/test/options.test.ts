// raw_exec's task and plugin options (Nomad's drivers/rawexec), each through the real wire: the
// plugin_dir executable launched as Nomad launches it, tasks run as real processes.
import type { PluginClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cleanup, newTask, read, sh, start, startPlugin, type TestTask } from "./helpers.js";

let p: PluginClient;
const started: TestTask[] = [];

beforeAll(async () => {
  p = await startPlugin();
});
afterAll(async () => {
  for (const t of started) await p.driver.destroyTask({ taskId: t.id, force: true }).catch(() => undefined);
  await cleanup();
});

/** Starts the task, waits for its exit and returns its stdout. */
async function runToExit(plugin: PluginClient, t: TestTask): Promise<string> {
  await start(plugin, t);
  started.push(t);
  const res = await plugin.driver.waitTask({ taskId: t.id });
  expect(res.result?.exitCode).toBe(0);
  return read(t.stdoutPath);
}

async function failure(fn: () => Promise<unknown>): Promise<Error & { code?: number }> {
  try {
    await fn();
  } catch (err) {
    return err as Error & { code?: number };
  }
  throw new Error("expected the call to fail");
}

describe("oom_score_adj", () => {
  it("is written to the task's /proc/<pid>/oom_score_adj, 0 when unset", async () => {
    expect(await runToExit(p, newTask(sh("cat /proc/$$/oom_score_adj"), { cgroup: false }))).toBe("0\n");
    expect(await runToExit(p, newTask({ ...sh("cat /proc/$$/oom_score_adj"), oom_score_adj: 500 }, { cgroup: false }))).toBe("500\n");
  });

  it("refuses a negative value (as Nomad's raw_exec), one past 1000 and a fraction with InvalidArgument naming it", async () => {
    for (const bad of [-1, 1001, 1.5]) {
      const err = await failure(() => p.driver.startTask({ task: newTask({ command: "/bin/true", oom_score_adj: bad }, { cgroup: false }).config }));
      expect(err.code, String(bad)).toBe(3);
      expect(err.message).toContain("config.oom_score_adj");
    }
  });
});
