// The README's "Install a nomadkit driver into Nomad", as an operator does it: the build's
// dist/plugin copied away from the repository, `npm install --omit=dev` in it (node-pty builds its
// addon), a two-line wrapper naming node in a plugin_dir, and the conformance suite against that
// wrapper, which launches the driver exactly as Nomad would.
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { PLUGIN } from "./helpers.js";

const pkg = join(dirname(PLUGIN), "..");
const nomadkit = fileURLToPath(new URL("../../../packages/cli/bin/nomadkit.js", import.meta.url));
const root = mkdtempSync(join(tmpdir(), "nk-install-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("the bundled reference driver, installed as the README says", () => {
  it(
    "installs its outside dependencies with npm and conforms behind a plugin_dir wrapper",
    () => {
      const opt = join(root, "opt/nomadkit-rawexec");
      mkdirSync(dirname(opt), { recursive: true });
      cpSync(join(pkg, "dist/plugin"), opt, { recursive: true });
      // npm's cache already holds these packages after the repository's own install.
      const npm = spawnSync("npm", ["install", "--omit=dev", "--no-audit", "--no-fund", "--prefer-offline"], {
        cwd: opt,
        encoding: "utf8",
        timeout: 600_000,
      });
      expect(npm.status, `${npm.stdout}\n${npm.stderr}`).toBe(0);
      // The package.json allows node-pty's install script (npm 12 runs no other): no advisory.
      expect(npm.stderr).not.toContain("not yet covered by allowScripts");
      expect(existsSync(join(opt, "node_modules/node-pty/build/Release/pty.node"))).toBe(true);

      const pluginDir = join(root, "plugins");
      mkdirSync(pluginDir);
      const wrapper = join(pluginDir, "nomadkit-rawexec");
      writeFileSync(wrapper, `#!/bin/sh\nexec ${process.execPath} ${opt}/nomadkit-rawexec "$@"\n`, { mode: 0o755 });
      const r = spawnSync(process.execPath, [nomadkit, "conformance", wrapper], { cwd: root, encoding: "utf8", timeout: 300_000 });
      expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
      expect(r.stdout).toContain("CONFORMS");
      // tty exec needs the node-pty npm just built next to the bundle.
      expect(r.stdout).toMatch(/exec-streaming-tty\s+PASS/);
    },
    900_000,
  );
});
