// The README's "Install a nomadkit driver into Nomad", as an operator does it: the build's
// dist/plugin copied away from the repository, `npm install --omit=dev` in it (node-pty builds its
// addon), a two-line wrapper naming node in a plugin_dir, and the conformance suite against that
// wrapper, which launches the driver exactly as Nomad would. Also on a host without build tools,
// where npm leaves the optional node-pty out.
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
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

  it(
    "installs without node-pty on a host that cannot build it (no Python, make or compiler), and only terminals are refused",
    () => {
      const opt = join(root, "opt/nomadkit-rawexec-nocc");
      mkdirSync(dirname(opt), { recursive: true });
      cpSync(join(pkg, "dist/plugin"), opt, { recursive: true });
      // A PATH with node and a shell only: node-pty's install script runs and its build finds no Python.
      const bin = join(root, "nocc-bin");
      mkdirSync(bin);
      symlinkSync(process.execPath, join(bin, "node"));
      symlinkSync("/bin/sh", join(bin, "sh"));
      // npm's own script, run by node: `npm` on PATH is a link to it.
      const npmCli = realpathSync(spawnSync("sh", ["-c", "command -v npm"], { encoding: "utf8" }).stdout.trim());
      const npm = spawnSync(process.execPath, [npmCli, "install", "--omit=dev", "--no-audit", "--no-fund", "--prefer-offline", "--foreground-scripts"], {
        cwd: opt,
        env: { ...process.env, PATH: bin },
        encoding: "utf8",
        timeout: 600_000,
      });
      expect(npm.status, `${npm.stdout}\n${npm.stderr}`).toBe(0);
      // It did try to build (so this is the no-compiler case, not a skipped script) and left the package out.
      expect(`${npm.stdout}\n${npm.stderr}`).toMatch(/node-gyp|gyp/);
      expect(existsSync(join(opt, "node_modules/node-pty"))).toBe(false);
      expect(existsSync(join(opt, "node_modules/@peculiar/x509/package.json"))).toBe(true);

      const wrapper = join(root, "nocc-plugins/nomadkit-rawexec");
      mkdirSync(dirname(wrapper));
      writeFileSync(wrapper, `#!/bin/sh\nexec ${process.execPath} ${opt}/nomadkit-rawexec "$@"\n`, { mode: 0o755 });
      const r = spawnSync(process.execPath, [nomadkit, "conformance", wrapper, "--checks", "exec-streaming,exec-streaming-tty"], {
        cwd: root,
        encoding: "utf8",
        timeout: 300_000,
      });
      expect(r.stdout).toMatch(/start-task\s+PASS/);
      expect(r.stdout).toMatch(/exec-streaming\s+PASS/);
      expect(r.stdout).toMatch(/exec-streaming-tty\s+FAIL .*\[failed_precondition\] tty: a terminal needs the node-pty package.*install python3, make and a C\+\+ compiler/);
      expect(r.status).toBe(1);
    },
    900_000,
  );
});
