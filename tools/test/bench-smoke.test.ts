// `npm run bench` smoke test: the benchmark runs end to end with tiny sizes and writes a JSON
// report with every measure, its peers and the targets. No performance assertions: numbers depend
// on the machine; the bench itself reports PASS/MISS.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { runProcess } from "./run-process.js";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
// Exec and unary also run with the grpc-go client, start-up with go-plugin as the host, where
// tools/bench/client-go can be built (Debian's Go packages).
const goClient = process.platform === "linux" && existsSync("/usr/bin/dpkg");

describe("npm run bench", () => {
  it("runs every measure with minimal sizes and writes the JSON report", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-bench-smoke-"));
    const json = join(dir, "bench.json");
    try {
      const { code, stdout, stderr } = await runProcess(
        process.execPath,
        [join(repo, "tools/bench/run.mjs"), "--exec-bytes", "4MiB", "--slow-rate", "64MiB", "--quick", "--json", json, "--go-client", goClient ? "on" : "off"],
        { cwd: repo },
      );
      expect(code, `bench failed:\n${stderr}\n${stdout}`).toBe(0);
      const report = JSON.parse(readFileSync(json, "utf8"));
      expect(report.client).toMatch(/http2/);
      expect(report.machine.nproc).toBeGreaterThan(0);
      const m = report.measures;
      for (const k of ["raw", "relay", "ref", "onehop", "grpcjs"]) expect(m.exec[k].mbPerSec).toBeGreaterThan(0);
      expect(m.exec.bytes).toBe(4 * 1024 * 1024);
      for (const k of ["ref", "refyg", "onehop", "grpcjs"]) expect(m.unary[k].callsPerSec).toBeGreaterThan(0);
      if (goClient) {
        expect(report.goClient).toMatch(/grpc-go/);
        for (const k of ["raw", "relay", "ref", "onehop", "grpcjs"]) {
          expect(m.exec.goClient[k].mbPerSec).toBeGreaterThan(0);
          expect(m.exec.goClient[k].messages).toBeGreaterThan(0);
        }
        for (const k of ["ref", "onehop", "grpcjs"]) {
          expect(m.unary.goClient[k].callsPerSec).toBeGreaterThan(0);
          expect(m.unary.goClient[k].serverCpuMicrosPerCall).toBeGreaterThan(0);
        }
        expect(stdout).toContain("grpc-go client (MB/s)");
        // Start-up with go-plugin as the host: the plugin, the floor and node -e 0 timed.
        for (const k of ["pluginMs", "bareNodeMs", "floorMs"]) expect(m.startup.goHost[k]).toBeGreaterThan(0);
        expect(stdout).toContain("start-up cycle, go-plugin host");
      } else {
        expect(m.exec.goClient).toBeUndefined();
        expect(m.startup.goHost).toBeUndefined();
      }
      for (const k of ["onehop", "grpcjs"]) {
        expect(m.statsRate[k].msgsPerSec).toBeGreaterThan(0);
        expect(m.statsRate[k].serverCpuMicrosPerMsg).toBeGreaterThan(0);
      }
      for (const k of ["ref", "onehop", "grpcjs"]) {
        expect(typeof m.statsMemory[k].bytesPerStream).toBe("number");
        // The preloaded heap probe answered: live heap before and after the streams.
        expect(m.statsMemory[k].heapAfter.heapUsed).toBeGreaterThan(0);
        expect(typeof m.statsMemory[k].heapBytesPerStream).toBe("number");
        const newSpace = m.statsMemory[k].heapAfter.spaces.find(([name]: [string]) => name === "new_space");
        expect(newSpace[1]).toBeGreaterThan(0);
      }
      expect(m.startup.pluginMs).toBeGreaterThan(0);
      expect(m.startup.bareNodeMs).toBeGreaterThan(0);
      expect(m.startup.floorMs).toBeGreaterThan(0); // the minimal Node plugin answered PluginInfo
      // Nomad's three launches at an agent's start: each timed, the run launch until a Fingerprint came.
      for (const k of ["loadMs", "validateMs", "runMs", "totalMs", "bareNodeMs"]) expect(m.startup.agentBoot[k]).toBeGreaterThan(0);
      expect(stdout).toContain("agent start: Nomad's 3 launches");
      expect(m.idleRss.floorBytes).toBeGreaterThan(0);
      for (const k of ["ref", "grpcjs"]) expect(m.unary[k].serverCpuMicrosPerCall).toBeGreaterThan(0);
      expect(m.idleRss.pluginBytes).toBeGreaterThan(0);
      expect(m.idleRss.bareNodeBytes).toBeGreaterThan(0);
      // The driver as Nomad keeps it answered SetConfig and sent a Fingerprint.
      expect(m.idleRss.servingBytes).toBeGreaterThan(0);
      expect(stdout).toContain("serving as Nomad keeps it");
      for (const k of ["ref", "refyg", "grpcjs"]) expect(typeof m.slowReader[k].growthBytes).toBe("number");
      // Per task: the executor launched (handshake) and, with a task running, its memory read; the
      // plugin's heap read before and after more tasks started (the heap probe answered).
      expect(m.tasks.executor.launchMs).toBeGreaterThan(0);
      expect(m.tasks.executor.bareNodeMs).toBeGreaterThan(0);
      expect(m.tasks.executor.rssBytes).toBeGreaterThan(m.tasks.executor.privateBytes);
      expect(m.tasks.executor.privateBytes).toBeGreaterThan(0);
      expect(m.tasks.executor.bareNodePrivateBytes).toBeGreaterThan(0);
      expect(m.tasks.plugin.tasks).toBe(3);
      expect(m.tasks.plugin.heapAfter).toBeGreaterThan(0);
      expect(typeof m.tasks.plugin.heapBytesPerTask).toBe("number");
      expect(stdout).toContain("task executor start");
      expect(stdout).toContain("plugin memory per task");
      expect(stdout).toContain("+ fixYoungGenerationSize");
      expect(stdout).toContain("floor: minimal Node plugin");
      for (const measure of Object.values(m) as { what: string }[]) expect(measure.what).toBeTruthy();
      expect(report.targets.map((t: { name: string }) => t.name)).toEqual([
        "exec throughput vs raw HTTP/2 limit",
        "exec throughput vs grpc-js",
        ...(goClient ? ["exec throughput vs raw HTTP/2 limit (grpc-go client)", "exec throughput vs grpc-js (grpc-go client)"] : []),
        "unary rate vs grpc-js",
        ...(goClient ? ["unary rate vs grpc-js (grpc-go client)"] : []),
        "start-up vs bare node",
        ...(goClient ? ["start-up vs bare node (go-plugin host)"] : []),
        "idle RSS vs bare node",
        "slow-reader RSS growth",
      ]);
      for (const t of report.targets) expect(typeof t.pass).toBe("boolean");
      expect(stdout).toMatch(/PASS|MISS/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 20 * 60_000); // minutes more on a fresh machine: the grpc-go client's first build installs Debian's Go packages
});
