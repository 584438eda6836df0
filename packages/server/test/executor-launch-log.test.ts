// launchExecutor's `logger` gets the executor's stderr lines as they were written: a character that
// a pipe read splits is not garbled (go-plugin's host reads bytes, so Nomad keeps it whole too).
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PluginLogEntry } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchExecutor } from "../src/executor.js";

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "nk-executor-launch-log-"));
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Polls until `done()` holds: a condition, not a timed sleep (the test's timeout bounds it). */
async function until(done: () => boolean): Promise<void> {
  while (!done()) await new Promise((r) => setTimeout(r, 20));
}

describe("launchExecutor logger", () => {
  it("passes on multi-byte characters that straddle pipe reads intact", async () => {
    // 100 lines of 1000 "€" (3 bytes each) in one write: 300 KB through a 64 KiB pipe, so reads end
    // inside characters. Then a line that is no handshake, which ends the launch.
    const line = "€".repeat(1000);
    const fake = join(dir, "fake-executor.cjs");
    writeFileSync(
      fake,
      `const fs = require("node:fs");
fs.writeSync(2, ${JSON.stringify(`${line}\n`)}.repeat(100));
fs.writeSync(1, "not a handshake\\n");
setInterval(() => {}, 1000);
`,
    );
    const lines: PluginLogEntry[] = [];
    await expect(
      launchExecutor({ executorPath: fake, logger: (l) => lines.push(l) }),
    ).rejects.toThrow();
    // The stderr pipe is read to its end after the launch failed.
    await until(() => lines.length >= 100);
    expect(
      lines.filter((l) => l.message !== line).map((l) => l.message.length),
    ).toEqual([]);
    expect(lines).toHaveLength(100);
  });
});
