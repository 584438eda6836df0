// The minimal driver printed in README.md and docs/driver-guide.md is real: extracted from the
// README, written to disk and run through the conformance checks it supports, as a plugin binary.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, chmodSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { formatReport, runConformance } from "../src/index.js";

const root = fileURLToPath(new URL("../../../", import.meta.url));

function firstJsBlock(markdown: string, after: string): string {
  const from = markdown.indexOf(after);
  expect(from, `section ${after}`).toBeGreaterThanOrEqual(0);
  const m = /```js\n([\s\S]*?)```\n/.exec(markdown.slice(from));
  expect(m, `a js code block after ${after}`).not.toBeNull();
  return m![1]!;
}

// Inside the repo, so `@nomadkit/server` resolves from the workspace's node_modules.
const dir = mkdtempSync(join(root, "packages/conformance/test/.readme-driver-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the README's minimal driver", () => {
  const readme = firstJsBlock(readFileSync(join(root, "README.md"), "utf8"), "## Write your own driver");

  it("is the same code as the driver guide's", () => {
    const guide = firstJsBlock(readFileSync(join(root, "docs/driver-guide.md"), "utf8"), "## 1. A minimal driver");
    expect(readme).toBe(guide);
    expect(readme.split("\n").length).toBeLessThanOrEqual(60);
  });

  it(
    "runs as a Nomad plugin and passes the checks it supports",
    async () => {
      const file = join(dir, "hello-driver.mjs");
      writeFileSync(file, readme);
      chmodSync(file, 0o755);
      const report = await runConformance({
        plugin: file,
        name: "hello",
        shutdownTimeoutMs: 15_000, // Nomad's 2 s, generously: tests run on busy machines
        fingerprintTimeoutMs: 30_000,
        checks: [
          "no-cookie",
          "health",
          "plugin-info",
          "fingerprint",
          "inspect-task",
          "exec",
          "exec-streaming",
          "exec-streaming-tty",
          "exec-heartbeat",
          "exec-stdin-close",
          "exec-signal-exit",
          "exec-setup-first",
          "bad-config",
          "signal-task",
          "stop-task",
          "wait-task",
          "inspect-exited",
          "destroy-task",
          "destroy-force",
          "destroy-no-force",
          "fingerprint-stream",
          "task-events",
          "shutdown",
        ],
      });
      expect(report.failed, formatReport(report)).toBe(0);
      expect(report.skipped, formatReport(report)).toBe(0);
    },
    240_000,
  );

  it.skipIf(process.getuid?.() !== 0)(
    "ignores a task's user, which the suite's user option reveals (root)",
    async () => {
      const file = join(dir, "hello-user.mjs");
      writeFileSync(file, readme);
      chmodSync(file, 0o755);
      const report = await runConformance({ plugin: file, name: "hello", user: "nobody", checks: ["start-task"], shutdownTimeoutMs: 15_000, fingerprintTimeoutMs: 30_000 });
      const start = report.results.find((r) => r.name === "start-task")!;
      expect(start.status, formatReport(report)).toBe("fail");
      // The plugin runs as root, and so do its children.
      expect(start.message).toContain(`the task runs as uid 0/0/0 (real/effective/saved), want ${execFileSync("id", ["-u", "nobody"], { encoding: "utf8" }).trim()} (user nobody)`);
    },
    120_000,
  );
});
