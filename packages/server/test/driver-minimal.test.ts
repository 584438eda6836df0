// The "about 50 lines" claim: fixtures/driver/minimal-driver.ts is a whole driver. It type-checks
// against the published types (with the inference checks in typecheck.ts), and, launched the way
// Nomad launches plugins, it runs tasks and exec sessions.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { encode } from "@msgpack/msgpack";
import type { PluginClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchFixture } from "./fixtures/driver/harness.js";
import { RequestQueue } from "@nomadkit/client";

const fixtures = join(dirname(fileURLToPath(import.meta.url)), "fixtures/driver");

describe("a minimal driver", () => {
  it("is about 50 lines of user code", () => {
    const code = readFileSync(join(fixtures, "minimal-driver.ts"), "utf8")
      .split("\n")
      .filter((l) => l.trim() !== "" && !l.trim().startsWith("//"));
    expect(code.length).toBeLessThanOrEqual(55);
  });

  it("type-checks, and the config types are inferred from the schemas", () => {
    const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
    const args = [tsc, "--noEmit", "--strict", "--skipLibCheck", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--types", "node"];
    for (const f of ["minimal-driver.ts", "test-driver.ts", "typecheck.ts"]) {
      try {
        execFileSync(process.execPath, [...args, join(fixtures, f)], { encoding: "utf8", stdio: "pipe" });
      } catch (err) {
        throw new Error(`${f} does not type-check:\n${(err as { stdout?: string }).stdout ?? String(err)}`);
      }
    }
  });

  describe("served as a plugin", () => {
    let plugin: PluginClient;
    beforeAll(async () => {
      plugin = await launchFixture("minimal-driver");
    });
    afterAll(async () => {
      await plugin?.kill();
    });

    it("answers PluginInfo and runs a task to its exit code", async () => {
      expect((await plugin.basePlugin.pluginInfo({})).name).toBe("minimal");
      await plugin.driver.init({});
      const events = plugin.driver.taskEvents({})[Symbol.asyncIterator]();
      await plugin.driver.startTask({ task: { id: "m1", name: "one", allocId: "a1", msgpackDriverConfig: encode({ command: "sh", args: ["-c", "exit 7"] }) } });
      expect((await events.next()).value).toMatchObject({ taskId: "m1", allocId: "a1", taskName: "one", message: expect.stringMatching(/^started pid \d+$/) });
      expect((await plugin.driver.waitTask({ taskId: "m1" })).result?.exitCode).toBe(7);
      await plugin.driver.destroyTask({ taskId: "m1" });
      await events.return?.();
    });

    it("stops a task with a signal and execs into one", async () => {
      await plugin.driver.startTask({ task: { id: "m2", msgpackDriverConfig: encode({ command: "sleep", args: ["600"] }) } });
      const requests = new RequestQueue<object>();
      requests.push({ setup: { taskId: "m2", command: ["sh", "-c", "echo hello stdout; echo hello stderr >&2; exit 43"] } });
      let stdout = "";
      let exit: number | undefined;
      for await (const r of plugin.driver.execTaskStreaming(requests)) {
        if (r.stdout?.data.length) stdout += Buffer.from(r.stdout.data).toString();
        if (r.exited) exit = r.result?.exitCode;
      }
      requests.end();
      expect(stdout).toBe("hello stdout\n");
      expect(exit).toBe(43);
      const wait = plugin.driver.waitTask({ taskId: "m2" });
      await plugin.driver.stopTask({ taskId: "m2", signal: "SIGTERM", timeout: { seconds: 5n } });
      expect((await wait).result?.signal).toBe(15);
      await plugin.driver.destroyTask({ taskId: "m2" });
    });
  });
});
