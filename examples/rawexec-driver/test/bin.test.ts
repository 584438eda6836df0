// The plugin binary's start-up path: it runs the one-file bundle with the V8 code cache the build
// made (scripts/bundle.mjs), and only when the cache was made from exactly that bundle.
// NOMADKIT_RAWEXEC_CODE_CACHE=report makes the bin say which case it took; started by hand (no
// magic cookie) the plugin then prints go-plugin's refusal and exits 1, which is enough to see
// which source ran.
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
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
  const r = spawnSync(process.execPath, [bin], { env: { PATH: process.env.PATH, NOMADKIT_RAWEXEC_CODE_CACHE: "report" }, encoding: "utf8" });
  return { status: r.status, stderr: r.stderr };
}

/** A copy of the package's bin/ and bundle (and cache) to tamper with. */
function copyPackage(): string {
  const dir = mkdtempSync(join(tmpdir(), "nk-rawexec-bin-"));
  dirs.push(dir);
  mkdirSync(join(dir, "bin"));
  mkdirSync(join(dir, "dist"));
  for (const f of ["bin/nomadkit-rawexec", "bin/package.json", "dist/nomadkit-rawexec.cjs", "dist/nomadkit-rawexec.cjs.v8cache"]) {
    copyFileSync(join(pkg, f), join(dir, f));
  }
  return dir;
}

describe("bin/nomadkit-rawexec", () => {
  it("compiles the bundle with the code cache the build made from it", () => {
    const r = run(PLUGIN);
    expect(r.stderr).toContain("nomadkit-rawexec: code cache used");
    expect(r.stderr).toContain(REFUSAL);
    expect(r.status).toBe(1);
  });

  it("ignores a cache made from another bundle of the same length, and runs the bundle it has", () => {
    const dir = copyPackage();
    const bundle = join(dir, "dist/nomadkit-rawexec.cjs");
    const source = readFileSync(bundle, "latin1");
    expect(source).toContain(REFUSAL);
    // Same length (all V8 itself would check), different code.
    writeFileSync(bundle, source.replace(REFUSAL, REFUSAL.toUpperCase()), "latin1");
    const r = run(join(dir, "bin/nomadkit-rawexec"));
    expect(r.stderr).toContain("nomadkit-rawexec: code cache stale");
    expect(r.stderr).toContain(REFUSAL.toUpperCase());
    expect(r.status).toBe(1);
  });

  it("starts without a cache", () => {
    const dir = copyPackage();
    rmSync(join(dir, "dist/nomadkit-rawexec.cjs.v8cache"));
    const r = run(join(dir, "bin/nomadkit-rawexec"));
    expect(r.stderr).toContain("nomadkit-rawexec: code cache none");
    expect(r.stderr).toContain(REFUSAL);
    expect(r.status).toBe(1);
  });
});
