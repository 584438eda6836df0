/** Plugin options of protoc-gen-nomadkit (protoplugin's own options, like target, are handled upstream). */

/** Parsed options. */
export interface Options {
  /** What to generate: typed clients or server handler interfaces + register helpers. */
  kind: "client" | "server";
  /**
   * Module the generated code imports its runtime from. Defaults to `@nomadkit/client/runtime`
   * (client) or `@nomadkit/server/runtime` (server). A path starting with `./` or `../` is relative
   * to the output root (used inside the nomadkit repo, where the runtime sits next to `gen/`).
   */
  runtimeImport: string;
}

/** Parse `kind=client|server` and `runtime_import=<module>`; anything else is an error. */
export function parseOptions(raw: { key: string; value: string }[]): Options {
  let kind: Options["kind"] | undefined;
  let runtimeImport: string | undefined;
  const seen = new Set<string>();
  for (const { key, value } of raw) {
    // Given twice (one buf.gen.yaml entry's opt list, or opt and a template's): which one was meant?
    if ((key === "kind" || key === "runtime_import") && seen.has(key)) throw new Error(`option ${key} is given more than once (${key}=${value} repeats it)`);
    seen.add(key);
    switch (key) {
      case "kind":
        if (value !== "client" && value !== "server") {
          throw new Error(`option kind=${value}: must be "client" or "server"`);
        }
        kind = value;
        break;
      case "runtime_import":
        if (value === "") throw new Error("option runtime_import: must name a module");
        runtimeImport = value;
        break;
      default:
        throw new Error(`unknown option ${key}=${value} (known: kind=client|server, runtime_import=<module>)`);
    }
  }
  if (kind === undefined) throw new Error("option kind is required: kind=client or kind=server");
  return { kind, runtimeImport: runtimeImport ?? `@nomadkit/${kind}/runtime` };
}
