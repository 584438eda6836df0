/**
 * protoc-gen-nomadkit: generates typed nomadkit clients (`kind=client`) or handler interfaces plus
 * `registerX` helpers (`kind=server`) for every service in the input files. All generated methods
 * delegate to one runtime object (`@nomadkit/client/runtime` / `@nomadkit/server/runtime`), so
 * error and cancellation handling cannot differ between methods.
 *
 * @example
 * ```ts
 * import { runNodeJs } from "@bufbuild/protoplugin";
 * import { protocGenNomadkit } from "@nomadkit/protoc-gen-nomadkit";
 * runNodeJs(protocGenNomadkit);
 * ```
 * @module
 */
import { createEcmaScriptPlugin, runNodeJs, getComments, type Schema } from "@bufbuild/protoplugin";
import type { Plugin } from "@bufbuild/protoplugin";
import { generateClientFile } from "./client.js";
import { checkMethodNames } from "./names.js";
import { generateServerFile } from "./server.js";
import type { Options } from "./options.js";
import { parseOptions } from "./options.js";
import { version } from "./version.js";

export type { Options } from "./options.js";
export { parseOptions } from "./options.js";

/** The plugin version written into generated preambles: the `version` of this package's package.json. */
export { version };

/** The protoc plugin. Run it with `runNodeJs(protocGenNomadkit)` or the `protoc-gen-nomadkit` bin. */
export const protocGenNomadkit: Plugin = createEcmaScriptPlugin<Options>({
  name: "protoc-gen-nomadkit",
  version: `v${version}`,
  parseOptions,
  generateTs(schema: Schema<Options>) {
    for (const file of schema.files) {
      if (file.services.length === 0) continue;
      checkMethodNames(file);
      const f = schema.generateFile(`${file.name}_nomadkit.ts`);
      f.preamble(file);
      if (schema.options.kind === "client") generateClientFile(f, file, schema.options);
      else generateServerFile(f, file, schema.options);
    }
  },
});

/** Entry point of the `protoc-gen-nomadkit` bin: read a CodeGeneratorRequest on stdin, answer on stdout. */
export function main(): void {
  runNodeJs(protocGenNomadkit);
}

// Re-exported for custom generators built on the same helpers.
export { getComments };
