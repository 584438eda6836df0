// Go interop: the reference driver driven by hashicorp/go-plugin + grpc-go, the client stack Nomad
// uses (tools/interop-go). The first run installs Debian's Go packages and builds the host, which
// takes minutes; later runs reuse node_modules/.cache/nomadkit-go.
import { accessSync, constants, existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { runProcess, type ProcessResult } from "./run-process.js";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const runSh = join(repo, "tools/interop-go/run.sh");
// NOMADKIT_INTEROP_GO_PLUGIN points the run at another plugin binary (any name).
const override = process.env.NOMADKIT_INTEROP_GO_PLUGIN;
const driver =
  override ?? join(repo, "examples/rawexec-driver/bin/nomadkit-rawexec");

/** Why the run can't happen here, or undefined when it can. */
function skipReason(): string | undefined {
  if (process.platform !== "linux")
    return "the Go host is built from Debian packages on Linux";
  if (!existsSync("/usr/bin/dpkg"))
    return "no dpkg: the Go host is built from Debian packages";
  if (!existsSync(driver)) return `${driver} does not exist`;
  const body = readFileSync(driver, "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "" && !/^\s*(#|\/\/)/.test(l));
  if (body.length === 0)
    return `${driver} is a placeholder (only a shebang or comments)`;
  try {
    accessSync(driver, constants.X_OK);
  } catch {
    return `${driver} is not executable`;
  }
  return undefined;
}

function run(args: string[]): Promise<ProcessResult> {
  return runProcess("bash", [runSh, ...args], {
    cwd: repo,
    // The launcher says on stderr what it started from (see the load phase below).
    env: { ...process.env, NOMADKIT_CODE_CACHE: "report" },
  });
}

const reason = skipReason();

describe("Go interop (hashicorp/go-plugin + grpc-go host)", () => {
  it.skipIf(reason !== undefined)(
    `runs the reference driver through Nomad's start-up calls, a task and the exec vectors${
      reason ? ` [skipped: ${reason}]` : ""
    }`,
    async () => {
      const { code, stdout, stderr } = await run([
        driver,
        ...(override ? [] : ["-plugin-name", "nomadkit-rawexec"]),
        // What Nomad sends when the agent has no plugin block: {} decoded against ConfigSchema.
        "-config-json",
        "{}",
        // Generous on a busy 2-core machine; the plugin is expected to answer at once.
        "-fingerprint-timeout",
        "60s",
      ]);
      const report = `${stdout}\n--- stderr ---\n${stderr.slice(-4000)}`;
      const steps = stdout.split("\n").filter((l) => /^(PASS|FAIL) /.test(l));
      expect(steps.length, report).toBeGreaterThan(30);
      expect(
        steps.filter((l) => !l.startsWith("PASS ")),
        report,
      ).toEqual([]);
      expect(stdout, report).toMatch(/^interop-go: all \d+ steps passed/m);
      if (!override) {
        // grpc-go's requests of Nomad's load launch are the bytes `nomadkit bundle` recorded: the
        // launcher's fast path answers them without loading the driver, so the plugin writes just
        // its report line ("load recording used") and two log lines (started, shutting down).
        // Loading the driver would add its own.
        expect(stdout, report).toMatch(
          /^PASS load\/stderr-log: 3 lines, 2 hclog JSON, no error level$/m,
        );
        expect(stdout, report).toMatch(
          /^PASS startup\/no-cookie: exit 1, stderr "nomadkit-rawexec: load recording used/m,
        );
      }
      expect(code, report).toBe(0);
    },
    20 * 60_000,
  );
});
