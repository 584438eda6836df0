// The suite hands a driver what the Nomad client hands it: logmon's output FIFOs, and StopTask with
// the task's kill_signal, "" when the job sets none.
import { closeSync, constants, lstatSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { runConformance } from "../src/index.js";
import { Suite } from "../src/suite.js";
import { DriverCapabilities_FSIsolation, type DriverCapabilities } from "@nomadkit/protocol/driver";
import { spec } from "../../server/src/config/index.js";

const direct = fileURLToPath(new URL("./fixtures/direct-driver.mjs", import.meta.url));
const generous = { shutdownTimeoutMs: 15_000, fingerprintTimeoutMs: 30_000, callTimeoutMs: 30_000 };
const root = mkdtempSync(join(tmpdir(), "nomadkit-conformance-client-test-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A suite that only prepares tasks (it never launches its plugin). */
function offlineSuite(): Suite {
  return new Suite({
    plugin: "/bin/true",
    args: [],
    pluginConfig: {},
    execShell: "/bin/sh",
    signal: "SIGHUP",
    callTimeoutMs: 1000,
    checkTimeoutMs: 1000,
    fingerprintTimeoutMs: 1000,
    shutdownTimeoutMs: 1000,
    workDir: root,
  });
}

describe("what the suite prepares for a task, as the Nomad client does", () => {
  it("stdout_path and stderr_path are logmon's FIFOs, already being read", async () => {
    const s = offlineSuite();
    try {
      const t = s.newTask("main");
      const logs = join(t.allocDir, "alloc/logs");
      expect([t.stdoutPath, t.stderrPath]).toEqual([join(logs, ".main.stdout.fifo"), join(logs, ".main.stderr.fifo")]);
      for (const p of [t.stdoutPath, t.stderrPath]) {
        expect(lstatSync(p).isFIFO(), p).toBe(true);
        expect((lstatSync(p).mode & 0o777).toString(8)).toBe("600");
        // ENXIO unless a reader has it open: the driver's open does not wait, as under Nomad.
        closeSync(openSync(p, constants.O_WRONLY | constants.O_NONBLOCK));
      }
    } finally {
      await s.cleanup();
    }
  });

  it("a task's directories are named as the driver's filesystem isolation shows them to the task", async () => {
    const s = offlineSuite();
    try {
      const host = s.newTask("host");
      expect(host.config.env!.NOMAD_TASK_DIR).toBe(join(host.allocDir, "host/local"));
      s.caps = { fsIsolation: DriverCapabilities_FSIsolation.IMAGE } as DriverCapabilities;
      const image = s.newTask("image").config.env!;
      expect([image.NOMAD_TASK_DIR, image.NOMAD_ALLOC_DIR, image.PATH]).toEqual(["/local", "/alloc", undefined]);
    } finally {
      await s.cleanup();
    }
  });

  it("a driver whose tasks are not {command, args} is told to give its own task, not blamed for a config it was never given", async () => {
    const s = offlineSuite();
    try {
      s.taskSpec = spec.object({ image: spec.attr("string", { required: true }) }).toProto();
      let refusal = "";
      try {
        s.newTask("main");
      } catch (err) {
        refusal = (err as Error).message;
      }
      expect(refusal).toMatch(/^the default task config \(\{"command":"\/bin\/sh","args":\["-c",<loop>\]\}\) does not fit the plugin's TaskConfigSchema/);
      expect(refusal).toContain(`"image" is required`);
      expect(refusal).toContain("give a long-running task this driver accepts with taskConfig (--task-config)");
    } finally {
      await s.cleanup();
    }
  });

  it("stop-task sends the signal Nomad sends when the job has no kill_signal: none", async () => {
    const log = join(root, "stops.jsonl");
    const report = await runConformance({ plugin: process.execPath, args: [direct], env: { DIRECT_DRIVER_STOP_LOG: log }, checks: ["start-task", "stop-task"], ...generous });
    const stop = report.results.find((r) => r.name === "stop-task");
    expect(stop, JSON.stringify(report.results)).toMatchObject({ status: "pass" });
    // @nomadkit/server tells the driver the signal was defaulted (and makes it SIGINT, as Nomad's executor does).
    const stops = readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(stops).toEqual([{ signal: "SIGINT", signalDefaulted: true }]);
  }, 120_000);
});
