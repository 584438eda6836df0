// The plugin binary's start-up path: bin/nomadkit-rawexec runs the launcher `nomadkit bundle` made
// in dist/plugin (the load launch's fast path with its recording, and the bundle with the V8 code
// cache of a real start-up). NOMADKIT_CODE_CACHE=report makes the launcher say which case it took;
// started by hand (no magic cookie) the plugin then prints go-plugin's refusal and exits 1. The launcher's other cases (stale or missing cache) are
// tested with `nomadkit bundle` in @nomadkit/cli; the executor bundle in driver.test.ts.
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, rmSync, utimesSync } from "node:fs";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { PLUGIN } from "./helpers.js";

const pkg = join(dirname(PLUGIN), "..");
const REFUSAL = "These are not meant to be executed directly";
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function run(bin: string) {
  const r = spawnSync(process.execPath, [bin], { env: { PATH: process.env.PATH, NOMADKIT_CODE_CACHE: "report" }, encoding: "utf8" });
  return { status: r.status, stderr: r.stderr };
}

describe("bin/nomadkit-rawexec", () => {
  it("starts with the load launch's fast path, from the recording the build made", () => {
    const r = run(PLUGIN);
    expect(r.stderr).toContain("nomadkit-rawexec: load recording used\nThis binary is a plugin.");
    expect(r.stderr).toContain(REFUSAL);
    expect(r.status).toBe(1);
  });

  it("runs the bundle with the code cache the build made from it when there is no load recording", () => {
    const dir = mkdtempSync(join(pkg, ".bin-"));
    dirs.push(dir);
    cpSync(join(pkg, "bin"), join(dir, "bin"), { recursive: true });
    cpSync(join(pkg, "dist"), join(dir, "dist"), { recursive: true, preserveTimestamps: true });
    rmSync(join(dir, "dist/plugin/nomadkit-rawexec.load.json"));
    const r = run(join(dir, "bin/nomadkit-rawexec"));
    expect(r.stderr).not.toContain("load recording");
    expect(r.stderr).toContain("nomadkit-rawexec: code cache used");
    expect(r.stderr).toContain(REFUSAL);
    expect(r.status).toBe(1);
  });

  it("runs the compiled sources while they are newer than the bundle (tsc alone after an edit)", () => {
    const dir = mkdtempSync(join(pkg, ".bin-"));
    dirs.push(dir);
    cpSync(join(pkg, "bin"), join(dir, "bin"), { recursive: true });
    cpSync(join(pkg, "dist"), join(dir, "dist"), { recursive: true });
    const later = new Date(Date.now() + 60_000);
    utimesSync(join(dir, "dist/main.js"), later, later);
    const r = run(join(dir, "bin/nomadkit-rawexec"));
    expect(r.stderr).not.toContain("code cache");
    expect(r.stderr).toContain(REFUSAL);
    expect(r.status).toBe(1);
  });
});
