// The packages as a user gets them: `npm pack` every public package (what `npm publish` uploads),
// check what each tarball contains, then install the tarballs into a fresh project under the OS
// temp dir (no workspace links, nothing from this repo's node_modules; third-party packages come
// from the registry or npm's cache) and use them from ESM, CommonJS and TypeScript.
import { cpSync, existsSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { copyFixture, installProject, node, packAll, publicPackages, repoRoot, tempDir, tsc } from "../packaging/lib.mjs";
import { tarballProblems } from "../packaging/tarball.mjs";

interface Packed {
  name: string;
  version: string;
  rel: string;
  dir: string;
  pkg: Record<string, any>;
  tarball: string;
  files: string[];
}
interface Surface {
  [spec: string]: { file: string; exports: Record<string, string> };
}

// Installs and compiles are slow on a busy 2-core machine; generous bounds, no timing assertions.
const INSTALL_TIMEOUT = 300_000;
const COMPILE_TIMEOUT = 240_000;
const RUN_TIMEOUT = 120_000;
const EXPECTED_PACKAGES = [
  "@nomadkit/protocol",
  "@nomadkit/protoc-gen-nomadkit",
  "@nomadkit/client",
  "@nomadkit/server",
  "@nomadkit/conformance",
  "@nomadkit/cli",
];

let work: string;
let packed: Packed[];
let project: string;

beforeAll(() => {
  work = tempDir("nomadkit-packaging-");
  packed = packAll(path.join(work, "tarballs"));
  project = path.join(work, "consumer");
  copyFixture("consumer", project);
  const protobuf = packed.find((p) => p.name === "@nomadkit/protocol")!.pkg.dependencies["@bufbuild/protobuf"];
  const typesNode = JSON.parse(readFileSync(path.join(repoRoot, "package.json"), "utf8")).devDependencies["@types/node"];
  installProject(project, {
    packed,
    // What a consumer adds next to nomadkit itself: the protobuf runtime for messages, @types/node for TypeScript.
    registry: { "@bufbuild/protobuf": protobuf },
    devRegistry: { "@types/node": typesNode },
  });
}, INSTALL_TIMEOUT);

afterAll(() => {
  if (work && !process.env.NOMADKIT_KEEP_TMP) rmSync(work, { recursive: true, force: true });
});

describe("tarballs", () => {
  it("packs exactly the public packages, all at one version (lock-step)", () => {
    expect(packed.map((p) => p.name).sort()).toEqual([...EXPECTED_PACKAGES].sort());
    expect(new Set(packed.map((p) => p.version)).size).toBe(1);
    // Internal dependencies pin the same version, so a release can't mix versions.
    for (const p of packed) {
      for (const [dep, range] of Object.entries<string>(p.pkg.dependencies ?? {})) {
        if (dep.startsWith("@nomadkit/")) expect(`${p.name} -> ${dep}@${range}`).toBe(`${p.name} -> ${dep}@${p.version}`);
      }
    }
  });

  it.each(EXPECTED_PACKAGES)("%s contains only what is intended", (name) => {
    const p = packed.find((x) => x.name === name)!;
    expect(tarballProblems(p)).toEqual([]);
    // The LICENSE users get is the repository's.
    const installed = path.join(project, "node_modules", name, "LICENSE");
    expect(readFileSync(installed, "utf8")).toBe(readFileSync(path.join(repoRoot, "LICENSE"), "utf8"));
  });

  it("installs from the tarballs, not from a registry or a workspace link", () => {
    const lock = JSON.parse(readFileSync(path.join(project, "package-lock.json"), "utf8"));
    for (const p of packed) {
      const entry = lock.packages[`node_modules/${p.name}`];
      expect(entry, p.name).toBeDefined();
      expect(entry.link, p.name).toBeUndefined();
      expect(entry.resolved, p.name).toMatch(/^file:.*\.tgz$/);
      expect(entry.version).toBe(p.version);
    }
    // Only one copy of each nomadkit package (the overrides pin nested ones to the same tarball).
    const copies = Object.keys(lock.packages).filter((k) => /node_modules\/@nomadkit\//.test(k));
    expect(copies.sort()).toEqual(packed.map((p) => `node_modules/${p.name}`).sort());
  });
});

describe("ESM and CommonJS consumers", () => {
  let esm: Surface;
  let cjs: Surface;
  beforeAll(() => {
    const names = packed.map((p) => p.name);
    esm = JSON.parse(node(["surface.mjs", ...names], { cwd: project }));
    cjs = JSON.parse(node(["surface.cjs", ...names], { cwd: project }));
  });

  it("import and require reach every entry point, from the ESM and the CommonJS build respectively", () => {
    expect(Object.keys(esm).length).toBeGreaterThan(packed.length);
    expect(Object.keys(cjs).sort()).toEqual(Object.keys(esm).sort());
    for (const [spec, { file }] of Object.entries(esm)) {
      expect(file, spec).toMatch(/^node_modules\/@nomadkit\/[^/]+\/dist\/esm\//);
      expect(cjs[spec].file, spec).toBe(file.replace("/dist/esm/", "/dist/cjs/"));
    }
  });

  it("both builds export the same names with the same kinds", () => {
    for (const spec of Object.keys(esm)) expect(cjs[spec].exports, spec).toEqual(esm[spec].exports);
  });

  it("every package's main entry point exports something", () => {
    for (const p of packed) expect(Object.keys(esm[p.name].exports).length, p.name).toBeGreaterThan(0);
  });

  it("the error classes work across the ESM and CommonJS copies loaded in one process", () => {
    expect(JSON.parse(node(["dual-hazard.mjs"], { cwd: project }))).toEqual({
      distinctCopies: true,
      recoverable: true,
      recoverableBack: true,
      shutdown: true,
      cancellation: true,
      notConfused: true,
      launchError: true,
      environmentError: true,
      mixedSpec: { missing: 'field "a": required attribute is missing', wrongType: expect.stringMatching(/^field "cmd": /), badDefault: "refused" },
      subclassesKept: true,
    });
  });

  it("@nomadkit/protocol works from both module systems", () => {
    const expected = {
      json: { id: "t1", name: "web", env: { A: "1" } },
      driver: "hashicorp.nomad.plugins.drivers.proto.Driver",
      base: "hashicorp.nomad.plugins.base.proto.BasePlugin",
    };
    for (const script of ["protocol-smoke.mjs", "protocol-smoke.cjs"]) {
      const out = JSON.parse(node([script], { cwd: project }));
      expect(out, script).toMatchObject(expected);
      expect(out.methods, script).toBeGreaterThan(5);
    }
  });
});

describe("TypeScript consumer", () => {
  const compile = (tsconfig: string) => node([tsc, "-p", tsconfig], { cwd: project });

  beforeAll(() => {
    // The CommonJS variant compiles the same sources inside a "type": "commonjs" scope.
    cpSync(path.join(project, "ts"), path.join(project, "cjs/ts"), { recursive: true });
  });

  it.each([
    ["node16, ESM", "tsconfig.node16.json", "out/node16"],
    ["node16, CommonJS", "cjs/tsconfig.json", "cjs/out"],
    ["bundler", "tsconfig.bundler.json", "out/bundler"],
  ])("type-checks against the shipped declarations (moduleResolution %s)", (_label, tsconfig, out) => {
    compile(tsconfig);
    expect(existsSync(path.join(project, out, "host.js"))).toBe(true);
    expect(existsSync(path.join(project, out, "driver.js"))).toBe(true);
  }, COMPILE_TIMEOUT);

  // Hosts launch drivers built for the other module system too: a plugin is just a binary.
  it.each([
    ["out/node16/host.js", "cjs/out/driver.js"],
    ["cjs/out/host.js", "out/node16/driver.js"],
    ["out/bundler/host.js", "out/bundler/driver.js"],
  ])("%s launches %s and gets its PluginInfo", (host, driver) => {
    for (const f of [host, driver]) expect(existsSync(path.join(project, f)), `${f} (compiled above)`).toBe(true);
    const out = JSON.parse(node([host, path.join(project, driver)], { cwd: project, timeout: 120_000 }));
    expect(out).toEqual({
      name: "consumer-demo",
      version: "1.2.3",
      isDriver: true,
      apiVersions: ["v0.1.0"],
      hasCapabilities: true,
      exitCode: 0,
      shutdownErrorIsClass: true,
      extensionlessGen: "hashicorp.nomad.plugins.drivers.proto.TaskConfig",
    });
  }, RUN_TIMEOUT);
});

describe("installed bins", () => {
  const bin = (name: string) => path.join(project, "node_modules/.bin", name);

  it("every package bin is linked into node_modules/.bin", () => {
    for (const p of packed) {
      const bins = typeof p.pkg.bin === "string" ? { [p.name.split("/").pop()!]: p.pkg.bin } : (p.pkg.bin ?? {});
      for (const name of Object.keys(bins)) expect(existsSync(bin(name)), `${p.name}: ${name}`).toBe(true);
    }
  });

  it("nomadkit (the CLI) runs from the tarball and inspects the consumer's driver", () => {
    const cli = packed.find((p) => p.name === "@nomadkit/cli")!;
    expect(node([bin("nomadkit"), "--version"], { cwd: project }).trim()).toBe(cli.version);
    const driver = path.join(project, "out/node16/driver.js");
    expect(existsSync(driver), "compiled by the TypeScript consumer tests").toBe(true);
    const info = JSON.parse(node([bin("nomadkit"), "info", driver, "--json"], { cwd: project, timeout: RUN_TIMEOUT }));
    expect(info).toMatchObject({ type: "DRIVER", name: "consumer-demo", pluginVersion: "1.2.3", pluginApiVersions: ["v0.1.0"] });
  }, RUN_TIMEOUT);

  it("nomadkit bundle (from the tarball) bundles the consumer's driver against installed packages", () => {
    const out = node([bin("nomadkit"), "bundle", "ts/driver.ts", "--out", "plugin", "--name", "consumer-demo"], { cwd: project, timeout: RUN_TIMEOUT });
    expect(out).toContain("(PluginInfo: consumer-demo 1.2.3)");
    const plugin = path.join(project, "plugin/consumer-demo");
    expect(existsSync(`${plugin}.cjs.v8cache`), "code cache").toBe(true);
    const info = JSON.parse(node([bin("nomadkit"), "info", plugin, "--json"], { cwd: project, timeout: RUN_TIMEOUT }));
    expect(info).toMatchObject({ type: "DRIVER", name: "consumer-demo", pluginVersion: "1.2.3" });
  }, RUN_TIMEOUT);
});
