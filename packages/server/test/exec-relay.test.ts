// forwardExecStream relaying an executor's ExecStreaming frames unchanged (no decode, no copy):
// bulk output arrives byte-exact and in order through a slow reader, the executor's error statuses
// and the caller's cancellation behave as with decoded messages, and @grpc/grpc-js sees the same.
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { Code, ConnectError } from "@connectrpc/connect";
import { launchPlugin, type PluginClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { executorBinPath } from "../src/executor.js";

const fixture = join(dirname(fileURLToPath(import.meta.url)), "fixtures/executor/driver.mjs");

async function* neverHalfClose(setup: { taskId: string; command: string[] }) {
  yield { setup: { ...setup, tty: false } };
  await new Promise(() => {}); // like Nomad
}

describe("exec relayed from the executor", () => {
  let dir: string;
  let plugin: PluginClient;

  beforeAll(async () => {
    if (!existsSync(executorBinPath())) throw new Error(`build first: ${executorBinPath()} is missing (npx turbo run build)`);
    dir = mkdtempSync(join(tmpdir(), "nk-exec-relay-"));
    plugin = await launchPlugin(process.execPath, [fixture], { env: { NK_TICKS_FILE: join(dir, "ticks.jsonl"), NOMADKIT_LOG_LEVEL: "warn" } });
    await plugin.driver.startTask({ task: { id: "t", name: "t", allocId: "a1" } });
  });

  afterAll(async () => {
    await plugin?.driver.destroyTask({ taskId: "t", force: true }).catch(() => undefined);
    await plugin?.kill();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("carries 24 MiB of output byte-exact and in order to a slow reader, then the close markers and one exited", async () => {
    const size = 24 * 1024 * 1024;
    // Distinct bytes per position, so reordering or loss would show in the digest.
    const cmd = `head -c ${size} /dev/urandom | tee ${join(dir, "out.bin")}`;
    const digest = createHash("sha256");
    let got = 0;
    const order: string[] = [];
    let code = -1;
    for await (const r of plugin.driver.execTaskStreaming(neverHalfClose({ taskId: "t", command: ["/bin/sh", "-c", cmd] }))) {
      if (r.stdout?.data.length) {
        digest.update(r.stdout.data);
        got += r.stdout.data.length;
        if (order.at(-1) !== "data") order.push("data");
        if (got % (4 * 1024 * 1024) < r.stdout.data.length) await sleep(50); // read slowly now and then
      }
      if (r.stdout?.close) order.push("stdout-close");
      if (r.stderr?.close) order.push("stderr-close");
      if (r.exited) {
        order.push("exited");
        code = r.result!.exitCode;
      }
    }
    expect(got).toBe(size);
    const expected = createHash("sha256").update((await import("node:fs")).readFileSync(join(dir, "out.bin"))).digest("hex");
    expect(digest.digest("hex")).toBe(expected);
    expect(order.filter((o) => o !== "data").sort()).toEqual(["exited", "stderr-close", "stdout-close"]);
    expect(order.at(-1)).toBe("exited");
    expect(code).toBe(0);
  });

  it("passes the executor's error status through (unknown command: InvalidArgument naming it)", async () => {
    const err = await (async () => {
      for await (const _ of plugin.driver.execTaskStreaming(neverHalfClose({ taskId: "t", command: ["definitely-not-a-command-xyz"] }))) {
        // no output expected
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    expect((err as ConnectError).rawMessage).toMatch(/definitely-not-a-command-xyz/);
  });

  it("a cancelled call stops the relay and the process; the next exec works", async () => {
    const ac = new AbortController();
    let got = 0;
    const err = await (async () => {
      for await (const r of plugin.driver.execTaskStreaming(neverHalfClose({ taskId: "t", command: ["/bin/sh", "-c", "yes"] }), { signal: ac.signal })) {
        got += r.stdout?.data.length ?? 0;
        if (got > 1024 * 1024) ac.abort();
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Canceled);
    let out = "";
    for await (const r of plugin.driver.execTaskStreaming(neverHalfClose({ taskId: "t", command: ["/bin/echo", "again"] }))) {
      if (r.stdout?.data.length) out += Buffer.from(r.stdout.data).toString();
    }
    expect(out).toBe("again\n");
  });
});
