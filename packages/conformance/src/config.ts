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

function defaultOf(spec: Spec): unknown {
  if (spec.block.case !== "default") return null;
  const d = spec.block.value.default;
  if (d?.block.case !== "literal") return null;
  try {
    // HCL literals of the simple kinds (bool, number, quoted string, lists of those) are JSON.
    return JSON.parse(d.block.value.value) as unknown;
  } catch {
    return null;
  }
}

/** Encodes a shaped config as msgpack, the bytes Nomad puts in `msgpack_config` / `msgpack_driver_config`. */
export function encodeConfig(spec: Spec | undefined, value: Record<string, unknown>): Uint8Array {
  return encode(shapeConfig(spec, value));
}
