// Versioning and release: in a throwaway copy of the workspace manifests, a changeset for one
// package moves every public package to the same new version (the changesets `fixed` group),
// rewrites the internal pins and changelogs, and the release script then accepts exactly that tag.
// Also checks that the release workflow publishes with provenance on a tag through that script,
// and that the breaking-change escape hatch it relies on is documented where PR authors look.
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { publicPackages, repoRoot, tempDir } from "../packaging/lib.mjs";

const read = (...p: string[]) => readFileSync(path.join(...p), "utf8");
const readJson = (...p: string[]) => JSON.parse(read(...p));

const rootPkg = readJson(repoRoot, "package.json");
const PUBLIC = publicPackages().map((p: { name: string }) => p.name).sort();

describe("changesets: lock-step versions", () => {
  let copy: string;

  beforeAll(() => {
    copy = tempDir("nomadkit-release-");
    // What changesets reads: the root manifest, its config and every workspace's manifest and
    // changelog; plus the release script (it resolves the repo from its own location).
    for (const f of ["package.json", ".changeset/config.json", "tools/packaging/lib.mjs", "tools/packaging/publish.mjs"]) {
      mkdirSync(path.dirname(path.join(copy, f)), { recursive: true });
      cpSync(path.join(repoRoot, f), path.join(copy, f));
    }
    for (const ws of rootPkg.workspaces as string[]) {
      mkdirSync(path.join(copy, ws), { recursive: true });
      for (const f of ["package.json", "CHANGELOG.md"]) {
        if (existsSync(path.join(repoRoot, ws, f))) cpSync(path.join(repoRoot, ws, f), path.join(copy, ws, f));
      }
    }
    symlinkSync(path.join(repoRoot, "node_modules"), path.join(copy, "node_modules"));
    const git = (...args: string[]) => execFileSync("git", args, { cwd: copy, stdio: "ignore" });
    git("init", "-q", "-b", "main");
    git("add", "-A");
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "copy");
  });

  afterAll(() => {
    if (copy) rmSync(copy, { recursive: true, force: true });
  });

  const changeset = (args: string[]) =>
    execFileSync(process.execPath, [path.join(repoRoot, "node_modules/@changesets/cli/bin.js"), ...args], {
      cwd: copy,
      encoding: "utf8",
      env: { ...process.env, CI: "1" },
    });
  const publish = (tag: string) =>
    spawnSync(process.execPath, [path.join(copy, "tools/packaging/publish.mjs"), "--tag", tag, "--plan"], { cwd: copy, encoding: "utf8" });

  it("the fixed group is exactly the public packages", () => {
    const config = readJson(repoRoot, ".changeset/config.json");
    expect(config.fixed).toHaveLength(1);
    expect([...config.fixed[0]].sort()).toEqual(PUBLIC);
    expect(config.access).toBe("public");
    expect(config.privatePackages).toEqual({ version: false, tag: false });
  });

  it("the current version is releasable as its tag, and no other", () => {
    const version = readJson(repoRoot, "packages/protocol/package.json").version;
    const ok = publish(`v${version}`);
    expect(ok.stderr).toBe("");
    expect(ok.status).toBe(0);
    const plan = JSON.parse(ok.stdout);
    // Dependency order: nothing is published before what it depends on.
    const order = plan.map((s: { name: string }) => s.name);
    expect(order.indexOf("@nomadkit/protocol")).toBeLessThan(order.indexOf("@nomadkit/client"));
    expect(order.indexOf("@nomadkit/client")).toBeLessThan(order.indexOf("@nomadkit/server"));
    expect(order.indexOf("@nomadkit/conformance")).toBeLessThan(order.indexOf("@nomadkit/cli"));
    for (const step of plan) expect(step.args).toEqual(expect.arrayContaining(["publish", "--provenance", "--access", "public"]));

    const wrong = publish("v99.0.0");
    expect(wrong.status).toBe(1);
    expect(wrong.stderr).toContain("the tag says 99.0.0");
  });

  it("a changeset for one package versions all public packages together", () => {
    writeFileSync(
      path.join(copy, ".changeset/brave-nomads-sing.md"),
      '---\n"@nomadkit/client": minor\n---\n\nlaunchPlugin learns to fly.\n',
    );
    // Pending changesets block a release until they are versioned.
    const before = readJson(copy, "packages/client/package.json").version;
    expect(publish(`v${before}`).stderr).toContain("pending changesets");

    changeset(["version"]);
    const versions = new Map<string, string>();
    for (const ws of rootPkg.workspaces as string[]) {
      const pkg = readJson(copy, ws, "package.json");
      // Every workspace, private ones too, pins the new version, so npm keeps linking the workspaces.
      const next = readJson(copy, "packages/client/package.json").version;
      for (const [dep, range] of Object.entries({ ...pkg.dependencies, ...pkg.devDependencies })) {
        if (PUBLIC.includes(dep)) expect(`${pkg.name} -> ${dep}@${range}`).toBe(`${pkg.name} -> ${dep}@${next}`);
      }
      if (pkg.private) {
        // Private workspaces are not versioned.
        expect(pkg.version, pkg.name).toBe(readJson(repoRoot, ws, "package.json").version);
        continue;
      }
      versions.set(pkg.name, pkg.version);
      const log = read(copy, ws, "CHANGELOG.md");
      expect(log.startsWith(`# ${pkg.name}\n`), `${pkg.name} changelog heading`).toBe(true);
      expect(log).toContain(`## ${pkg.version}`);
    }
    expect([...versions.keys()].sort()).toEqual(PUBLIC);
    expect(new Set(versions.values()).size).toBe(1);
    const next = versions.get("@nomadkit/client")!;
    expect(next).not.toBe(before);
    expect(read(copy, "packages/client/CHANGELOG.md")).toContain("launchPlugin learns to fly.");
    expect(existsSync(path.join(copy, ".changeset/brave-nomads-sing.md"))).toBe(false);

    // ... and exactly that version can now be released.
    const ok = publish(`v${next}`);
    expect(ok.stderr).toBe("");
    expect(ok.status).toBe(0);
    expect(publish(`v${before}`).status).toBe(1);
  });
});

describe("release workflow and policy", () => {
  const workflow = read(repoRoot, ".github/workflows/release.yml");

  it("publishes on a version tag, with an OIDC token for provenance, after the tests", () => {
    expect(workflow).toMatch(/on:\s*\n\s*push:\s*\n\s*tags:\s*\[\s*"v\*\.\*\.\*"\s*\]/);
    expect(workflow).toMatch(/id-token:\s*write/);
    expect(workflow).toMatch(/needs:\s*test/);
    expect(workflow).toContain("npm test");
    expect(workflow).toContain("node tools/packaging/publish.mjs --tag \"$GITHUB_REF_NAME\"");
    expect(workflow).toMatch(/NPM_CONFIG_PROVENANCE:\s*"true"/);
    // The workflow's Node matches the engines floor the packages promise.
    expect(workflow).toMatch(/node-version:\s*20/);
  });

  it("the breaking-change escape hatch is recorded and documented, not duplicated", () => {
    expect(rootPkg.scripts.baseline).toBeDefined();
    expect(existsSync(path.join(repoRoot, "tools/gates/baseline/HISTORY.md"))).toBe(true);
    const readme = read(repoRoot, "README.md");
    expect(readme).toContain('npm run baseline -- "');
    expect(readme).toContain("HISTORY.md");
    const changesets = read(repoRoot, ".changeset/README.md");
    expect(changesets).toContain("npm run baseline");
    expect(changesets).toContain("HISTORY.md");
  });

  it("the root and every public package carry the Apache-2.0 license and a changelog", () => {
    const license = read(repoRoot, "LICENSE");
    expect(license).toContain("Apache License");
    expect(license).toContain("Version 2.0, January 2004");
    for (const p of publicPackages()) {
      expect(read(p.dir, "LICENSE"), p.name).toBe(license);
      expect(p.pkg.files, p.name).toContain("CHANGELOG.md");
      expect(existsSync(path.join(p.dir, "CHANGELOG.md")), p.name).toBe(true);
    }
  });
});
