// Downstream codegen, as a repository that builds on nomadkit does it: its own .proto imports
// Nomad's driver contract from the installed @nomadkit/protocol package (which ships proto/ and a
// buf.yaml), `buf generate` runs protoc-gen-es and protoc-gen-nomadkit from the fixture's own
// node_modules (local plugins, no BSR), TypeScript compiles the result against the installed
// packages, and a host launches the plugin and calls it with the generated client. The recipe is
// the one documented in packages/protocol/README.md.
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { copyFixture, installProject, node, outsideEnv, packAll, publicPackages, repoRoot, sh, tempDir, tsc } from "../packaging/lib.mjs";

interface Packed {
  name: string;
  pkg: Record<string, any>;
}

// Installs and compiles are slow on a busy 2-core machine; generous bounds, no timing assertions.
const INSTALL_TIMEOUT = 300_000;
const STEP_TIMEOUT = 240_000;
let work: string;
let repo: string;
let protocolTarball: string;

const rootPkg = JSON.parse(readFileSync(path.join(repoRoot, "package.json"), "utf8"));
const pin = (name: string) => {
  const v = rootPkg.devDependencies[name];
  if (!v) throw new Error(`${name} is not pinned in the root package.json`);
  return v;
};

/** Files under `dir`, as sorted paths relative to `base` with forward slashes. */
const walk = (dir: string, base = dir): string[] =>
  readdirSync(dir, { withFileTypes: true })
    .flatMap((e) =>
      e.isDirectory() ? walk(path.join(dir, e.name), base) : [path.relative(base, path.join(dir, e.name)).split(path.sep).join("/")],
    )
    .sort();

beforeAll(() => {
  work = tempDir("nomadkit-downstream-");
  const wanted = ["@nomadkit/protocol", "@nomadkit/client", "@nomadkit/server", "@nomadkit/protoc-gen-nomadkit"];
  const packed: Packed[] = packAll(
    path.join(work, "tarballs"),
    publicPackages().filter((p: Packed & { name: string }) => wanted.includes(p.name)),
  );
  const runtime = packed.filter((p) => p.name !== "@nomadkit/protoc-gen-nomadkit");
  const client = packed.find((p) => p.name === "@nomadkit/client")!;
  protocolTarball = (packed.find((p) => p.name === "@nomadkit/protocol") as Packed & { tarball: string }).tarball;
  repo = path.join(work, "acme-driver");
  copyFixture("downstream", repo);
  installProject(repo, {
    packed: runtime,
    devPacked: packed.filter((p) => p.name === "@nomadkit/protoc-gen-nomadkit"),
    registry: {
      "@bufbuild/protobuf": client.pkg.dependencies["@bufbuild/protobuf"],
      // Generated code imports Transport / ConnectRouter types from it.
      "@connectrpc/connect": client.pkg.dependencies["@connectrpc/connect"],
    },
    devRegistry: {
      "@bufbuild/buf": pin("@bufbuild/buf"),
      "@bufbuild/protoc-gen-es": pin("@bufbuild/protoc-gen-es"),
      "@types/node": pin("@types/node"),
    },
  });
}, INSTALL_TIMEOUT);

afterAll(() => {
  if (work && !process.env.NOMADKIT_KEEP_TMP) rmSync(work, { recursive: true, force: true });
});

describe("downstream codegen against the installed @nomadkit/protocol", () => {
  it("the installed package carries the contracts and a buf module root", () => {
    const proto = path.join(repo, "node_modules/@nomadkit/protocol");
    expect(readFileSync(path.join(proto, "buf.yaml"), "utf8")).toMatch(/modules:\s*\n\s*- path: proto/);
    expect(existsSync(path.join(proto, "proto/hashicorp/nomad/plugins/drivers/proto/driver.proto"))).toBe(true);
  });

  it("the README's table of import paths lists exactly the shipped contracts", () => {
    // Imports are written against these paths, which differ from Nomad's and go-plugin's trees.
    const proto = path.join(repo, "node_modules/@nomadkit/protocol");
    const readme = readFileSync(path.join(proto, "README.md"), "utf8");
    const table = readme.slice(readme.indexOf("| in this package (`proto/`) |"));
    const rows = [...table.matchAll(/^\| `([^`]+\.proto)` \|/gm)].map((m) => m[1]!);
    const expand = (p: string): string[] => {
      const m = /\{([^}]+)\}/.exec(p);
      return m ? m[1]!.split(",").map((alt) => p.replace(m[0], alt)) : [p];
    };
    expect(rows.flatMap(expand).sort()).toEqual(walk(path.join(proto, "proto")));
  });

  it("buf generate runs protoc-gen-es and protoc-gen-nomadkit from the fixture's node_modules", () => {
    // `npx buf` as a user would: node_modules/.bin (buf and both plugins) goes on PATH; nothing of
    // this repository is on it (outsideEnv).
    const env = outsideEnv();
    env.PATH = [path.join(repo, "node_modules/.bin"), env.PATH].join(path.delimiter);
    sh(path.join(repo, "node_modules/.bin/buf"), ["generate"], { cwd: repo, env });
    expect(walk(path.join(repo, "src/gen"))).toEqual(["acme/ext/v1/ext_nomadkit.ts", "acme/ext/v1/ext_pb.ts"]);
    expect(walk(path.join(repo, "src/gen-server"))).toEqual(["acme/ext/v1/ext_nomadkit.ts"]);

    // Nomad's messages come from the package, not from regenerated copies.
    const pb = readFileSync(path.join(repo, "src/gen/acme/ext/v1/ext_pb.ts"), "utf8");
    expect(pb).toContain('from "@nomadkit/protocol/gen/hashicorp/nomad/plugins/drivers/proto/driver_pb.js"');
    const client = readFileSync(path.join(repo, "src/gen/acme/ext/v1/ext_nomadkit.ts"), "utf8");
    expect(client).toContain('from "@nomadkit/client/runtime"');
    expect(client).toContain('from "@nomadkit/protocol/gen/hashicorp/nomad/plugins/base/proto/base_pb.js"');
    expect(client).toMatch(/export class ExtServiceClient\b/);
    const server = readFileSync(path.join(repo, "src/gen-server/acme/ext/v1/ext_nomadkit.ts"), "utf8");
    expect(server).toContain('from "@nomadkit/server/runtime"');
    // Its own messages from the client output directory (rewrite_imports ./acme/**:../gen), relative to the file.
    expect(server).toMatch(/from "(\.\.\/)+gen\/acme\/ext\/v1\/ext_pb\.js"/);
    expect(server).toMatch(/export function registerExtService\b/);
  }, STEP_TIMEOUT);

  it("generating from the installed contracts with the repository's buf.gen.yaml reproduces its committed src/gen", () => {
    // The shipped proto/ and the packed plugin, with the options nomadkit itself generates with:
    // what a downstream gets for Nomad's contracts is what the packages were built from.
    const env = outsideEnv();
    env.PATH = [path.join(repo, "node_modules/.bin"), env.PATH].join(path.delimiter);
    const out = path.join(work, "regen");
    const input = "node_modules/@nomadkit/protocol/proto";
    sh(path.join(repo, "node_modules/.bin/buf"), ["generate", input, "--template", path.join(repoRoot, "buf.gen.yaml"), "-o", out], { cwd: repo, env });
    for (const pkg of ["protocol", "client", "server"]) {
      const committed = path.join(repoRoot, "packages", pkg, "src/gen");
      const generated = path.join(out, "packages", pkg, "src/gen");
      expect(walk(generated), pkg).toEqual(walk(committed));
      for (const f of walk(committed)) expect(readFileSync(path.join(generated, f), "utf8"), `${pkg}/src/gen/${f}`).toBe(readFileSync(path.join(committed, f), "utf8"));
    }

    // With default options (the runtime from @nomadkit/client), for rawexec-host.ts.
    sh(path.join(repo, "node_modules/.bin/buf"), ["generate", input, "--template", "buf.gen.nomad.yaml"], { cwd: repo, env });
    expect(walk(path.join(repo, "src/nomad"))).toContain("hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.ts");
  }, STEP_TIMEOUT);

  it("buf lint with the README's buf.yaml lints the repository's own files, not Nomad's frozen names", () => {
    const r = spawnSync(path.join(repo, "node_modules/.bin/buf"), ["lint", "--error-format", "json"], { cwd: repo, env: outsideEnv(), encoding: "utf8" });
    const files = r.stdout.split("\n").filter(Boolean).map((l) => (JSON.parse(l) as { path: string }).path);
    // The fixture's own service reuses Nomad's messages, which STANDARD flags: lint does run.
    expect(files.length, r.stderr).toBeGreaterThan(0);
    expect(files.filter((f) => !f.startsWith("proto/"))).toEqual([]);
  }, STEP_TIMEOUT);

  it("the generated code type-checks (node16, strict, declarations of every package checked)", () => {
    node([tsc, "-p", "tsconfig.json"], { cwd: repo });
    expect(existsSync(path.join(repo, "dist/host.js"))).toBe(true);
  }, STEP_TIMEOUT);

  it("a host launches the plugin and calls it through the generated client", () => {
    const out = JSON.parse(node(["dist/host.js"], { cwd: repo, timeout: 120_000 }).trim().split("\n").pop()!);
    expect(out).toEqual({
      summary: "web (t-1) env=PORT labels=team:acme",
      running: true,
      watch: ["1:RUNNING", "2:RUNNING", "3:EXITED"],
      identify: { recoverable: true, message: "acme is not a real plugin" },
      exitCode: 0,
    });
  }, STEP_TIMEOUT);

  it("clients generated from the installed contracts call the reference driver (nomadkit-rawexec)", () => {
    const rawexec = path.join(repoRoot, "examples/rawexec-driver/bin/nomadkit-rawexec");
    const out = JSON.parse(node(["dist/rawexec-host.js", rawexec], { cwd: repo, timeout: 120_000 }).trim().split("\n").pop()!);
    expect(out).toEqual({ name: "nomadkit-rawexec", type: "DRIVER", sendSignals: true, health: "HEALTHY" });
  }, STEP_TIMEOUT);

  it("buf breaking, as the README's recipes run it: own contracts against the base, an upgrade against the previous tarball", () => {
    const buf = path.join(repo, "node_modules/.bin/buf");
    const run = (args: string[], cwd = repo) => spawnSync(buf, args, { cwd, env: outsideEnv(), encoding: "utf8" });
    const git = (...args: string[]) => sh("git", ["-c", "user.name=acme", "-c", "user.email=ci@acme.test", ...args], { cwd: repo });
    writeFileSync(path.join(repo, ".gitignore"), "node_modules\ndist\n");
    git("init", "-q", "-b", "main");
    git("add", "-A");
    git("commit", "-q", "-m", "base");

    // Why the README does not use the usual recipe: the base, read from git, has no node_modules.
    const naive = run(["breaking", "--against", ".git#branch=main"]);
    expect(naive.status).not.toBe(0);
    expect(naive.stderr).toContain("had no .proto files");

    // The README's recipe: a worktree of the base that borrows the installed contracts.
    const base = path.join(work, "proto-base");
    git("worktree", "add", "-q", "--detach", base, "main");
    symlinkSync(path.join(repo, "node_modules"), path.join(base, "node_modules"));
    const ext = path.join(repo, "proto/acme/ext/v1/ext.proto");
    const original = readFileSync(ext, "utf8");
    try {
      const same = run(["breaking", "--against", base]);
      expect(same.status, same.stdout + same.stderr).toBe(0);
      writeFileSync(ext, original.replace("map<string, string> labels = 2;", "map<string, string> tags = 2;"));
      const broken = run(["breaking", "--against", base]);
      expect(broken.status).not.toBe(0);
      expect(broken.stdout).toMatch(/proto\/acme\/ext\/v1\/ext\.proto:.*changed name from "labels" to "tags"/);
    } finally {
      writeFileSync(ext, original);
      git("worktree", "remove", "--force", base);
    }

    // An upgrade of @nomadkit/protocol, against the tarball of the version it replaces (here the
    // same tarball, and a copy of the installed package with a renamed field standing in for a
    // breaking release).
    const installed = path.join(repo, "node_modules/@nomadkit/protocol");
    const against = `${protocolTarball}#strip_components=1`;
    const unchanged = run(["breaking", installed, "--against", against], work);
    expect(unchanged.status, unchanged.stdout + unchanged.stderr).toBe(0);
    const next = path.join(work, "protocol-next");
    cpSync(installed, next, { recursive: true });
    const driver = path.join(next, "proto/hashicorp/nomad/plugins/drivers/proto/driver.proto");
    writeFileSync(driver, readFileSync(driver, "utf8").replace("string task_group_name = 13;", "string task_group = 13;"));
    const upgraded = run(["breaking", next, "--against", against], work);
    expect(upgraded.status).not.toBe(0);
    expect(upgraded.stdout).toContain('changed name from "task_group_name" to "task_group"');
  }, STEP_TIMEOUT);
});
