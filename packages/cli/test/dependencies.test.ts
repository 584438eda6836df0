// The CLI needs only the packages its package.json declares: npm's hoisting must not be what makes it
// work. With `npm install --install-strategy=linked`, pnpm or Yarn PnP a package sees its declared
// dependencies and nothing else. (check:packages scans every package's built imports against its
// declared dependencies; this runs the CLI from such a layout.)
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")) as {
  dependencies: Record<string, string>;
};
const driver = fileURLToPath(
  new URL("../../server/test/fixtures/goplugin/test-driver.mjs", import.meta.url),
);

/** Where `name` is installed for this package (its own node_modules or one above), real path. */
function installed(name: string): string {
  for (let dir = pkgDir; ; dir = dirname(dir)) {
    const candidate = join(dir, "node_modules", name);
    if (existsSync(join(candidate, "package.json"))) return realpathSync(candidate);
    if (dirname(dir) === dir) throw new Error(`${name} is not installed`);
  }
}

const cleanup: string[] = [];
afterAll(() => {
  for (const d of cleanup) rmSync(d, { recursive: true, force: true });
});

describe("@nomadkit/cli's dependencies", () => {
  it("runs from a layout where only the declared packages are reachable (linked install)", () => {
    // node_modules/@nomadkit/cli with its declared dependencies linked next to it, as npm's
    // linked strategy and pnpm lay it out; nothing above the temporary directory.
    const root = mkdtempSync(join(tmpdir(), "nk-linked-"));
    cleanup.push(root);
    const copy = join(root, "node_modules/@nomadkit/cli");
    mkdirSync(copy, { recursive: true });
    for (const f of ["package.json", "bin", "dist"]) cpSync(join(pkgDir, f), join(copy, f), { recursive: true });
    for (const name of Object.keys(pkg.dependencies)) {
      const link = join(copy, "node_modules", name);
      mkdirSync(dirname(link), { recursive: true });
      symlinkSync(installed(name), link, "dir");
    }
    const bin = join(copy, "bin/nomadkit.js");
    const run = (...args: string[]) =>
      spawnSync(process.execPath, [bin, ...args], { cwd: root, encoding: "utf8", timeout: 60_000 });

    const info = run("info", driver, "--json");
    expect(info.stderr).toBe("");
    expect(info.status).toBe(0);
    expect(JSON.parse(info.stdout)).toMatchObject({ name: "test-driver" });
    const fp = run("fingerprint", driver, "--config", "{}");
    expect(fp.stderr).toBe("");
    expect(fp.status).toBe(0);
    const list = run("conformance", "--list");
    expect(list.stderr).toBe("");
    expect(list.status).toBe(0);
  });
});
