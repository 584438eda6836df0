// The README's "Write your own driver" example, as printed: it must run as a Nomad plugin, start a
// task, and take its tasks with it when the plugin is shut down (it has no executor to keep them).
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { launchPlugin, type PluginClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { allProcs, procStat, rawexecTask, repoRoot, until } from "../reliability/helpers.js";

/** The first ```js block after the README's "## Write your own driver". */
function readmeDriver(): string {
  const readme = readFileSync(join(repoRoot, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Write your own driver"));
  const m = /```js\n([\s\S]*?)```/.exec(section);
  if (!m) throw new Error("README.md: no js block under 'Write your own driver'");
  return m[1]!;
}

// Inside the repo, so `@nomadkit/server` resolves through the workspace's node_modules.
const dir = mkdtempSync(join(repoRoot, "tools/test/.readme-driver-"));
const bin = join(dir, "hello-driver.mjs");
const tasks: ReturnType<typeof rawexecTask>[] = [];
let plugin: PluginClient | undefined;

beforeAll(() => {
  writeFileSync(bin, readmeDriver());
  chmodSync(bin, 0o755);
});
afterAll(async () => {
  await plugin?.kill().catch(() => undefined);
  for (const t of tasks) await t.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

const alive = (pid: number) => {
  const s = procStat(pid);
  return s !== undefined && s.state !== "Z";
};

describe("the README's hello driver", () => {
  it("runs a task, and its tasks go when the plugin is shut down", async () => {
    plugin = await launchPlugin(bin, [], { startTimeoutMs: 60_000 });
    expect((await plugin.basePlugin.pluginInfo({})).name).toBe("hello");
    await plugin.basePlugin.setConfig({});
    const t = rawexecTask({ command: "/bin/sleep", args: ["600"] });
    tasks.push(t);
    await plugin.driver.startTask({ task: t.config });
    // The driver reports no pid: find its child by command line.
    const sleeper = childSleeping(plugin.pid);
    expect(alive(sleeper)).toBe(true);

    await plugin.kill(); // GRPCController.Shutdown, as Nomad stops a plugin
    plugin = undefined;
    await until("the task's death", () => !alive(sleeper));
    expect(alive(sleeper)).toBe(false);
  }, 120_000);
});

function childSleeping(parent: number): number {
  const child = allProcs().find((p) => p.ppid === parent && readFileSync(`/proc/${p.pid}/cmdline`, "utf8") === "/bin/sleep\0" + "600\0");
  if (!child) throw new Error(`no /bin/sleep 600 under pid ${parent}`);
  return child.pid;
}
