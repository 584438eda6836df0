import { encode } from "@msgpack/msgpack";
import type { Spec } from "@nomadkit/protocol/hclspec";

/**
 * Shapes a JSON config like Nomad's HCL decoder shapes an operator's block before encoding it: for
 * a top-level object spec every declared attribute is present, missing ones take their declared
 * default (a `Default` spec with a literal) or null. Keys the schema does not declare are kept, so
 * the plugin gets the chance to reject them.
 *
 * @example
 * ```ts
 * shapeConfig(schema, { command: "/bin/sleep" }); // { command: "/bin/sleep", args: null }
 * ```
 */
export function shapeConfig(spec: Spec | undefined, value: Record<string, unknown>): Record<string, unknown> {
  if (spec?.block.case !== "object") return { ...value };
  const out: Record<string, unknown> = {};
  for (const [name, attr] of Object.entries(spec.block.value.attributes)) {
    out[name] = name in value ? value[name] : defaultOf(attr);
  }
  for (const [k, v] of Object.entries(value)) if (!(k in out)) out[k] = v;
  return out;
}

/** What Nomad's decoder yields for an absent attribute or block of this spec. */
function defaultOf(spec: Spec | undefined): unknown {
  switch (spec?.block.case) {
    case "default":
      return literal(spec.block.value.default) ?? defaultOf(spec.block.value.primary);
    case "literal":
      return literal(spec);
    case "blockList":
    case "blockSet":
      return [];
    case "blockMap":
      return {};
    default:
      return null;
  }
}

function literal(spec: Spec | undefined): unknown {
  if (spec?.block.case !== "literal") return null;
  try {
    // HCL literals of the simple kinds (bool, number, quoted string, lists and maps of those) are JSON.
    return JSON.parse(spec.block.value.value) as unknown;
  } catch {
    return null;
  }
}

/**
 * Encodes a shaped config as msgpack, the bytes Nomad puts in `msgpack_config` / `msgpack_driver_config`.
 *
 * @example
 * ```ts
 * const { spec } = await plugin.driver.taskConfigSchema({});
 * const bytes = encodeConfig(spec, { command: "/bin/sleep", args: ["60"] });
 * ```
 */
export function encodeConfig(spec: Spec | undefined, value: Record<string, unknown>): Uint8Array {
  return encode(shapeConfig(spec, value));
}
