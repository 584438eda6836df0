// `nomadkit bundle` on a real driver (the README's minimal driver): the directory it writes runs as
// a Nomad plugin on its own, copied away from every node_modules, with its V8 code cache used only
// for exactly the bundle it was made from; packages left outside load from node_modules next to it.
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as http2 from "node:http2";
import { connect } from "node:net";
import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { launchPlugin, type PluginClient, type PluginLogEntry } from "@nomadkit/client";
import { formatReport, runConformance } from "@nomadkit/conformance";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { alive, until } from "./processes.js";

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

/** `nomadkit bundle <args>` run in the test's work directory. */
function bundle(...args: string[]) {
  return nomadkit(work, "bundle", ...args);
}

/** Runs a launcher by hand (no magic cookie) with the code-cache report on. */
function report(launcher: string) {
  const r = spawnSync(process.execPath, [launcher], {
    env: { PATH: process.env.PATH, NOMADKIT_CODE_CACHE: "report" },
    encoding: "utf8",
  });
  return { code: r.status, stderr: r.stderr };
}

/** The string attributes of a launched driver's first fingerprint. */
async function fingerprintAttributes(plugin: PluginClient): Promise<Record<string, string>> {
  for await (const res of plugin.driver.fingerprint({}))
    return Object.fromEntries(Object.entries(res.attributes).map(([k, a]) => [k, String(a.value.value)]));
  throw new Error("Driver.Fingerprint ended without sending a fingerprint");
}

/** A driver that never runs a task, its `definition`'s other members spliced in (JavaScript source). */
const stubDriver = (name: string, definition = "") =>
  `defineDriver({ name: ${JSON.stringify(name)}, version: "0.0.1", ${definition}async startTask() {}, waitTask: () => new Promise(() => {}), stopTask() {}, destroyTask() {} })`;

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
  // CommonJS bundle with a code cache, as the README's own ends: `void serveDriver(driver)`.
  expect(readmeDriver).toContain("\nvoid serveDriver(driver);");
  writeFileSync(join(work, "hello.mjs"), readmeDriver);
  writeFileSync(
    join(work, "hello-tla.mjs"),
    readmeDriver.replace("\nvoid serveDriver(driver);", "\nawait serveDriver(driver);"),
  );
  // Says when its own code runs, once serving: on stdout, which the plugin's GRPCStdio stream carries.
  writeFileSync(
    join(work, "hello-stdio.mjs"),
    readmeDriver.replace(
      "\nvoid serveDriver(driver);",
      '\nvoid serveDriver(driver).then(() => console.log("the driver\'s own code is running"));',
    ),
  );
  // servePlugin options a launcher cannot replay: an environment object of the plugin's own.
  writeFileSync(
    join(work, "hello-env.mjs"),
    readmeDriver.replace(
      "\nvoid serveDriver(driver);",
      "\nvoid serveDriver(driver, { env: { ...process.env } });",
    ),
  );
  writeFileSync(
    join(work, "syntax.mjs"),
    'import { serveDriver } from "@nomadkit/server";\nconst = 1;\n',
  );
  writeFileSync(
    join(work, "throws.mjs"),
    'throw new Error("driver configuration missing: HELLO_HOME");\n',
  );
  // A CommonJS driver that serves only when run as a program (a test may require it).
  writeFileSync(
    join(work, "main-check.cjs"),
    'const { defineDriver, serveDriver } = require("@nomadkit/server");\n' +
      `const driver = ${stubDriver("main-check", 'fingerprint: () => ({ health: "healthy", attributes: { "driver.main-check.main": require.main.filename } }), ')};\n` +
      "module.exports = driver;\n" +
      "if (require.main === module) void serveDriver(driver);\n",
  );
  // An ES module driver that finds its own files, at the top level and in a method.
  writeFileSync(
    join(work, "meta.mjs"),
    'import { createRequire } from "node:module";\n' +
      'import { fileURLToPath } from "node:url";\n' +
      'import { defineDriver, serveDriver } from "@nomadkit/server";\n' +
      "const require = createRequire(import.meta.url);\n" +
      "const file = fileURLToPath(import.meta.url);\n" +
      `void serveDriver(${stubDriver(
        "meta",
        'fingerprint: () => ({ health: "healthy", attributes: { "driver.meta.url": import.meta.url, "driver.meta.file": file, ' +
          '"driver.meta.dirname": import.meta.dirname, "driver.meta.filename": import.meta.filename, "driver.meta.resolved": require.resolve("./meta.cjs") } }), ',
      )});\n`,
  );
  // What the CommonJS bundle cannot give it: import.meta.resolve.
  writeFileSync(
    join(work, "meta-resolve.mjs"),
    'import { defineDriver, serveDriver } from "@nomadkit/server";\n' +
      'const self = import.meta.resolve("./meta-resolve.mjs");\n' +
      `void serveDriver(${stubDriver("meta-resolve", "fingerprint: () => ({ health: self ? \"healthy\" : \"undetected\" }), ")});\n`,
  );
  // A driver that launches task executors (bundled with it), which never runs a task.
  writeFileSync(
    join(work, "exec-stub.mjs"),
    'import { defineDriver, serveDriver } from "@nomadkit/server";\n' +
      'import { launchExecutor } from "@nomadkit/server/executor";\n' +
      "export const launch = launchExecutor;\n" +
      `void serveDriver(${stubDriver("exec-stub")});\n`,
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
    const r = bundle("hello.mjs", "--out", "out", "--name", "hello");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("(PluginInfo: hello 0.1.0)");
    expect(r.stdout).toContain("): @peculiar/x509, node-pty (optional)\n");
    out = join(work, "out");
    expect(statSync(join(out, "hello")).mode & 0o111).toBe(0o111);
    for (const f of [
      "hello.cjs",
      "hello.cjs.v8cache",
      "hello-load.cjs",
      "hello.load.json",
      "package.json",
    ])
      expect(existsSync(join(out, f)), f).toBe(true);
    // The fast path is compiled without a code cache (faster than deserialising one).
    expect(existsSync(join(out, "hello-load.cjs.v8cache"))).toBe(false);
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
    expect(pkg.dependencies).toEqual({ "@peculiar/x509": x509 });
    // @nomadkit/server declares node-pty optional: a host that cannot build it still installs the rest.
    expect(pkg.optionalDependencies).toEqual({ "node-pty": pty });
    // node-pty builds its addon in an install script, which npm 12 runs only when allowed.
    expect(pkg.allowScripts).toEqual({ "node-pty": true });
    // Run by hand, the load launch's fast path answers (it checks the cookie as the plugin does).
    expect(report(join(out, "hello"))).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(
        new RegExp(
          `^hello: load recording used\\nThis binary is a plugin. ${REFUSAL}`,
        ),
      ),
    });
    // Without it, the plugin itself, from its code cache.
    const plain = join(away, "hello-plain");
    cpSync(out, plain, { recursive: true });
    rmSync(join(plain, "hello.load.json"));
    expect(report(join(plain, "hello"))).toMatchObject({
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
    // Installed without its install script (not allowed, --ignore-scripts): no addon, and the plugin says so.
    cpSync(join(root, "node_modules/node-pty"), join(copy, "node_modules/node-pty"), {
      recursive: true,
      filter: (src) => !src.includes("/node-pty/build"),
    });
    const unbuilt = await runConformance({
      ...options,
      checks: ["exec-streaming-tty"],
    });
    expect(unbuilt.failed, formatReport(unbuilt)).toBe(1);
    expect(formatReport(unbuilt)).toContain(
      "[failed_precondition] tty: a terminal needs node-pty's native addon, which was never built where the plugin runs",
    );
    rmSync(join(copy, "node_modules/node-pty"), { recursive: true });
    symlinkSync(
      join(root, "node_modules/node-pty"),
      join(copy, "node_modules/node-pty"),
    );
    const r = report(join(copy, "hello"));
    expect(r.stderr).toContain("hello: load recording used");
    expect(r.stderr).toContain(REFUSAL);
    // Every check but the first calls start from the load launch's fast path and hand over to
    // the plugin on the first call it does not answer.
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
    const r = bundle("hello-tla.mjs", "--out", "tla");
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(
      "nomadkit: warning: hello-tla.mjs uses top-level await, so the bundle is an ES module (hello-tla.mjs)",
    );
    expect(r.stderr).toContain(
      'nomadkit: warning: the plugin calls itself "hello" (PluginInfo), the name jobs use, but its executable is "hello-tla", the name Nomad finds the agent\'s plugin block by; name it the same (--name hello) so one name serves both',
    );
    expect(r.stdout).toContain("(PluginInfo: hello 0.1.0)");
    // Only packages are dependencies (an ES module bundle also imports esbuild's "<runtime>"),
    // so `npm install` in a copy can complete it.
    const deps = Object.keys(JSON.parse(readFileSync(join(work, "tla/package.json"), "utf8")).dependencies);
    expect(deps.length).toBeGreaterThan(0);
    for (const d of deps) expect(d).toMatch(/^(@[a-z0-9-~][a-z0-9-._~]*\/)?[a-z0-9-~][a-z0-9-._~]*$/);
    const copy = join(away, "tla");
    cpSync(join(work, "tla"), copy, { recursive: true });
    expect(existsSync(join(copy, "hello-tla.mjs"))).toBe(true);
    expect(existsSync(join(copy, "hello-tla.cjs.v8cache"))).toBe(false);
    // The load launch's fast path works for it too; the plugin itself has no code cache.
    expect(report(join(copy, "hello-tla"))).toMatchObject({
      code: 1,
      stderr: expect.stringContaining("hello-tla: load recording used"),
    });
    rmSync(join(copy, "hello-tla.load.json"));
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
    // The bundle must run for its code cache to matter: without the load recording it runs at once.
    rmSync(join(copy, "hello.load.json"));
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

  it("uses the load recording only with a bundle that ends with the recording's build stamp", () => {
    const copy = join(away, "other-build");
    cpSync(out, copy, { recursive: true });
    const bundle = join(copy, "hello.cjs");
    const source = readFileSync(bundle, "latin1");
    const { build } = JSON.parse(readFileSync(join(copy, "hello.load.json"), "utf8")) as { build: string };
    expect(build).toMatch(/^[0-9a-f]{64}$/);
    const stampLine = `// nomadkit-bundle build ${build}\n`;
    expect(source.endsWith(stampLine)).toBe(true);
    expect(report(join(copy, "hello")).stderr).toContain("hello: load recording used");
    const stale = "hello: load recording stale (hello.load.json was not recorded from this hello.cjs)";
    // A bundle of another build (as an upgrade that copied only hello.cjs leaves it) ends with another stamp.
    const other = build.replace(/./g, (c) => (c === "0" ? "1" : "0"));
    writeFileSync(bundle, source.slice(0, -stampLine.length) + stampLine.replace(build, other), "latin1");
    let r = report(join(copy, "hello"));
    expect(r.stderr).toContain(stale);
    // The plugin itself ran and refused (started by hand).
    expect(r.stderr).toContain(REFUSAL);
    // No stamp as the last line (a bundle not from nomadkit bundle, or cut short), or the stamp
    // of an edited bundle (its size differs from the recorded one): not used either.
    const edited = source.replace(REFUSAL, `${REFUSAL} (edited)`);
    expect(edited.endsWith(stampLine)).toBe(true);
    for (const text of [source + "// appended\n", source.slice(0, -stampLine.length), source.slice(0, -1), edited]) {
      writeFileSync(bundle, text, "latin1");
      r = report(join(copy, "hello"));
      expect(r.stderr).toContain(stale);
    }
  });

  it("runs without a damaged code cache or load recording instead of crashing on them", () => {
    const copy = join(away, "damaged");
    cpSync(out, copy, { recursive: true });
    // A block of the cache lost (same length: V8 alone would deserialise it and crash).
    const cacheFile = join(copy, "hello.cjs.v8cache");
    const cache = readFileSync(cacheFile);
    cache.fill(0, cache.length >> 1, (cache.length >> 1) + 4096);
    writeFileSync(cacheFile, cache);
    // The recording cut short.
    const recording = join(copy, "hello.load.json");
    writeFileSync(recording, readFileSync(recording, "utf8").slice(0, 300));
    const r = report(join(copy, "hello"));
    expect(r.stderr).toContain("hello: load recording stale");
    expect(r.stderr).toContain("hello: code cache stale");
    // It ran: started by hand, the plugin itself refuses (no magic cookie), exit 1, no signal.
    expect(r.stderr).toContain(REFUSAL);
    expect(r.code).toBe(1);
  });

  describe("the load launch's fast path", () => {
    const BASE = "/hashicorp.nomad.plugins.base.proto.BasePlugin";
    const envelope = (hex: string) => {
      const m = Buffer.from(hex, "hex");
      const b = Buffer.alloc(5 + m.length);
      b.writeUInt32BE(m.length, 1);
      m.copy(b, 5);
      return b;
    };
    // What Nomad's load launch sends (grpc-go's bytes): health check of "plugin", then two empty requests.
    const loadCalls = [
      [
        "/grpc.health.v1.Health/Check",
        envelope("0a06" + Buffer.from("plugin").toString("hex")),
      ],
      [`${BASE}/PluginInfo`, envelope("")],
      [`${BASE}/ConfigSchema`, envelope("")],
    ] as const;
    // Requests the recording does not hold, down to broken ones: the plugin's own answers.
    const otherCalls = [
      ["/grpc.health.v1.Health/Check", envelope("0a046e6f7065")], // service "nope"
      ["/grpc.health.v1.Health/Check", envelope("")], // service ""
      [`${BASE}/PluginInfo`, Buffer.from("000000", "hex")], // ends inside the prefix
      [`${BASE}/PluginInfo`, Buffer.from("000000000501", "hex")], // ends inside the message
      [`${BASE}/PluginInfo`, Buffer.alloc(0)], // no message
      [`${BASE}/ConfigSchema`, Buffer.concat([envelope(""), envelope("")])], // two messages
    ] as const;

    /** One call with exactly these request bytes; the whole response but its date. */
    const raw = (plugin: PluginClient, path: string, body: Buffer) =>
      new Promise<Record<string, unknown>>((resolve, reject) => {
        const session = http2.connect("http://localhost", {
          createConnection: () => connect(plugin.address),
        });
        session.on("error", reject);
        const stream = session.request({
          ":method": "POST",
          ":path": path,
          "content-type": "application/grpc",
          te: "trailers",
        });
        const result: Record<string, unknown> = {};
        const data: Buffer[] = [];
        const strip = (h: http2.IncomingHttpHeaders) =>
          Object.fromEntries(Object.entries(h).filter(([k]) => k !== "date"));
        stream.on("response", (h) => (result.headers = strip(h)));
        stream.on("trailers", (t) => (result.trailers = strip(t)));
        stream.on("data", (c: Buffer) => data.push(c));
        stream.on("error", reject);
        stream.on("end", () => {
          result.body = Buffer.concat(data).toString("hex");
          session.close();
          resolve(result);
        });
        stream.end(body);
      });

    let fastDir: string;
    let plainDir: string;
    const launched: PluginClient[] = [];
    /** The plugin launched as Nomad does, its log lines and stdout (GRPCStdio) collected. */
    const launch = async (dir: string, autoMTLS = false) => {
      const log: string[] = [];
      const stdout: string[] = [];
      const plugin = await launchPlugin(
        process.execPath,
        [join(dir, "hello")],
        {
          autoMTLS,
          env: { NOMADKIT_CODE_CACHE: "report" },
          logger: (e) => log.push(e.message),
          onStdout: (d) => stdout.push(Buffer.from(d).toString()),
        },
      );
      launched.push(plugin);
      return { plugin, log, stdout };
    };
    beforeAll(() => {
      const r = bundle("hello-stdio.mjs", "--out", "fast", "--name", "hello");
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      fastDir = join(work, "fast");
      expect(r.stdout).toContain(join("fast", "hello-load.cjs"));
      expect(r.stdout).toContain(join("fast", "hello.load.json"));
      plainDir = join(away, "fast-plain");
      cpSync(fastDir, plainDir, { recursive: true });
      rmSync(join(plainDir, "hello.load.json"));
    }, 120_000);
    afterAll(async () => {
      await Promise.all(launched.map((p) => p.kill().catch(() => undefined)));
    });

    it("answers the health check, PluginInfo and ConfigSchema byte for byte as the plugin does, without loading it, and shuts down", async () => {
      const fast = await launch(fastDir);
      const plain = await launch(plainDir);
      for (const [path, body] of loadCalls) {
        const answer = await raw(fast.plugin, path, body);
        expect(answer.trailers, path).toEqual({ "grpc-status": "0" });
        expect(answer, path).toEqual(await raw(plain.plugin, path, body));
      }
      expect(await fast.plugin.kill()).toEqual({ code: 0, signal: null });
      expect(await plain.plugin.kill()).toEqual({ code: 0, signal: null });
      expect(fast.log).toContain("hello: load recording used");
      // The plugin's own code never ran: no code cache was looked at, nothing was printed.
      expect(fast.log.join("\n")).not.toContain("hello: code cache");
      expect(fast.stdout).toEqual([]);
      expect(plain.log).toContain("hello: code cache used");
      expect(plain.stdout.join("")).toContain(
        "the driver's own code is running",
      );
    });

    it("hands the plugin its transport on the first other call: that call, the streams held so far, later calls", async () => {
      const fast = await launch(fastDir);
      expect((await fast.plugin.basePlugin.pluginInfo({})).name).toBe("hello");
      // A Driver call: the plugin loads, adopts the socket and connection, and answers it.
      const caps = await fast.plugin.driver.capabilities({});
      expect(caps.capabilities?.exec).toBe(true);
      expect(fast.log).toContain("hello: code cache used");
      // GRPCStdio, opened by the host before PluginInfo and held, is now the plugin's.
      await expect
        .poll(() => fast.stdout.join(""), { timeout: 10_000 })
        .toContain("the driver's own code is running");
      // Recorded calls are the plugin's own now too.
      expect(
        await fast.plugin.health.check({ service: "plugin" }),
      ).toMatchObject({ status: 1 });
      expect(await fast.plugin.kill()).toEqual({ code: 0, signal: null });
    });

    it("serves go-plugin's AutoMTLS as the plugin does, and hands the TLS connection over", async () => {
      const fast = await launch(fastDir, true);
      expect(fast.plugin.handshake.serverCert).toBeTruthy();
      expect((await fast.plugin.basePlugin.pluginInfo({})).name).toBe("hello");
      expect(fast.log.join("\n")).not.toContain("hello: code cache");
      const caps = await fast.plugin.driver.capabilities({});
      expect(caps.capabilities?.exec).toBe(true);
      expect(fast.log).toContain("hello: code cache used");
      expect(await fast.plugin.kill()).toEqual({ code: 0, signal: null });
    });

    /** A copy of the fast path's directory whose hello-load.cjs is `edit` of it. */
    const withPrelude = (dir: string, edit: (text: string) => string) => {
      const copy = join(away, dir);
      cpSync(fastDir, copy, { recursive: true });
      const file = join(copy, "hello-load.cjs");
      const text = readFileSync(file, "latin1");
      const edited = edit(text);
      expect(edited).not.toBe(text);
      writeFileSync(file, edited, "latin1");
      return copy;
    };
    const LOADING = "loading the plugin for a call the load recording does not answer";

    it("is not used when the fast path file is from another build: the plugin serves every call itself and says why", async () => {
      // Another build's fast path, working (as an upgrade copying `hello hello.*` leaves it).
      const dir = withPrelude("fast-other-prelude", (t) => t.replace(LOADING, LOADING.toUpperCase()));
      const other = await launch(dir);
      expect((await other.plugin.basePlugin.pluginInfo({})).name).toBe("hello");
      // SetConfig: the plugin's own (the driver has no plugin config: an empty msgpack map).
      await other.plugin.basePlugin.setConfig({ msgpackConfig: Uint8Array.of(0x80), pluginApiVersion: "v0.1.0" });
      expect((await other.plugin.driver.capabilities({})).capabilities?.exec).toBe(true);
      const warning = "the launcher did not use the load launch's fast path: hello-load.cjs is not the one bundled with this hello.cjs";
      await expect.poll(() => other.log.join("\n"), { timeout: 10_000 }).toContain(warning);
      // Said before the plugin started (stderr keeps its order): the fast path never ran.
      expect(other.log).toContain("hello: load recording stale (hello-load.cjs is not the one bundled with this hello.cjs)");
      expect(other.log).toContain("hello: code cache used");
      expect(other.log.join("\n")).not.toContain(LOADING.toUpperCase());
      expect(await other.plugin.kill()).toEqual({ code: 0, signal: null });
      // Missing altogether: the same, and said so.
      rmSync(join(dir, "hello-load.cjs"));
      const none = await launch(dir);
      expect((await none.plugin.basePlugin.pluginInfo({})).name).toBe("hello");
      await expect
        .poll(() => none.log.join("\n"), { timeout: 10_000 })
        .toContain("the launcher did not use the load launch's fast path: hello-load.cjs is missing or cannot be read");
      expect(await none.plugin.kill()).toEqual({ code: 0, signal: null });
    });

    it("a fast path of another build that is run anyway (a launcher that checks only the bundle) makes the plugin refuse its transport, naming the files", async () => {
      const recordingFile = join(fastDir, "hello.load.json");
      const { build } = JSON.parse(readFileSync(recordingFile, "utf8")) as { build: string };
      expect(build).toMatch(/^[0-9a-f]{64}$/);
      const other = build.replace(/./g, (c) => (c === "0" ? "1" : "0"));
      const dir = withPrelude("fast-foreign-transport", (t) => t.split(build).join(other));
      // The bundle's last line vouches for it too, as a launcher that checks only that would accept.
      const bundleFile = join(dir, "hello.cjs");
      writeFileSync(bundleFile, readFileSync(bundleFile, "latin1").replace(new RegExp(`${build}\\n$`), `${other}\n`), "latin1");
      // The recording vouches for that fast path, as one of its own build would.
      const recording = JSON.parse(readFileSync(recordingFile, "utf8")) as Record<string, unknown>;
      recording.build = other;
      recording.preludeSha256 = createHash("sha256").update(readFileSync(join(dir, "hello-load.cjs"))).digest("hex");
      writeFileSync(join(dir, "hello.load.json"), JSON.stringify(recording));
      const foreign = await launch(dir);
      expect((await foreign.plugin.basePlugin.pluginInfo({})).name).toBe("hello");
      expect(foreign.log).toContain("hello: load recording used");
      // The plugin loads for this call, and ends start-up rather than serve on that transport.
      await expect(foreign.plugin.driver.capabilities({})).rejects.toThrow();
      expect(await foreign.plugin.kill()).toMatchObject({ code: 1 });
      await expect
        .poll(() => foreign.log.join("\n"), { timeout: 10_000 })
        .toContain(
          `the load launch's fast path that started this process (${join(dir, "hello-load.cjs")}) is from another build than this plugin`,
        );
      expect(foreign.log.join("\n")).toContain(`or remove ${join(dir, "hello-load.cjs")} and ${join(dir, "hello.load.json")}`);
      expect(foreign.log.join("\n")).not.toContain("TypeError");
    });

    it("gives every request it does not hold to the plugin with the bytes received, so the answers are the plugin's", async () => {
      for (const [path, body] of otherCalls) {
        const fast = await launch(fastDir);
        const plain = await launch(plainDir);
        const answer = await raw(fast.plugin, path, body);
        expect(answer, `${path} ${body.toString("hex")}`).toEqual(
          await raw(plain.plugin, path, body),
        );
        expect(fast.log, `${path} ${body.toString("hex")}`).toContain(
          "hello: code cache used",
        );
        await Promise.all([fast.plugin.kill(), plain.plugin.kill()]);
      }
    }, 120_000);
  });

  it("leaves the load launch's fast path out with --no-load-recording, and when servePlugin's options cannot be replayed", () => {
    const files = (dir: string) => ({
      prelude: existsSync(join(work, dir, "hello-load.cjs")),
      recording: existsSync(join(work, dir, "hello.load.json")),
      leftover: existsSync(join(work, dir, "hello.load.json.transport")),
    });
    const none = { prelude: false, recording: false, leftover: false };
    let r = bundle("hello.mjs", "--out", "no-load", "--name", "hello");
    expect(r.code).toBe(0);
    expect(files("no-load")).toEqual({
      prelude: true,
      recording: true,
      leftover: false,
    });
    // Bundled again without it: nothing of an earlier run stays behind.
    r = bundle(
      "hello.mjs",
      "--out",
      "no-load",
      "--name",
      "hello",
      "--no-load-recording",
    );
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(files("no-load")).toEqual(none);
    expect(report(join(work, "no-load", "hello")).stderr).toMatch(
      /^hello: code cache used\n/,
    );

    r = bundle("hello-env.mjs", "--out", "env", "--name", "hello");
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(
      "nomadkit: warning: servePlugin gets an env of its own or exitProcess: false, which a launcher cannot replay, so its load launches start the whole plugin",
    );
    expect(files("env")).toEqual(none);
    expect(report(join(work, "env", "hello")).stderr).toMatch(
      /^hello: code cache used\n/,
    );
  });

  /** `nomadkit bundle` of the reference driver (it launches task executors) into `work/<out>`. */
  const bundleRawexec = (out: string, name: string, ...flags: string[]) =>
    bundle(
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
    expect(Object.keys(pkg.dependencies)).toEqual(["@peculiar/x509"]);
    expect(Object.keys(pkg.optionalDependencies)).toEqual(["node-pty"]);
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

  it("makes only the launcher executable: Nomad's plugin loader launches every executable file in plugin_dir", () => {
    const r = bundle("exec-stub.mjs", "--out", "exec-stub", "--name", "exec-stub");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const dir = join(work, "exec-stub");
    const modes = Object.fromEntries(
      readdirSync(dir).map((f) => [f, (statSync(join(dir, f)).mode & 0o777).toString(8)]),
    );
    expect(modes).toEqual({
      "exec-stub": "755",
      "exec-stub.cjs": "644",
      "exec-stub.cjs.v8cache": "644",
      "exec-stub.load.json": "644",
      "exec-stub-load.cjs": "644",
      // Started as `node <file>` by launchExecutor (the code-cache run above did).
      "exec-stub-executor": "644",
      "exec-stub-executor.cjs": "644",
      "exec-stub-executor.cjs.v8cache": "644",
      "package.json": "644",
    });
  });

  it("says in the plugin's log when the task executor files next to it are not those bundled with it", async () => {
    /** The plugin in `dir` launched as Nomad does, after its first call: its log once the executor files are checked. */
    const check = async (dir: string) => {
      const log: { level: string; message: string; fields: Record<string, unknown> }[] = [];
      const plugin = await launchPlugin(process.execPath, [join(dir, "exec-stub")], {
        logger: (e) => log.push({ level: e.level, message: e.message, fields: e.fields }),
      });
      try {
        // Not recorded: the plugin itself serves it (its servePlugin checks the files).
        expect((await plugin.driver.capabilities({})).capabilities).toBeDefined();
        await expect
          .poll(() => log.find((e) => e.message.includes("task executor files")), { timeout: 10_000 })
          .toBeDefined();
      } finally {
        expect(await plugin.kill()).toEqual({ code: 0, signal: null });
      }
      return log.filter((e) => e.message.includes("task executor files"));
    };
    // The bundle of the test above, as written and in copies with other executor files.
    const intact = join(away, "exec-stub-intact");
    cpSync(join(work, "exec-stub"), intact, { recursive: true });
    expect(await check(intact)).toEqual([
      { level: "debug", message: "the task executor files are those bundled with this plugin", fields: { files: 2 } },
    ]);
    // Another build's executor bundle, and no executor launcher (copied with `exec-stub exec-stub.*`, say).
    const mixed = join(away, "exec-stub-mixed");
    cpSync(join(work, "exec-stub"), mixed, { recursive: true });
    appendFileSync(join(mixed, "exec-stub-executor.cjs"), "\n// another build\n");
    rmSync(join(mixed, "exec-stub-executor"));
    const [warning, ...more] = await check(mixed);
    expect(more).toEqual([]);
    expect(warning!.level).toBe("warn");
    expect(warning!.message).toContain(
      "the task executor files next to the plugin's launcher are not those `nomadkit bundle` wrote with this plugin",
    );
    expect(warning!.fields).toEqual({
      differ: [join(mixed, "exec-stub-executor.cjs")],
      missing: [join(mixed, "exec-stub-executor")],
    });
  });

  it("names the file or flag when it cannot bundle", () => {
    let r = bundle("missing.mjs");
    expect(r.code).toBe(1);
    expect(r.stderr).toBe("nomadkit: bundle missing.mjs: no such file\n");

    r = bundle("hello.mjs", "--name", "../hello");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      'nomadkit: --name "../hello": expected a file name',
    );

    for (const name of ["hel\nlo", "package.json", "node_modules"]) {
      r = bundle("hello.mjs", "--name", name, "--out", "names", "--no-code-cache");
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`nomadkit: --name ${JSON.stringify(name)}:`);
    }

    r = bundle("hello.mjs", "--out", "a-file");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("nomadkit: --out a-file:");

    // Under /proc mkdir says ENOENT below an existing parent: Node's recursive mkdirSync spun forever.
    const started = Date.now();
    r = bundle("hello.mjs", "--out", "/proc/nk-no-such/out");
    expect(Date.now() - started).toBeLessThan(60_000);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^nomadkit: --out \/proc\/nk-no-such\/out: cannot create the directory \(ENOENT/);

    r = bundle("syntax.mjs", "--out", "syntax");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("nomadkit: bundle syntax.mjs: esbuild failed:");
    expect(r.stderr).toMatch(/syntax\.mjs:2:\d+/);
    expect(existsSync(join(work, "syntax"))).toBe(false);

    r = bundle("hello.mjs", "--out", "forced", "--executor", "--no-code-cache");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      "nomadkit: --executor: hello.mjs does not use @nomadkit/server's launchExecutor",
    );
    expect(existsSync(join(work, "forced"))).toBe(false);
  });

  it("refuses, before writing anything, a --name Node.js would not run the CommonJS launcher under", () => {
    // An .mjs launcher died at its first line (require is not defined in ES module scope) and the
    // directory was left half written.
    for (const [name, as] of [
      ["hello-driver.mjs", "an ES module (.mjs)"],
      ["hello-driver.mts", "an ES module (TypeScript) (.mts)"],
      ["hello-driver.json", "JSON (.json)"],
      ["hello-driver.node", "a native addon (.node)"],
      ["hello-driver.cts", "TypeScript (.cts)"],
      // Node goes by the ending: a name that is only the extension is an ES module too.
      [".mjs", "an ES module (.mjs)"],
    ] as const) {
      const r = bundle("hello.mjs", "--out", "dist/x", "--name", name);
      expect(r.code).toBe(1);
      expect(r.stderr).toBe(
        `nomadkit: --name ${JSON.stringify(name)}: Node.js would load the launcher, a CommonJS script, as ${as}; use a name without that extension, e.g. ${JSON.stringify(name === ".mjs" ? "driver" : "hello-driver")}, or ending in .js or .cjs\n`,
      );
      expect(existsSync(join(work, "dist"))).toBe(false);
    }
    // What it runs under: .js, .cjs and extensions Node.js gives no meaning (a version, say).
    for (const name of ["hello-driver.js", "hello-driver.cjs", "hello-driver-1.2"]) {
      const r = bundle("hello.mjs", "--out", "dist/ok", "--name", name);
      expect(r.code, r.stderr).toBe(0);
      const launcher = join(work, "dist/ok", name);
      const info = nomadkit(away, "info", launcher, "--json");
      expect(info.code, info.stderr).toBe(0);
      expect(JSON.parse(info.stdout)).toMatchObject({ name: "hello" });
      // The load recording was made and is used by a start under that name, and so is the
      // plugin's code cache once the plugin itself runs (no recording).
      expect(report(launcher).stderr).toContain(`${name}: load recording used`);
      rmSync(join(work, "dist/ok", `${name}.load.json`));
      expect(report(launcher).stderr).toContain(`${name}: code cache used`);
    }
  });

  it("refuses to write over its entry or over a project's own launcher-named file or package.json", () => {
    const project = join(work, "project");
    mkdirSync(join(project, "src"), { recursive: true });
    const source = readFileSync(join(work, "hello.mjs"), "utf8");
    writeFileSync(join(project, "plugin.cjs"), source);
    writeFileSync(join(project, "src/hello.mjs"), source);
    const pkg = '{"name":"my-project","scripts":{"test":"vitest"}}\n';
    writeFileSync(join(project, "package.json"), pkg);
    // The bundle of plugin.cjs is plugin.cjs.
    let r = bundle("project/plugin.cjs", "--out", "project", "--no-code-cache");
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      "nomadkit: --out project: the bundle would overwrite its entry project/plugin.cjs; choose another --out or --name\n",
    );
    expect(readFileSync(join(project, "plugin.cjs"), "utf8")).toBe(source);
    // The project's package.json.
    r = bundle("project/src/hello.mjs", "--out", "project", "--no-code-cache");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("package.json exists and was not written by nomadkit bundle");
    expect(readFileSync(join(project, "package.json"), "utf8")).toBe(pkg);
    expect(existsSync(join(project, "hello.cjs"))).toBe(false); // nothing written
    // A file of the project where the launcher would go.
    writeFileSync(join(project, "notes"), "mine\n");
    r = bundle("project/src/hello.mjs", "--out", "project", "--name", "notes", "--no-code-cache");
    expect(r.stderr).toContain("notes exists and was not written by nomadkit bundle");
    expect(readFileSync(join(project, "notes"), "utf8")).toBe("mine\n");
    // The entry's own directory (no package.json of its own), or one above it: the bundle's
    // package.json ("type": "commonjs") would turn the ES module sources there into CommonJS.
    const sources = join(work, "sources");
    mkdirSync(join(sources, "src"), { recursive: true });
    writeFileSync(join(sources, "src/hello.mjs"), source);
    for (const out of ["sources/src", "sources"]) {
      r = bundle("sources/src/hello.mjs", "--out", out, "--name", "plug", "--no-code-cache");
      expect(r.code).toBe(1);
      expect(r.stderr).toBe(
        `nomadkit: --out ${out} --name plug: the directory holds the entry sources/src/hello.mjs, and the bundle's package.json ("type": "commonjs") would make the sources there CommonJS; bundle into a directory of its own, e.g. --out dist/plugin\n`,
      );
    }
    expect(readdirSync(join(sources, "src"))).toEqual(["hello.mjs"]); // nothing written
    expect(readdirSync(sources)).toEqual(["src"]);
    // A directory below the entry's is the bundle's own.
    r = bundle("sources/src/hello.mjs", "--out", "sources/src/dist", "--no-code-cache");
    expect(r.code).toBe(0);
    // Its own earlier output is replaced.
    r = bundle("hello.mjs", "--out", "again", "--no-code-cache");
    expect(r.code).toBe(0);
    r = bundle("hello.mjs", "--out", "again", "--no-code-cache");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
  });

  it("leaves no load recording when the plugin's load-launch answers differ from run to run", () => {
    // A version with the process id in it: every launch answers PluginInfo differently.
    expect(readmeDriver).toContain('version: "0.1.0",');
    writeFileSync(join(work, "hello-pid.mjs"), readmeDriver.replace('version: "0.1.0",', "version: `0.1.${process.pid}`,"));
    const r = bundle("hello-pid.mjs", "--out", "varying", "--name", "hello");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("nomadkit: bundle: the plugin answered Nomad's load launch differently in two runs (PluginInfo differs: does it depend on the process, the time or chance?)");
    expect(existsSync(join(work, "varying/hello.load.json"))).toBe(false);
    expect(existsSync(join(work, "varying/hello-load.cjs"))).toBe(false);
  });

  it("warns in the plugin's log when it answers otherwise than its load recording, which follows the environment it was bundled in", async () => {
    writeFileSync(
      join(work, "hello-envver.mjs"),
      readmeDriver.replace('version: "0.1.0",', 'version: process.env.HELLO_VERSION ?? "0.1.0",'),
    );
    const r = bundle("hello-envver.mjs", "--out", "envver", "--name", "hello");
    expect(r.code, r.stderr).toBe(0);
    const launch = async (env: Record<string, string>) => {
      const log: PluginLogEntry[] = [];
      const plugin = await launchPlugin(process.execPath, [join(work, "envver/hello")], {
        env: { NOMADKIT_LOG_LEVEL: "debug", ...env },
        logger: (e) => log.push(e),
        startTimeoutMs: 60_000,
      });
      try {
        // Answered by the fast path, from the recording.
        const version = (await plugin.basePlugin.pluginInfo({})).pluginVersion;
        // Any other call loads the plugin, which then asks itself the recorded requests.
        await plugin.driver.capabilities({});
        const done = (e: PluginLogEntry) =>
          e.message.startsWith("the load recording's answer differs") || e.message === "the plugin answers as its load recording";
        while (!log.some(done)) await new Promise((r) => setTimeout(r, 50));
        return { version, log: log.filter(done) };
      } finally {
        expect(await plugin.kill()).toEqual({ code: 0, signal: null });
      }
    };
    const same = await launch({});
    expect(same.version).toBe("0.1.0");
    expect(same.log.map((e) => e.level)).toEqual(["debug"]);
    // Where the answer differs, the load launch still gets the recorded one, and the plugin says so.
    const other = await launch({ HELLO_VERSION: "9.9.9" });
    expect(other.version).toBe("0.1.0");
    expect(other.log).toMatchObject([
      { level: "warn", fields: { method: "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo", status: "0" } },
    ]);
  }, 120_000);

  it("refuses a name whose files are another plugin's in the same directory (x's fast path is x-load's bundle)", () => {
    let r = bundle("hello.mjs", "--out", "neighbours", "--name", "hello-load", "--no-code-cache");
    expect(r.code, r.stderr).toBe(0);
    const theirs = readFileSync(join(work, "neighbours/hello-load.cjs"));
    // hello's files: hello-load.cjs (its fast path) is hello-load's bundle.
    r = bundle("hello.mjs", "--out", "neighbours", "--name", "hello");
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      "nomadkit: --out neighbours --name hello: the directory holds the Nomad plugin hello-load, whose hello-load.cjs would be hello's too; bundle into another directory or choose another --name\n",
    );
    expect(readFileSync(join(work, "neighbours/hello-load.cjs"))).toEqual(theirs);
    expect(existsSync(join(work, "neighbours/hello"))).toBe(false); // nothing written
    // The other way round: hello first, then hello-executor, whose launcher is hello's executor's name.
    r = bundle("hello.mjs", "--out", "neighbours2", "--name", "hello", "--no-code-cache");
    expect(r.code, r.stderr).toBe(0);
    r = bundle("hello.mjs", "--out", "neighbours2", "--name", "hello-executor", "--no-code-cache");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("the directory holds the Nomad plugin hello, whose hello-executor.cjs would be hello-executor's too");
    // Its own earlier output (hello's executor launcher, were there one) is no neighbour: a rerun works.
    r = bundle("hello.mjs", "--out", "neighbours2", "--name", "hello", "--no-code-cache");
    expect(r.code, r.stderr).toBe(0);
  });

  it("names the package of a native addon to leave outside, and lists it in package.json once it is", () => {
    let r = bundle("addon.mjs", "--out", "addon");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('No loader is configured for ".node" files');
    expect(r.stderr).toContain(
      "a native addon cannot be bundled: leave its package outside with --external fake-addon",
    );
    r = bundle("addon.mjs", "--out", "addon", "--external", "fake-addon");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("(PluginInfo: addon 0.0.1)");
    const pkg = JSON.parse(
      readFileSync(join(work, "addon/package.json"), "utf8"),
    );
    expect(pkg.dependencies["fake-addon"]).toBe("2.3.4");
    expect(pkg.optionalDependencies).toEqual({ "node-pty": expect.any(String) });
  });

  it("lists a package left outside as optional only when every package importing it declares it optional", () => {
    // A driver package of its own whose package.json makes the addon optional, and that also
    // imports node-pty itself (which @nomadkit/server's optional declaration must not cover).
    const dir = join(work, "own-package");
    mkdirSync(dir);
    writeFileSync(
      join(dir, "package.json"),
      JSON.stringify({ name: "own-driver", private: true, optionalDependencies: { "fake-addon": "2.3.4" } }),
    );
    writeFileSync(join(dir, "addon.mjs"), readFileSync(join(work, "addon.mjs"), "utf8"));
    writeFileSync(
      join(dir, "pty.mjs"),
      readmeDriver.replace("\nvoid serveDriver(driver);", '\nexport const pty = () => import("node-pty");\nvoid serveDriver(driver);'),
    );
    let r = bundle("own-package/addon.mjs", "--out", "own-addon", "--external", "fake-addon", "--no-code-cache");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    let pkg = JSON.parse(readFileSync(join(work, "own-addon/package.json"), "utf8"));
    expect(pkg.optionalDependencies).toEqual({ "fake-addon": "2.3.4", "node-pty": expect.any(String) });
    expect(pkg.dependencies).toEqual({ "@peculiar/x509": expect.any(String) });

    r = bundle("own-package/pty.mjs", "--out", "own-pty", "--no-code-cache");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    pkg = JSON.parse(readFileSync(join(work, "own-pty/package.json"), "utf8"));
    expect(Object.keys(pkg.dependencies)).toEqual(["@peculiar/x509", "node-pty"]);
    expect(pkg.optionalDependencies).toBeUndefined();

    // With executors too: the executor bundle's optional node-pty does not make the plugin's own import optional.
    writeFileSync(
      join(dir, "pty-executor.mjs"),
      readmeDriver.replace(
        "\nvoid serveDriver(driver);",
        '\nimport { launchExecutor } from "@nomadkit/server/executor";\nexport const launch = launchExecutor;\nexport const pty = () => import("node-pty");\nvoid serveDriver(driver);',
      ),
    );
    r = bundle("own-package/pty-executor.mjs", "--out", "own-pty-executor", "--no-code-cache");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(existsSync(join(work, "own-pty-executor/pty-executor-executor.cjs"))).toBe(true);
    pkg = JSON.parse(readFileSync(join(work, "own-pty-executor/package.json"), "utf8"));
    expect(Object.keys(pkg.dependencies)).toEqual(["@peculiar/x509", "node-pty"]);
    expect(pkg.optionalDependencies).toBeUndefined();
  });

  it("fails when the bundled plugin cannot start as Nomad starts it, showing its stderr; --no-code-cache skips that run", () => {
    let r = bundle("throws.mjs", "--out", "throws", "--start-timeout", "30000");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      "nomadkit: bundle: the bundled plugin did not start as Nomad starts it",
    );
    expect(r.stderr).toContain("driver configuration missing: HELLO_HOME");
    expect(r.stderr).toContain("--no-code-cache");
    // Nothing of the failed bundle is left: not the directory it made (parents included), and in a
    // directory that was there only what was there before.
    expect(existsSync(join(work, "throws"))).toBe(false);
    r = bundle("throws.mjs", "--out", "fresh/a/throws", "--start-timeout", "30000");
    expect(r.code).toBe(1);
    expect(existsSync(join(work, "fresh"))).toBe(false);
    mkdirSync(join(work, "kept"));
    writeFileSync(join(work, "kept/notes.txt"), "mine\n");
    r = bundle("throws.mjs", "--out", "kept", "--start-timeout", "30000");
    expect(r.code).toBe(1);
    expect(readdirSync(join(work, "kept"))).toEqual(["notes.txt"]);
    expect(readFileSync(join(work, "kept/notes.txt"), "utf8")).toBe("mine\n");

    r = bundle("throws.mjs", "--out", "throws", "--no-code-cache");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    for (const f of ["throws", "throws.cjs"])
      expect(existsSync(join(work, "throws", f)), f).toBe(true);
  });

  it("keeps an earlier bundle in the directory whole and running until a new one is complete", async () => {
    let r = bundle("hello.mjs", "--out", "rebundle", "--name", "hello");
    expect(r.code, r.stderr).toBe(0);
    const dir = join(work, "rebundle");
    writeFileSync(join(dir, "notes.txt"), "mine\n");
    const snapshot = () =>
      Object.fromEntries(
        readdirSync(dir)
          .sort()
          .map((f) => [f, createHash("sha256").update(readFileSync(join(dir, f))).digest("hex")]),
      );
    const before = snapshot();
    const stillRuns = async () => {
      expect(snapshot()).toEqual(before);
      const plugin = await launchPlugin(process.execPath, [join(dir, "hello")], { startTimeoutMs: 60_000 });
      try {
        expect((await plugin.basePlugin.pluginInfo({})).name).toBe("hello");
      } finally {
        expect(await plugin.kill()).toEqual({ code: 0, signal: null });
      }
    };
    // An entry esbuild refuses.
    r = bundle("syntax.mjs", "--out", "rebundle", "--name", "hello");
    expect(r.code).toBe(1);
    await stillRuns();
    // A plugin that fails its code-cache run, after the bundle, launcher and package.json are made.
    r = bundle("throws.mjs", "--out", "rebundle", "--name", "hello", "--start-timeout", "30000");
    expect(r.code).toBe(1);
    await stillRuns();
    // A load recording refused after the code cache is made (answers that vary from run to run).
    writeFileSync(join(work, "hello-pid2.mjs"), readmeDriver.replace('version: "0.1.0",', "version: `0.1.${process.pid}`,"));
    r = bundle("hello-pid2.mjs", "--out", "rebundle", "--name", "hello");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("differently in two runs");
    await stillRuns();
    // Interrupted while the new plugin starts: the entry says it is running, then never serves.
    const marker = join(work, "hang-started");
    writeFileSync(
      join(work, "hang.mjs"),
      `import { writeFileSync } from "node:fs";\nwriteFileSync(${JSON.stringify(marker)}, "");\nsetInterval(() => {}, 1 << 30);\n`,
    );
    const child = spawn(process.execPath, [bin, "bundle", "hang.mjs", "--out", "rebundle", "--name", "hello", "--start-timeout", "600000"], {
      cwd: work,
      stdio: "ignore",
    });
    const exited = new Promise<number | null>((done) => child.on("exit", (code) => done(code)));
    // Bundling comes first (esbuild), then the plugin's start: no bound but the test's.
    while (!existsSync(marker)) await new Promise((r) => setTimeout(r, 50));
    child.kill("SIGTERM");
    expect(await exited).toBe(128 + 15);
    await stillRuns();
    // A bundle that completes replaces it, and leaves the directory's other files alone.
    r = bundle("hello.mjs", "--out", "rebundle", "--name", "hello", "--no-load-recording");
    expect(r.code, r.stderr).toBe(0);
    expect(readdirSync(dir).sort()).toEqual(["hello", "hello.cjs", "hello.cjs.v8cache", "notes.txt", "package.json"]);
    expect(readFileSync(join(dir, "notes.txt"), "utf8")).toBe("mine\n");
  }, 240_000);

  it("names the installed files in stack traces of code compiled from the code cache, not the staging directory it was made in", async () => {
    // V8 keeps the file name a code cache was made with: a script compiled from it names that file.
    writeFileSync(
      join(work, "hello-stack.mjs"),
      readmeDriver.replace(
        "\nvoid serveDriver(driver);",
        '\nprocess.stderr.write("STACK " + new Error("where").stack.split("\\n")[1].trim() + "\\n");\nvoid serveDriver(driver);',
      ),
    );
    const r = bundle("hello-stack.mjs", "--out", "stack", "--name", "hello-stack", "--no-load-recording");
    expect(r.code, r.stderr).toBe(0);
    const dir = join(work, "stack");
    // A staging directory a killed run left is removed by the next run.
    mkdirSync(join(dir, ".hello-stack.bundle-left"));
    writeFileSync(join(dir, ".hello-stack.bundle-left", "hello-stack.cjs"), "");
    expect(bundle("hello-stack.mjs", "--out", "stack", "--name", "hello-stack", "--no-load-recording").code).toBe(0);
    expect(readdirSync(dir).filter((f) => f.startsWith("."))).toEqual([]);
    const ran = report(join(dir, "hello-stack"));
    expect(ran.stderr).toContain("hello-stack: code cache used");
    expect(ran.stderr).toMatch(/^STACK at /m);
    expect(ran.stderr).toContain(`(${join(dir, "hello-stack.cjs")}:`);
  });

  it("runs a CommonJS entry as the main module: `if (require.main === module) serveDriver(...)` serves", async () => {
    // The launcher's module was require.main: the code-cache run failed (exit 0 before the
    // handshake) and, without it, the plugin did nothing.
    let r = bundle("main-check.cjs", "--out", "main-check");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    r = bundle("main-check.cjs", "--out", "main-check-plain", "--no-code-cache");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    // From the load launch's fast path (handing over to the bundle on Fingerprint) and without one.
    for (const dir of ["main-check", "main-check-plain"]) {
      const plugin = await launchPlugin(process.execPath, [join(work, dir, "main-check")]);
      try {
        expect((await plugin.basePlugin.pluginInfo({})).name).toBe("main-check");
        expect(await fingerprintAttributes(plugin)).toEqual({ "driver.main-check.main": join(work, dir, "main-check.cjs") });
      } finally {
        expect(await plugin.kill()).toEqual({ code: 0, signal: null });
      }
    }
  }, 120_000);

  it("gives an ES module entry's import.meta.url, dirname and filename in the CommonJS bundle: the bundle file's", async () => {
    // import.meta was {}: createRequire(import.meta.url) at the top level failed the code-cache run.
    const r = bundle("meta.mjs", "--out", "meta");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    // They name where the bundle is, wherever it was made.
    const copy = join(away, "meta");
    cpSync(join(work, "meta"), copy, { recursive: true });
    const bundleFile = join(copy, "meta.cjs");
    const plugin = await launchPlugin(process.execPath, [join(copy, "meta")]);
    try {
      expect((await plugin.basePlugin.pluginInfo({})).name).toBe("meta");
      expect(await fingerprintAttributes(plugin)).toEqual({
        "driver.meta.url": pathToFileURL(bundleFile).href,
        "driver.meta.file": bundleFile,
        "driver.meta.dirname": dirname(bundleFile),
        "driver.meta.filename": bundleFile,
        "driver.meta.resolved": bundleFile,
      });
    } finally {
      expect(await plugin.kill()).toEqual({ code: 0, signal: null });
    }
  }, 120_000);

  it("shows esbuild's warnings when the bundled plugin then fails to start", () => {
    const r = bundle("meta-resolve.mjs", "--out", "meta-resolve");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("nomadkit: bundle: the bundled plugin did not start as Nomad starts it");
    expect(r.stderr).toContain("import_meta.resolve is not a function");
    expect(r.stderr).toContain('esbuild warned while bundling:\n▲ [WARNING] "import.meta" is not available with the "cjs" output format');
    expect(r.stderr).toMatch(/meta-resolve\.mjs:2:\d+/);
  });

  it("starts the bundled executor with the @nomadkit/server it was bundled from, which the entry need not resolve", async () => {
    // The SDK only as a dependency of a package of the driver's own, in that package's
    // node_modules (as pnpm or npm's linked strategy lay it out), outside the repo.
    const project = join(away, "indirect");
    const kit = join(project, "node_modules/driver-kit");
    mkdirSync(join(kit, "node_modules/@nomadkit"), { recursive: true });
    symlinkSync(join(root, "packages/server"), join(kit, "node_modules/@nomadkit/server"));
    writeFileSync(
      join(kit, "package.json"),
      JSON.stringify({ name: "driver-kit", version: "1.0.0", type: "module", main: "index.js", dependencies: { "@nomadkit/server": "*" } }),
    );
    writeFileSync(
      join(kit, "index.js"),
      'export { defineDriver, serveDriver } from "@nomadkit/server";\nexport { launchExecutor } from "@nomadkit/server/executor";\n',
    );
    writeFileSync(
      join(project, "main.mjs"),
      'import { defineDriver, launchExecutor, serveDriver } from "driver-kit";\n' +
        "export const launch = launchExecutor;\n" +
        `void serveDriver(${stubDriver("indirect")});\n`,
    );
    const out = join(away, "indirect-out");
    const r = bundle(join(project, "main.mjs"), "--out", out, "--name", "indirect");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    // The executor's code-cache run launched it (launchExecutor, one process, Shutdown).
    expect(existsSync(join(out, "indirect-executor.cjs.v8cache"))).toBe(true);
    expect(report(join(out, "indirect-executor")).stderr).toContain("indirect-executor: code cache used");
    const plugin = await launchPlugin(process.execPath, [join(out, "indirect")]);
    try {
      expect((await plugin.basePlugin.pluginInfo({})).name).toBe("indirect");
    } finally {
      expect(await plugin.kill()).toEqual({ code: 0, signal: null });
    }
  }, 120_000);

  it("exiting at once (a second signal) during the code-cache run kills the bundled plugin and removes what the bundle made", async () => {
    // It left the plugin running for good (reparented to init), with its socket directory, and the
    // staging directory in --out.
    const pidFile = join(work, "stuck.pid");
    const stopping = join(work, "stuck.stopping");
    writeFileSync(
      join(work, "stuck.mjs"),
      'import { writeFileSync } from "node:fs";\nimport { defineDriver, serveDriver } from "@nomadkit/server";\n' +
        `writeFileSync(${JSON.stringify(pidFile)}, String(process.pid));\n` +
        // A shutdown that never ends: the run's Shutdown, then the clean-up's kill, wait for it.
        `void serveDriver(${stubDriver("stuck", `shutdown() { writeFileSync(${JSON.stringify(stopping)}, ""); return new Promise(() => {}); }, `)}, { shutdownTimeoutMs: 600000 });\n`,
    );
    const tmp = mkdtempSync(join(tmpdir(), "nk-bundle-tmp-"));
    const child = spawn(process.execPath, [bin, "bundle", "stuck.mjs", "--out", "stuck", "--name", "stuck"], {
      cwd: work,
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, TMPDIR: tmp },
    });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((done) => child.on("exit", (code) => done(code)));
    let pid = 0;
    try {
      // Bundling comes first (esbuild), then the code-cache run: no bound but the test's.
      while (!existsSync(stopping) && child.exitCode === null) await new Promise((r) => setTimeout(r, 50));
      expect(existsSync(stopping), stderr).toBe(true);
      pid = Number(readFileSync(pidFile, "utf8"));
      child.kill("SIGTERM");
      while (!stderr.includes("stopping what was started") && child.exitCode === null) await new Promise((r) => setTimeout(r, 20));
      expect(child.kill("SIGTERM")).toBe(true);
      expect(await exited, stderr).toBe(128 + 15);
      await until(() => !alive(pid));
      expect(readdirSync(tmp)).toEqual([]);
      expect(existsSync(join(work, "stuck")), "--out, which the bundle made").toBe(false);
    } finally {
      if (pid > 0 && alive(pid)) process.kill(pid, "SIGKILL");
      if (child.exitCode === null) child.kill("SIGKILL");
      rmSync(tmp, { recursive: true, force: true });
    }
  }, 120_000);
});

