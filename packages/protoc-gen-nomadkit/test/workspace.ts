// A throwaway downstream project: .proto sources compiled by the repo's buf, protoc-gen-es and this
// plugin (from src, in-process) writing clients to gen/client and servers to gen/server, both with
// their default runtime imports, and a TypeScript program over the result. `@nomadkit/*` imports
// resolve to the workspace packages' sources (here through `paths`, in vitest through the aliases of
// vitest.config.ts), so neither needs the other packages built.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { create, fromBinary } from "@bufbuild/protobuf";
import {
  CodeGeneratorRequestSchema,
  FileDescriptorSetSchema,
  type FileDescriptorProto,
} from "@bufbuild/protobuf/wkt";
import type { Plugin } from "@bufbuild/protoplugin";
import ts from "typescript";
import { protocGenNomadkit } from "../src/index.js";

const require = createRequire(import.meta.url);
const { protocGenEs } = require("@bufbuild/protoc-gen-es/dist/cjs/src/protoc-gen-es-plugin.js") as { protocGenEs: Plugin };

/** The monorepo's root and its packages directory. */
const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));
const packages = join(repoRoot, "packages");

/** `@nomadkit/<pkg>/<subpath>` → that package's `src/<subpath>`, for TypeScript (vitest.config.ts does the same for vitest). */
const sourcePaths: Record<string, string[]> = Object.fromEntries(
  ["protocol", "client", "server"].map((p) => [`@nomadkit/${p}/*`, [join(packages, p, "src", "*")]]),
);

export interface Workspace {
  dir: string;
  /** Generated files, by path relative to `dir` (gen/client/x_nomadkit.ts, gen/server/x_pb.ts, ...). */
  files: Map<string, string>;
  /** Type errors of the generated code and any extra files written with `typecheck()`, by file relative to `dir`. */
  typecheck(extra?: Record<string, string>): Map<string, string[]>;
  remove(): void;
}

/** Compile `protos` (path under proto/ → source) with buf: every file, its imports and source info. */
export function compileProtos(dir: string, protos: Record<string, string>): FileDescriptorProto[] {
  for (const [name, source] of Object.entries(protos)) {
    mkdirSync(dirname(join(dir, "proto", name)), { recursive: true });
    writeFileSync(join(dir, "proto", name), source);
  }
  const out = join(dir, "image.binpb");
  const buf = require.resolve("@bufbuild/buf/bin/buf");
  const r = spawnSync(process.execPath, [buf, "build", join(dir, "proto"), "--as-file-descriptor-set", "-o", out], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`buf build failed: ${r.stderr}`);
  return fromBinary(FileDescriptorSetSchema, readFileSync(out)).file;
}

/** Run `plugin` in-process on `fileToGenerate`; the response's files, or its error thrown. */
export function runPlugin(plugin: Plugin, protoFile: FileDescriptorProto[], fileToGenerate: string[], parameter: string): Map<string, string> {
  const res = plugin.run(create(CodeGeneratorRequestSchema, { parameter, fileToGenerate, protoFile }));
  if (res.error) throw new Error(res.error);
  return new Map(res.file.map((f) => [f.name, f.content]));
}

/** Generate clients and servers for every file of `protos` into a fresh temp directory. */
export function createWorkspace(protos: Record<string, string>): Workspace {
  const dir = mkdtempSync(join(tmpdir(), "nk-protoc-gen-"));
  try {
    // Bare imports (@bufbuild/protobuf, @connectrpc/connect) resolve from the repo's node_modules.
    symlinkSync(join(repoRoot, "node_modules"), join(dir, "node_modules"), "dir");
    writeFileSync(join(dir, "package.json"), JSON.stringify({ private: true, type: "module" }) + "\n");
    const protoFile = compileProtos(dir, protos);
    const names = Object.keys(protos);
    const files = new Map<string, string>();
    for (const kind of ["client", "server"] as const) {
      const es = runPlugin(protocGenEs, protoFile, names, "target=ts,import_extension=js");
      const nk = runPlugin(protocGenNomadkit, protoFile, names, `kind=${kind},target=ts,import_extension=js`);
      for (const [name, content] of [...es, ...nk]) {
        const path = join("gen", kind, name);
        mkdirSync(dirname(join(dir, path)), { recursive: true });
        writeFileSync(join(dir, path), content);
        files.set(path, content);
      }
    }
    return {
      dir,
      files,
      typecheck: (extra = {}) => typecheck(dir, files, extra),
      remove: () => rmSync(dir, { recursive: true, force: true }),
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

/**
 * Type errors in the generated `_nomadkit.ts` files and in `extra`, under the repo's compiler options
 * plus noUnusedParameters (downstream projects may enable it; the repo enables noUnusedLocals).
 */
function typecheck(dir: string, files: Map<string, string>, extra: Record<string, string>): Map<string, string[]> {
  for (const [name, source] of Object.entries(extra)) writeFileSync(join(dir, name), source);
  const base = ts.readConfigFile(join(repoRoot, "tsconfig.base.json"), ts.sys.readFile);
  const { options } = ts.convertCompilerOptionsFromJson(base.config.compilerOptions, repoRoot);
  const roots = [...files.keys(), ...Object.keys(extra)].map((f) => join(dir, f));
  const program = ts.createProgram(roots, {
    ...options,
    noEmit: true,
    noUnusedParameters: true,
    paths: sourcePaths,
  });
  const checked = [...files.keys()].filter((f) => f.endsWith("_nomadkit.ts")).concat(Object.keys(extra));
  const errors = new Map<string, string[]>();
  for (const f of checked) {
    const sf = program.getSourceFile(join(dir, f));
    if (sf === undefined) throw new Error(`${f} is not part of the program`);
    const diags = [...program.getSyntacticDiagnostics(sf), ...program.getSemanticDiagnostics(sf)];
    errors.set(
      f,
      diags.map((d) => {
        const pos = d.start === undefined ? "" : `:${sf.getLineAndCharacterOfPosition(d.start).line + 1}`;
        return `${f}${pos}: ${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`;
      }),
    );
  }
  return errors;
}
