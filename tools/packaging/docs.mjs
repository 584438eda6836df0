#!/usr/bin/env node
// `npm run docs`: TypeDoc API reference for the public packages into docs/api (gitignored).
//
// Entry points are each package's exports map (every non-wildcard subpath, mapped from dist/esm
// back to src), so the reference documents exactly what users can import; the `./gen/*.js` deep
// imports are the same symbols the barrels re-export. Each package is converted on its own (its
// own tsconfig) and validated (every exported symbol documented, nothing referenced but not
// exported), then the packages are merged into one site, where links between packages resolve
// and are validated. Shared options live in the root typedoc.json. Any warning fails the run
// (exit 1). Run `npx turbo run build` first: packages import each other's declarations from dist.
//
//   node tools/packaging/docs.mjs [--out <dir>] [--json] [--only <name,...>]
//     --json  also write <dir>/api.json
//     --only  document just these packages (tools/test/docs.test.ts keeps the clean ones clean)
import { existsSync, mkdirSync, rmSync } from "node:fs";
import path from "node:path";
import { Application, Comment, OptionDefaults, ReflectionKind } from "typedoc";
import { publicPackages, repoRoot, tempDir } from "./lib.mjs";

/** Source entry points of a package: `./dist/esm/x.d.ts` -> `<dir>/src/x.ts`, per exports subpath. */
export function entryPoints(p) {
  const out = [];
  for (const [key, target] of Object.entries(p.pkg.exports ?? {})) {
    if (key.includes("*") || key === "./package.json") continue;
    const types = target?.import?.types ?? target?.types;
    const m = /^\.\/dist\/esm\/(.+)\.d\.ts$/.exec(types ?? "");
    if (!m) throw new Error(`${p.name}: export ${key} has no ./dist/esm/*.d.ts types target`);
    out.push(path.join(p.dir, "src", `${m[1]}.ts`));
  }
  return out;
}

// protobuf-es encodes descriptors and oneofs as anonymous object types in generated code; their
// members are a fixed convention, documented once here instead of in every generated file.
const GENERATED_MEMBERS = {
  methodKind: "protobuf-es: the RPC's kind (`unary`, `server_streaming`, `client_streaming` or `bidi_streaming`).",
  input: "protobuf-es: schema of the RPC's request message.",
  output: "protobuf-es: schema of the RPC's response message.",
  case: "protobuf-es oneof: name of the field that is set (`undefined` when none is).",
  value: "protobuf-es oneof: value of the field named by `case`.",
};

function documentGeneratedMembers(project) {
  for (const r of project.getReflectionsByKind(ReflectionKind.Property)) {
    const text = GENERATED_MEMBERS[r.name];
    const file = r.sources?.[0]?.fullFileName ?? "";
    if (!text || r.hasComment() || r.parent?.name !== "__type" || !/\/src\/gen\//.test(file)) continue;
    r.comment = new Comment([{ kind: "text", text }]);
  }
}

/**
 * The package's main entry (`.`) must open with a module comment that has an @example: it is the
 * first thing a user reads. Returns the problem, or undefined.
 */
function mainEntryProblem(p, project) {
  const main = entryPoints(p)[0];
  if (!main || !/\/index\.ts$/.test(main)) return undefined;
  const modules = project.children?.filter((c) => c.kindOf(ReflectionKind.Module)) ?? [];
  const mod = modules.length ? modules.find((m) => m.name === "index") : project;
  if (!mod?.comment) return `${p.name}: src/index.ts has no module comment (/** ... @module */ at the top)`;
  if (!mod.comment.blockTags.some((t) => t.tag === "@example")) return `${p.name}: the module comment of src/index.ts has no @example`;
  return undefined;
}

const shared = {
  options: path.join(repoRoot, "typedoc.json"),
  // protobuf-es and protoc-gen-nomadkit mark generated declarations with @generated.
  blockTags: [...OptionDefaults.blockTags, "@generated"],
  // READMEs show .proto, shell and TOML snippets too.
  highlightLanguages: [...new Set([...OptionDefaults.highlightLanguages, "proto", "sh", "shell", "toml", "hcl"])],
};

async function main(argv) {
  const outArg = argv.includes("--out") ? argv[argv.indexOf("--out") + 1] : undefined;
  const out = path.resolve(repoRoot, outArg ?? "docs/api");
  const only = argv.includes("--only") ? argv[argv.indexOf("--only") + 1].split(",") : undefined;
  const packages = publicPackages().filter((p) => !only || only.includes(p.name));
  for (const name of only ?? []) if (!packages.some((p) => p.name === name)) throw new Error(`docs: --only ${name}: not a public package`);
  const tmp = tempDir("nomadkit-docs-");
  const failures = [];
  try {
    const jsons = [];
    for (const p of packages) {
      const readme = path.join(p.dir, "README.md");
      const app = await Application.bootstrapWithPlugins({
        ...shared,
        name: p.name,
        entryPoints: entryPoints(p),
        tsconfig: path.join(p.dir, "tsconfig.json"),
        readme: existsSync(readme) ? readme : "none",
        // Links to other packages resolve after the merge; they are validated there.
        validation: { notExported: true, notDocumented: true, invalidPath: true, rewrittenLink: true, invalidLink: false },
      });
      const project = await app.convert();
      if (project) {
        documentGeneratedMembers(project);
        app.validate(project);
        const problem = mainEntryProblem(p, project);
        if (problem) app.logger.warn(problem);
      }
      if (!existsSync(readme)) app.logger.warn(`${p.name} has no README.md`);
      if (!project || app.logger.hasErrors() || app.logger.hasWarnings()) {
        failures.push(p.name);
        continue;
      }
      const json = path.join(tmp, `${p.name.replace(/[@/]/g, "_")}.json`);
      await app.generateJson(project, json);
      jsons.push(json);
    }
    if (failures.length) throw new Error(`docs: warnings or errors in ${failures.join(", ")} (see above)`);

    const app = await Application.bootstrapWithPlugins({
      ...shared,
      entryPointStrategy: "merge",
      entryPoints: jsons,
      out,
      readme: path.join(repoRoot, "tools/packaging/docs-index.md"),
    });
    const project = await app.convert();
    if (!project) throw new Error("docs: merging the packages failed (see above)");
    app.validate(project);
    if (app.logger.hasErrors() || app.logger.hasWarnings()) throw new Error("docs: warnings after merging the packages (see above)");
    rmSync(out, { recursive: true, force: true });
    mkdirSync(out, { recursive: true });
    await app.generateOutputs(project);
    if (argv.includes("--json")) await app.generateJson(project, path.join(out, "api.json"));
    if (app.logger.hasErrors() || app.logger.hasWarnings()) throw new Error("docs: warnings while rendering (see above)");
    console.log(`docs: ${path.relative(repoRoot, out) || out}/index.html`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

main(process.argv.slice(2)).catch((err) => {
  console.error(err.message ?? err);
  process.exit(1);
});
