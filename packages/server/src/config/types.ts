/**
 * HCL type expressions (`"string"`, `"list(string)"`, `"map(number)"`, `"object({a=string})"`, ...):
 * the type-level mapping that gives decoded config its TypeScript type, and cty's JSON type notation.
 * The runtime parser is `@nomadkit/client/hcl`'s, shared with the host side (`@nomadkit/conformance`);
 * that entry point imports nothing else, so the plugin does not load the host runtime for it.
 */
import type { HclType } from "@nomadkit/client/hcl";

export { parseHclType, formatHclType, type HclType } from "@nomadkit/client/hcl";

/**
 * The HCL type expressions an attribute may declare. Collections nest: `list(map(string))`.
 * `object(...)` and `tuple(...)` are accepted and validated at run time; their TypeScript type is
 * loose (`Record<string, unknown>` / `unknown[]`).
 */
export type HclTypeExpr =
  | "string"
  | "number"
  | "bool"
  | "any"
  | `list(${string})`
  | `set(${string})`
  | `map(${string})`
  | `object(${string})`
  | `tuple(${string})`;

/**
 * `S` without spaces, tabs and line breaks, so `"map( string )"` and a type written over several
 * lines map like `"map(string)"`. (Comments in a type are accepted at run time, but its value is
 * then typed loosely.)
 */
export type StripSpaces<S extends string> = S extends `${infer A} ${infer B}`
  ? StripSpaces<`${A}${B}`>
  : S extends `${infer A}\t${infer B}`
    ? StripSpaces<`${A}${B}`>
    : S extends `${infer A}\n${infer B}`
      ? StripSpaces<`${A}${B}`>
      : S extends `${infer A}\r${infer B}`
        ? StripSpaces<`${A}${B}`>
        : S;

/** {@link HclValue} of a type expression that has no spaces. */
export type ValueOfStripped<S extends string> = S extends "string"
  ? string
  : S extends "number"
    ? number
    : S extends "bool"
      ? boolean
      : S extends "any"
        ? unknown
        : S extends `list(${infer E})`
          ? ValueOfStripped<E>[]
          : S extends `set(${infer E})`
            ? ValueOfStripped<E>[]
            : S extends `map(${infer E})`
              ? Record<string, ValueOfStripped<E>>
              : S extends `object(${string})`
                ? Record<string, unknown>
                : S extends `tuple(${string})`
                  ? unknown[]
                  : unknown;

/**
 * The TypeScript type of a decoded value of HCL type expression `S`: `"list(string)"` → `string[]`,
 * `"map(number)"` → `Record<string, number>`. Sets decode to arrays, each distinct element once
 * (as in a cty set).
 */
export type HclValue<S extends string> = ValueOfStripped<StripSpaces<S>>;

// The primitive type names of a type expression; cty's JSON notation writes `any` as "dynamic".
const PRIMITIVES = new Set(["string", "number", "bool", "any"]);

/** Deepest cty type accepted (hostile input must not exhaust the stack). */
const MAX_TYPE_DEPTH = 256;

/**
 * Parse cty's JSON type notation (`"string"`, `["list","string"]`, `["object",{"a":"number"}]`,
 * `"dynamic"`), which prefixes dynamically typed (`any`) values in Nomad's msgpack. Returns
 * undefined for anything unrecognised; throws a RangeError for a type nested deeper than 256.
 */
export function parseCtyJsonType(json: unknown, depth = 0): HclType | undefined {
  if (depth > MAX_TYPE_DEPTH) throw new RangeError("type nested too deeply");
  if (typeof json === "string") {
    if (json === "dynamic") return { kind: "any" };
    return PRIMITIVES.has(json) ? { kind: json as "string" } : undefined;
  }
  if (!Array.isArray(json) || json.length !== 2 || typeof json[0] !== "string") return undefined;
  const [kind, arg] = json as [string, unknown];
  switch (kind) {
    case "list":
    case "set":
    case "map": {
      const elem = parseCtyJsonType(arg, depth + 1);
      return elem === undefined ? undefined : { kind, elem };
    }
    case "object": {
      if (typeof arg !== "object" || arg === null || Array.isArray(arg)) return undefined;
      const attrs = new Map<string, HclType>();
      for (const [k, v] of Object.entries(arg)) {
        const t = parseCtyJsonType(v, depth + 1);
        if (t === undefined) return undefined;
        attrs.set(k, t);
      }
      return { kind: "object", attrs };
    }
    case "tuple": {
      if (!Array.isArray(arg)) return undefined;
      const elems: HclType[] = [];
      for (const v of arg) {
        const t = parseCtyJsonType(v, depth + 1);
        if (t === undefined) return undefined;
        elems.push(t);
      }
      return { kind: "tuple", elems };
    }
    default:
      return undefined;
  }
}
