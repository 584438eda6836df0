// runExecStream against a real plugin process (the modes-raw fixture, which logs each exec stream it
// is handed): what reaches the plugin, and how the call's own timeout is told from the caller's abort.
import { fileURLToPath } from "node:url";
import {
  launchPlugin,
  isCancellation,
  type PluginClient,
} from "@nomadkit/client";
import { afterEach, describe, expect, it } from "vitest";
import { runExecStream } from "../src/index.js";

const modesRaw = fileURLToPath(
  new URL("./fixtures/modes-raw.mjs", import.meta.url),
);

let plugin: PluginClient | undefined;
afterEach(async () => {
  await plugin?.kill();
  plugin = undefined;
});

async function launch(mode: string, lines: string[]): Promise<PluginClient> {
  plugin = await launchPlugin(process.execPath, [modesRaw], {
    env: { BUG_MODE: mode },
    logger: (l) => lines.push(l.message),
  });
  return plugin;
}

describe("runExecStream", () => {
  it("starts no session once the caller's signal has fired (an abandoned check's exec never reaches the plugin)", async () => {
    const lines: string[] = [];
    const p = await launch("", lines);
    const setup = { setup: { taskId: "t", command: ["true"] } };
    const gone = await runExecStream(p.driver, [setup], {
      timeoutMs: 30_000,
      signal: AbortSignal.abort(),
    });
    expect(isCancellation(gone.error), String(gone.error)).toBe(true);
    // A stream afterwards reaches the plugin: its log line follows any the first stream made.
    const ok = await runExecStream(p.driver, [setup], { timeoutMs: 30_000 });
    expect(ok.error).toBeUndefined();
    expect(ok.exitCode).toBe(0);
    // The log comes over the plugin's stderr, not the call's socket: wait for the second stream's
    // line; one of the first stream would have come before it on the same pipe.
    for (let i = 0; i < 1000 && !lines.includes("exec stream opened"); i++) await new Promise((r) => setTimeout(r, 10));
    expect(lines.filter((l) => l === "exec stream opened")).toEqual([
      "exec stream opened",
    ]);
  }, 60_000);

  it("reports its own timeout as DeadlineExceeded naming it, and the caller's abort as a cancellation", async () => {
    const p = await launch("exec-hang", []);
    const setup = { setup: { taskId: "t", command: ["true"] } };
    const late = await runExecStream(p.driver, [setup], { timeoutMs: 500 });
    expect(late.error).toMatchObject({
      code: 4,
      message:
        "Driver.ExecTaskStreaming: not over within 500 ms (the call's timeout)",
    });
    const ac = new AbortController();
    const stopped = runExecStream(p.driver, [setup], {
      timeoutMs: 30_000,
      signal: ac.signal,
    });
    ac.abort();
    expect(isCancellation((await stopped).error)).toBe(true);
  }, 60_000);
});
