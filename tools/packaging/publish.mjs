#!/usr/bin/env node
// Publishes every public package for a release tag (run by .github/workflows/release.yml).
//
//   node tools/packaging/publish.mjs --tag v0.2.0 [--plan] [--dry-run]
//
// Refuses unless the tag is exactly `v<version>` of every public package (they move in lock-step),
// internal dependencies pin that same version, and no changeset is pending (the tag must come after
// `npm run version-packages`). Publishes in dependency order with `npm publish --provenance
// --access public`; versions already on the registry are skipped, so a failed run can be re-run.
// Prereleases (`1.2.0-rc.1`) go to the `next` dist-tag. `--plan` prints what would happen as JSON
// and touches nothing; `--dry-run` passes --dry-run to npm publish.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { publicPackages, repoRoot } from "./lib.mjs";

/** Why `tag` cannot be published from the working tree, as a list of problems (empty: fine). */
export function releaseProblems(tag, packages = publicPackages(), pendingChangesets = pending()) {
  const problems = [];
  const m = /^v(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)$/.exec(tag ?? "");
  if (!m) return [`tag ${JSON.stringify(tag)} is not v<semver> (e.g. v0.2.0)`];
  const version = m[1];
  for (const p of packages) {
    if (p.version !== version) problems.push(`${p.name} is at ${p.version}, the tag says ${version}`);
    for (const [dep, range] of Object.entries({ ...p.pkg.dependencies, ...p.pkg.peerDependencies })) {
      if (packages.some((q) => q.name === dep) && range !== version) {
        problems.push(`${p.name} depends on ${dep}@${range}, not the release version ${version}`);
      }
    }
  }
  if (pendingChangesets.length) {
    problems.push(`pending changesets (${pendingChangesets.join(", ")}): run \`npm run version-packages\` and tag that commit`);
  }
  return problems;
}

/** Changeset files not yet consumed by `changeset version`. */
function pending() {
  return readdirSync(path.join(repoRoot, ".changeset")).filter((f) => f.endsWith(".md") && f !== "README.md");
}

/** The npm publish command lines for `version`, in dependency order. */
export function publishPlan(version, packages = publicPackages(), { dryRun = false } = {}) {
  const distTag = version.includes("-") ? "next" : "latest";
  return packages.map((p) => ({
    name: p.name,
    version: p.version,
    args: ["publish", "-w", p.rel, "--provenance", "--access", "public", "--tag", distTag, ...(dryRun ? ["--dry-run"] : [])],
  }));
}

function npm(args, opts = {}) {
  return spawnSync("npm", args, { cwd: repoRoot, encoding: "utf8", ...opts });
}

function main(argv) {
  const arg = (name) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const tag = arg("--tag") ?? process.env.GITHUB_REF_NAME;
  const planOnly = argv.includes("--plan");
  const dryRun = argv.includes("--dry-run");
  const problems = releaseProblems(tag);
  if (problems.length) {
    console.error(`publish: refusing to release ${tag}:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    process.exit(1);
  }
  const plan = publishPlan(tag.slice(1), undefined, { dryRun });
  if (planOnly) {
    process.stdout.write(JSON.stringify(plan, null, 2) + "\n");
    return;
  }
  for (const step of plan) {
    // Idempotent re-runs: a version on the registry is immutable, skip it.
    const seen = npm(["view", `${step.name}@${step.version}`, "version"]);
    if (seen.status === 0 && seen.stdout.trim() === step.version) {
      console.log(`${step.name}@${step.version}: already published, skipped`);
      continue;
    }
    console.log(`${step.name}@${step.version}: npm ${step.args.join(" ")}`);
    const r = npm(step.args, { stdio: "inherit" });
    if (r.status !== 0) {
      console.error(`publish: ${step.name}@${step.version} failed; fix and re-run (published packages are skipped)`);
      process.exit(1);
    }
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main(process.argv.slice(2));
