// `nomadkit bundle` on a real driver (the README's minimal driver): the directory it writes runs as
// a Nomad plugin on its own, copied away from every node_modules, with its V8 code cache used only
// for exactly the bundle it was made from; packages left outside load from node_modules next to it.
import { spawnSync } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { formatReport, runConformance } from "@nomadkit/conformance";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const bin = fileURLToPath(new URL("../bin/nomadkit.js", import.meta.url));
const root = fileURLToPath(new URL("../../../", import.meta.url));
const REFUSAL = "These are not meant to be executed directly";

function nomadkit(cwd: string, ...args: string[]) {
  const r = spawnSync(process.execPath, [bin, ...args], {
    cwd,
    encoding: "utf8",
    timeout: 120_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Runs a launcher by hand (no magic cookie) with the code-cache report on. */
function report(launcher: string) {
  const r = spawnSync(process.execPath, [launcher], {
    env: { PATH: process.env.PATH, NOMADKIT_CODE_CACHE: "report" },
    encoding: "utf8",
  });
  return { code: r.status, stderr: r.stderr };
}

// Inside the repo, so the drivers' imports resolve from the workspace's node_modules.
let work: string;
// Outside the repo: no node_modules above it.
let away: string;
const readmeDriver = (() => {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const m = /```js\n([\s\S]*?)```\n/.exec(
    readme.slice(readme.indexOf("## Write your own driver")),
  );
  if (!m)
    throw new Error("README.md: no js block after '## Write your own driver'");
  return m[1]!;
})();

beforeAll(() => {
  work = mkdtempSync(join(root, "packages/cli/test/.bundle-"));
  away = mkdtempSync(join(tmpdir(), "nk-bundle-"));
  // CommonJS bundle with a code cache; the README's own ends in `await serveDriver(driver)`.
  expect(readmeDriver).toContain("\nawait serveDriver(driver);");
  writeFileSync(
    join(work, "hello.mjs"),
    readmeDriver.replace(
      "\nawait serveDriver(driver);",
      "\nvoid serveDriver(driver);",
    ),
  );
  writeFileSync(join(work, "hello-tla.mjs"), readmeDriver);
  writeFileSync(
    join(work, "syntax.mjs"),
    'import { serveDriver } from "@nomadkit/server";\nconst = 1;\n',
  );
  writeFileSync(
    join(work, "throws.mjs"),
    'throw new Error("driver configuration missing: HELLO_HOME");\n',
  );
  writeFileSync(join(work, "a-file"), "");
  // A package with a native addon (a stand-in .node file; never loaded at bundle time).
  const addon = join(work, "node_modules/fake-addon");
  mkdirSync(join(addon, "build"), { recursive: true });
  writeFileSync(
    join(addon, "package.json"),
    JSON.stringify({ name: "fake-addon", version: "2.3.4", main: "index.js" }),
  );
  writeFileSync(
    join(addon, "index.js"),
    'module.exports = require("./build/addon.node");\n',
  );
  writeFileSync(join(addon, "build/addon.node"), "not really a shared object");
  writeFileSync(
    join(work, "addon.mjs"),
    'import { serveDriver, defineDriver } from "@nomadkit/server";\n' +
      "// Loaded on first use, like node-pty in the SDK.\n" +
      'export const load = () => import("fake-addon");\n' +
      'void serveDriver(defineDriver({ name: "addon", version: "0.0.1", async startTask() {}, waitTask: () => new Promise(() => {}), stopTask() {}, destroyTask() {} }));\n',
  );
});
afterAll(() => {
  rmSync(work, { recursive: true, force: true });
  rmSync(away, { recursive: true, force: true });
});

describe("nomadkit bundle", () => {
  let out: string;

  it("writes the launcher, the bundle, its code cache and a package.json naming what stayed outside", () => {
    const r = nomadkit(
      work,
      "bundle",
      "hello.mjs",
      "--out",
      "out",
      "--name",
      "hello",
    );
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("(PluginInfo: hello 0.1.0)");
    out = join(work, "out");
    expect(statSync(join(out, "hello")).mode & 0o111).toBe(0o111);
    for (const f of ["hello.cjs", "hello.cjs.v8cache", "package.json"])
      expect(existsSync(join(out, f)), f).toBe(true);
    // The minimal driver launches no executors: nothing of the executor is bundled.
    expect(existsSync(join(out, "hello-executor.cjs"))).toBe(false);
    const pkg = JSON.parse(readFileSync(join(out, "package.json"), "utf8"));
    const pty = JSON.parse(
      readFileSync(join(root, "node_modules/node-pty/package.json"), "utf8"),
    ).version;
    const x509 = JSON.parse(
      readFileSync(
        join(root, "node_modules/@peculiar/x509/package.json"),
        "utf8",
      ),
    ).version;
    // Left outside, loaded on first use: node-pty (native) for tty exec sessions, @peculiar/x509 for
    // go-plugin AutoMTLS (hosts other than Nomad).
    expect(pkg).toMatchObject({
      name: "hello",
      type: "commonjs",
      bin: { hello: "./hello" },
    });
    expect(pkg.dependencies).toEqual({
      "@peculiar/x509": x509,
      "node-pty": pty,
    });
    // node-pty builds its addon in an install script, which npm 12 runs only when allowed.
    expect(pkg.allowScripts).toEqual({ "node-pty": true });
    expect(report(join(out, "hello"))).toMatchObject({
      code: 1,
      stderr: expect.stringContaining("hello: code cache used"),
    });
  });

  it("makes a directory that runs as a Nomad plugin on its own, node-pty loading from node_modules next to it", async () => {
    const copy = join(away, "hello");
    cpSync(out, copy, { recursive: true });
    const options = {
      plugin: join(copy, "hello"),
      name: "hello",
      shutdownTimeoutMs: 15_000,
      fingerprintTimeoutMs: 30_000,
    };
    // Without node_modules, a terminal cannot start, and the plugin says what is missing.
    const noPty = await runConformance({
      ...options,
      checks: ["exec-streaming-tty"],
    });
    expect(noPty.failed, formatReport(noPty)).toBe(1);
    expect(formatReport(noPty)).toContain("[failed_precondition]");
    expect(formatReport(noPty)).toContain(
      "tty: a terminal needs the node-pty package",
    );
    mkdirSync(join(copy, "node_modules"));
    symlinkSync(
      join(root, "node_modules/node-pty"),
      join(copy, "node_modules/node-pty"),
    );
    const r = report(join(copy, "hello"));
    expect(r.stderr).toContain("hello: code cache used");
    expect(r.stderr).toContain(REFUSAL);
    const conformance = await runConformance({
      ...options,
      checks: [
        "no-cookie",
        "health",
        "plugin-info",
        "fingerprint",
        "exec-streaming",
        "exec-streaming-tty",
        "stop-task",
        "shutdown",
      ],
    });
    expect(conformance.failed, formatReport(conformance)).toBe(0);
    expect(conformance.skipped, formatReport(conformance)).toBe(0);
  }, 180_000);

  it("bundles an entry with top-level await as an ES module (no code cache) and says so", () => {
    const r = nomadkit(work, "bundle", "hello-tla.mjs", "--out", "tla");
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(
      "nomadkit: warning: hello-tla.mjs uses top-level await, so the bundle is an ES module (hello-tla.mjs)",
    );
    expect(r.stderr).toContain(
      'nomadkit: warning: the plugin calls itself "hello" (PluginInfo), which Nomad\'s plugin block and jobs use; name its executable the same (--name hello)',
    );
    expect(r.stdout).toContain("(PluginInfo: hello 0.1.0)");
    const copy = join(away, "tla");
    cpSync(join(work, "tla"), copy, { recursive: true });
    expect(existsSync(join(copy, "hello-tla.mjs"))).toBe(true);
    expect(existsSync(join(copy, "hello-tla.cjs.v8cache"))).toBe(false);
    expect(report(join(copy, "hello-tla"))).toMatchObject({
      code: 1,
      stderr: expect.stringContaining(
        "hello-tla: code cache none (ES module bundle)",
      ),
    });
    // Far from any node_modules: everything it loads at start-up is inside the bundle.
    const info = nomadkit(away, "info", join(copy, "hello-tla"), "--json");
    expect(info.stderr).toBe("");
    expect(JSON.parse(info.stdout)).toMatchObject({
      name: "hello",
      type: "DRIVER",
    });
  });

  it("ignores a code cache made from another bundle of the same length, and one that is missing", () => {
    const copy = join(away, "stale");
    cpSync(out, copy, { recursive: true });
    const bundle = join(copy, "hello.cjs");
    const source = readFileSync(bundle, "latin1");
    expect(source).toContain(REFUSAL);
    // Same length (all V8 itself would check), different code: the launcher runs what it has.
    writeFileSync(
      bundle,
      source.replace(REFUSAL, REFUSAL.toUpperCase()),
      "latin1",
    );
    let r = report(join(copy, "hello"));
    expect(r.stderr).toContain("hello: code cache stale");
    expect(r.stderr).toContain(REFUSAL.toUpperCase());
    expect(r.code).toBe(1);
    rmSync(join(copy, "hello.cjs.v8cache"));
    r = report(join(copy, "hello"));
    expect(r.stderr).toContain("hello: code cache none");
    expect(r.code).toBe(1);
  });

  /** `nomadkit bundle` of the reference driver (it launches task executors) into `work/<out>`. */
  const bundleRawexec = (out: string, name: string, ...flags: string[]) =>
    nomadkit(
      work,
      "bundle",
      join(root, "examples/rawexec-driver/dist/main.js"),
      "--out",
      out,
      "--name",
      name,
      ...flags,
    );

  it("bundles @nomadkit/server's task executor for a driver that launches executors", () => {
    const r = bundleRawexec("rawexec", "rawexec", "--no-code-cache");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(existsSync(join(work, "rawexec/rawexec-executor.cjs"))).toBe(true);
    // Bundled from the same (ES module) build of @nomadkit/server as the plugin, whose unused
    // exports esbuild drops: no module of a CommonJS build is in it (esbuild names wrapped
    // modules by path).
    const executorText = readFileSync(
      join(work, "rawexec/rawexec-executor.cjs"),
      "utf8",
    );
    expect(executorText).toMatch(/@bufbuild\/protobuf\/dist\/esm\//);
    expect(executorText).not.toMatch(/dist\/(cjs|commonjs)\//);
    expect(existsSync(join(work, "rawexec/rawexec.cjs.v8cache"))).toBe(false);
    const pkg = JSON.parse(
      readFileSync(join(work, "rawexec/package.json"), "utf8"),
    );
    // The executor's tty sessions need node-pty; AutoMTLS (executor reattach) needs @peculiar/x509.
    expect(Object.keys(pkg.dependencies)).toEqual([
      "@peculiar/x509",
      "node-pty",
    ]);
    // The executor bundle is an executor: run by hand, it refuses like the plugin.
    const ex = spawnSync(
      process.execPath,
      [join(work, "rawexec/rawexec-executor.cjs")],
      { env: { PATH: process.env.PATH }, encoding: "utf8" },
    );
    expect(ex.status).toBe(1);
    expect(ex.stderr).toContain(REFUSAL);
  });

  it("gives the bundled executor a launcher and a code cache made from a run of it, which the plugin's launcher points at", () => {
    const r = bundleRawexec("rawexec-cached", "nomadkit-rawexec");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const dir = join(work, "rawexec-cached");
    expect(existsSync(join(dir, "nomadkit-rawexec-executor.cjs.v8cache"))).toBe(
      true,
    );
    // Made from that run and used: V8 rejects a cache saved under other flags, and the executor
    // changes one (fixYoungGenerationSize) after compiling, which it undoes on exit.
    const ex = report(join(dir, "nomadkit-rawexec-executor"));
    expect(ex.stderr).toContain("nomadkit-rawexec-executor: code cache used");
    expect(ex.stderr).toContain(REFUSAL);
    expect(ex.code).toBe(1);
    // The plugin's launcher offers launchExecutor the executor's launcher first.
    expect(readFileSync(join(dir, "nomadkit-rawexec"), "utf8")).toContain(
      '"executors":["nomadkit-rawexec-executor","nomadkit-rawexec-executor.cjs"]',
    );
    // Without the run, neither cache, and a launcher left from it is not kept stale.
    const again = bundleRawexec(
      "rawexec-cached",
      "nomadkit-rawexec",
      "--no-code-cache",
    );
    expect(again.code).toBe(0);
    expect(existsSync(join(dir, "nomadkit-rawexec-executor.cjs.v8cache"))).toBe(
      false,
    );
    expect(report(join(dir, "nomadkit-rawexec-executor")).stderr).toContain(
      "nomadkit-rawexec-executor: code cache none",
    );
  });

  it("names the file or flag when it cannot bundle", () => {
    let r = nomadkit(work, "bundle", "missing.mjs");
    expect(r.code).toBe(1);
    expect(r.stderr).toBe("nomadkit: bundle missing.mjs: no such file\n");

    r = nomadkit(work, "bundle", "hello.mjs", "--name", "../hello");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      'nomadkit: --name "../hello": expected a file name',
    );

    r = nomadkit(work, "bundle", "hello.mjs", "--out", "a-file");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("nomadkit: --out a-file:");

    r = nomadkit(work, "bundle", "syntax.mjs", "--out", "syntax");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("nomadkit: bundle syntax.mjs: esbuild failed:");
    expect(r.stderr).toMatch(/syntax\.mjs:2:\d+/);

    r = nomadkit(
      work,
      "bundle",
      "hello.mjs",
      "--out",
      "forced",
      "--executor",
      "--no-code-cache",
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      "nomadkit: --executor: hello.mjs does not use @nomadkit/server's launchExecutor",
    );
  });

  it("names the package of a native addon to leave outside, and lists it in package.json once it is", () => {
    let r = nomadkit(work, "bundle", "addon.mjs", "--out", "addon");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('No loader is configured for ".node" files');
    expect(r.stderr).toContain(
      "a native addon cannot be bundled: leave its package outside with --external fake-addon",
    );
    r = nomadkit(
      work,
      "bundle",
      "addon.mjs",
      "--out",
      "addon",
      "--external",
      "fake-addon",
    );
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("(PluginInfo: addon 0.0.1)");
    const pkg = JSON.parse(
      readFileSync(join(work, "addon/package.json"), "utf8"),
    );
    expect(pkg.dependencies["fake-addon"]).toBe("2.3.4");
  });

  it("fails when the bundled plugin cannot start as Nomad starts it, showing its stderr; --no-code-cache skips that run", () => {
    let r = nomadkit(
      work,
      "bundle",
      "throws.mjs",
      "--out",
      "throws",
      "--start-timeout",
      "30000",
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      "nomadkit: bundle: the bundled plugin did not start as Nomad starts it",
    );
    expect(r.stderr).toContain("driver configuration missing: HELLO_HOME");
    expect(r.stderr).toContain("--no-code-cache");
    expect(existsSync(join(work, "throws/throws.cjs.v8cache"))).toBe(false);

    r = nomadkit(
      work,
      "bundle",
      "throws.mjs",
      "--out",
      "throws",
      "--no-code-cache",
    );
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    for (const f of ["throws", "throws.cjs"])
      expect(existsSync(join(work, "throws", f)), f).toBe(true);
  });
});
