import { encode } from "@msgpack/msgpack";
import { parseHclType, type HclType } from "@nomadkit/client/hcl";
import type { Spec } from "@nomadkit/protocol/hclspec";

/**
 * Shapes a JSON config like Nomad's HCL decoder (hcldec) shapes an operator's block before encoding
 * it, through nested blocks too: every declared attribute is present; a missing one, or one set to
 * null, takes its declared default (a `Default` spec with a literal) or null; a missing block list
 * or map is empty; a primitive attribute's value, and each element of a list, set or map one (an
 * object's attributes, a tuple's elements), is converted to its declared type where HCL converts
 * (`"8080"` for a number, `5` for a string, `"true"` for a bool); a set holds each distinct element
 * once, as a cty set does (the first kept where it was), and so does a block set. Keys the schema does not declare are kept,
 * so the plugin gets the chance to reject them.
 *
 * @example
 * ```ts
 * shapeConfig(schema, { command: "/bin/sleep" }); // { command: "/bin/sleep", args: null }
 * ```
 */
export function shapeConfig(spec: Spec | undefined, value: Record<string, unknown>): Record<string, unknown> {
  const shaped = shape(spec, value);
  return isPlainObject(shaped) ? shaped : { ...value };
}

function shape(spec: Spec | undefined, value: unknown): unknown {
  if (value === undefined || value === null) return defaultOf(spec);
  switch (spec?.block.case) {
    case "object": {
      if (!isPlainObject(value)) return value; // a type for the plugin to judge
      const out: Record<string, unknown> = {};
      for (const [name, attr] of Object.entries(spec.block.value.attributes)) out[name] = shape(attr, value[name]);
      for (const [k, v] of Object.entries(value)) if (!(k in out)) out[k] = v;
      return out;
    }
    case "default":
      return shape(spec.block.value.primary, value);
    case "Attr": {
      const type = parseType(spec.block.value.type);
      return type === undefined ? value : convert(type, value);
    }
    case "blockValue":
      return shape(spec.block.value.nested, value);
    case "blockList": {
      const nested = spec.block.value.nested;
      return Array.isArray(value) ? value.map((v) => shape(nested, v)) : value;
    }
    case "blockSet": {
      // hcldec makes a cty set of the blocks: equal blocks are one (the first kept where it was).
      const nested = spec.block.value.nested;
      return Array.isArray(value) ? distinct(value.map((v) => shape(nested, v)), (v) => shapedKey(nested, v)) : value;
    }
    case "blockMap": {
      const nested = spec.block.value.nested;
      return isPlainObject(value) ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, shape(nested, v)])) : value;
    }
    default:
      return value;
  }
}

/** `values` without later repeats of an element's key. */
function distinct(values: unknown[], key: (v: unknown) => string): unknown[] {
  const seen = new Set<string>();
  return values.filter((v) => {
    const k = key(v);
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

/**
 * A shaped value as a string two values share exactly when cty's equality holds for them: an
 * attribute's by its type ({@link setKey}), a block's attribute by attribute, a nested block set's
 * as a set.
 */
function shapedKey(spec: Spec | undefined, v: unknown): string {
  if (v === null || v === undefined) return "~";
  switch (spec?.block.case) {
    case "object": {
      if (!isPlainObject(v)) return asIs(v);
      const attrs = spec.block.value.attributes;
      return `{${entryKeys(v, (k) => (k in attrs ? shapedKey(attrs[k], v[k]) : asIs(v[k])))}}`;
    }
    case "default":
      return shapedKey(spec.block.value.primary, v);
    case "Attr": {
      const type = parseType(spec.block.value.type);
      return type === undefined ? asIs(v) : setKey(type, v);
    }
    case "blockValue":
      return shapedKey(spec.block.value.nested, v);
    case "blockList": {
      const nested = spec.block.value.nested;
      return Array.isArray(v) ? `[${v.map((e) => shapedKey(nested, e)).join(";")}]` : asIs(v);
    }
    case "blockSet": {
      const nested = spec.block.value.nested;
      return Array.isArray(v) ? `{${[...new Set(v.map((e) => shapedKey(nested, e)))].sort().join(";")}}` : asIs(v);
    }
    case "blockMap": {
      const nested = spec.block.value.nested;
      return isPlainObject(v) ? `{${entryKeys(v, (k) => shapedKey(nested, v[k]))}}` : asIs(v);
    }
    default:
      return asIs(v);
  }
}

const NUMBER = /^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$/;

/** A number as cty writes it into a string (Go's 'f' format: never an exponent, 1e21 → "1000000000000000000000"). */
function ctyNumberString(n: number): string {
  const s = String(n);
  return /e/i.test(s) && Number.isFinite(n) ? n.toLocaleString("en-US", { useGrouping: false, maximumFractionDigits: 20 }) : s;
}

/** `type` parsed (`set(object({a=string}))`); undefined for what the parser does not take, left to the plugin. */
function parseType(type: string): HclType | undefined {
  try {
    return parseHclType(type);
  } catch (err) {
    if (err instanceof TypeError) return undefined;
    throw err;
  }
}

/**
 * cty's conversions between primitive types, the ones an HCL attribute gets, inside collections,
 * objects and tuples too (`list(string)` turns `[8080, true]` into `["8080", "true"]`, `map(string)`
 * each value), and a set's merging of equal elements; anything else is left for the plugin to judge.
 */
function convert(type: HclType, value: unknown): unknown {
  switch (type.kind) {
    case "list":
      return Array.isArray(value) ? value.map((v) => convert(type.elem, v)) : value;
    case "set": {
      if (!Array.isArray(value)) return value;
      return ctySetOrder(type.elem, distinct(value.map((e) => convert(type.elem, e)), (v) => setKey(type.elem, v)));
    }
    case "map":
      return isPlainObject(value) ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, convert(type.elem, v)])) : value;
    case "object":
      return isPlainObject(value)
        ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, type.attrs.has(k) ? convert(type.attrs.get(k)!, v) : v]))
        : value;
    case "tuple":
      return Array.isArray(value) ? value.map((v, i) => (i < type.elems.length ? convert(type.elems[i]!, v) : v)) : value;
    case "string":
      // cty holds every string in NFC (cty.StringVal normalizes), and Nomad encodes it so.
      if (typeof value === "string") return value.normalize("NFC");
      return typeof value === "number" ? ctyNumberString(value) : typeof value === "boolean" ? String(value) : value;
    case "number":
      return typeof value === "string" && NUMBER.test(value.trim()) ? Number(value) : value;
    case "bool":
      // cty's string to bool: "true" and "1", "false" and "0".
      return value === "true" || value === "1" ? true : value === "false" || value === "0" ? false : value;
    case "any":
      return value;
  }
}

/**
 * A set's elements in the order Nomad sends them: cty iterates a set of strings in byte order (of
 * UTF-8), of numbers ascending and of bools false first, and that is the order they are encoded
 * in. Other element types have an order of cty's own (by hash), left as given; so are sets holding
 * values not of their type (left for the plugin to refuse) or nulls.
 */
function ctySetOrder(elem: HclType, values: unknown[]): unknown[] {
  const kind = elem.kind;
  if (kind !== "string" && kind !== "number" && kind !== "bool") return values;
  const jsType = kind === "bool" ? "boolean" : kind;
  if (!values.every((v) => typeof v === jsType)) return values;
  if (kind === "string") return (values as string[]).map((v) => v.normalize("NFC")).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return [...(values as number[])].sort((a, b) => Number(a) - Number(b));
}

/**
 * A converted set element as a string two elements share exactly when cty's equality holds for
 * them: strings compared in NFC (cty normalizes them), numbers by value, objects attribute by
 * attribute (an absent attribute is null), maps entry by entry, lists and tuples in order, nested
 * sets as sets. A value not of its type (left for the plugin to refuse) is compared as it is.
 */
function setKey(type: HclType, v: unknown): string {
  if (v === null || v === undefined) return "~";
  switch (type.kind) {
    case "string":
      return typeof v === "string" ? JSON.stringify(v.normalize("NFC")) : asIs(v);
    case "number":
      // String(-0) is "0": equal numbers in cty.
      return typeof v === "number" ? `n${String(v)}` : asIs(v);
    case "bool":
      return typeof v === "boolean" ? (v ? "T" : "F") : asIs(v);
    case "list":
      return Array.isArray(v) ? `[${v.map((e) => setKey(type.elem, e)).join(";")}]` : asIs(v);
    case "tuple":
      return Array.isArray(v) ? `[${v.map((e, i) => (i < type.elems.length ? setKey(type.elems[i]!, e) : asIs(e))).join(";")}]` : asIs(v);
    case "set":
      return Array.isArray(v) ? `{${[...new Set(v.map((e) => setKey(type.elem, e)))].sort().join(";")}}` : asIs(v);
    case "map":
      return isPlainObject(v) ? `{${entryKeys(v, (k) => setKey(type.elem, v[k]))}}` : asIs(v);
    case "object": {
      if (!isPlainObject(v)) return asIs(v);
      const declared = [...type.attrs.keys()].sort().map((k) => setKey(type.attrs.get(k)!, v[k]));
      const extra = Object.keys(v).filter((k) => !type.attrs.has(k));
      return `<${declared.join(";")}|${entryKeys(Object.fromEntries(extra.map((k) => [k, v[k]])), (k) => asIs(v[k]))}>`;
    }
    case "any":
      return asIs(v);
  }
}

/** A value compared as given: its JSON shape, keys sorted. */
function asIs(v: unknown): string {
  if (v === null || v === undefined) return "~";
  if (Array.isArray(v)) return `[${v.map(asIs).join(";")}]`;
  if (isPlainObject(v)) return `{${entryKeys(v, (k) => asIs(v[k]))}}`;
  return `${typeof v}:${JSON.stringify(v)}`;
}

function entryKeys(o: Record<string, unknown>, key: (k: string) => string): string {
  return Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${key(k)}`)
    .join(";");
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
 * What Nomad's HCL decoder would refuse in an operator's config before any plugin sees it: keys the
 * schema does not declare ("Unsupported argument") and required attributes or blocks that are
 * missing ("Missing required argument"), in objects and in nested blocks. Values' types are left to
 * the plugin, which decodes them. Each problem names its path (`mount[1].target`). Empty when the
 * config fits, or without a schema.
 *
 * @example
 * ```ts
 * configProblems(schema, { command: "/bin/sleep", bogus: 1 });
 * // ['"bogus" is not declared (declared: args, command)']
 * ```
 */
export function configProblems(spec: Spec | undefined, value: unknown): string[] {
  const problems: string[] = [];
  checkValue(spec, value, "", problems);
  return problems;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const at = (path: string, key: string) => (path === "" ? key : `${path}.${key}`);

function checkValue(spec: Spec | undefined, value: unknown, path: string, problems: string[]): void {
  if (value === undefined || value === null) return;
  switch (spec?.block.case) {
    case "object": {
      if (!isPlainObject(value)) return; // a type for the plugin to judge
      const attrs = spec.block.value.attributes;
      const declared = Object.keys(attrs).sort();
      for (const key of Object.keys(value)) {
        if (!(key in attrs)) problems.push(`"${at(path, key)}" is not declared (declared: ${declared.join(", ") || "nothing"})`);
      }
      for (const [key, attr] of Object.entries(attrs)) {
        if ((value[key] === undefined || value[key] === null) && isRequired(attr)) problems.push(`"${at(path, key)}" is required`);
        checkValue(attr, value[key], at(path, key), problems);
      }
      return;
    }
    case "default":
      return checkValue(spec.block.value.primary, value, path, problems);
    case "blockValue":
      return checkValue(spec.block.value.nested, value, path, problems);
    case "blockList":
    case "blockSet": {
      const nested = spec.block.value.nested;
      if (Array.isArray(value)) value.forEach((v, i) => checkValue(nested, v, `${path}[${i}]`, problems));
      return;
    }
    case "blockMap": {
      const nested = spec.block.value.nested;
      if (isPlainObject(value)) for (const [k, v] of Object.entries(value)) checkValue(nested, v, at(path, k), problems);
      return;
    }
    default:
      return;
  }
}

/**
 * Whether Nomad's decoder insists on a value for this spec. A default does when its primary does:
 * hcldec checks required attributes in the body schema, before any default applies.
 */
function isRequired(spec: Spec | undefined): boolean {
  switch (spec?.block.case) {
    case "default":
      return isRequired(spec.block.value.primary);
    case "Attr":
    case "blockValue":
    case "blockAttrs":
      return spec.block.value.required;
    case "blockList":
    case "blockSet":
      return spec.block.value.minItems > 0n;
    default:
      return false;
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

/**
 * {@link encodeConfig} for a config Nomad would accept: thrown when {@link configProblems} finds
 * anything, its message `<source>: <problems>; Nomad refuses such a config`.
 */
export class ConfigRefusedError extends Error {
  /** Always `"ConfigRefusedError"`. */
  override readonly name = "ConfigRefusedError";
  constructor(
    /** What {@link configProblems} found. */
    readonly problems: string[],
    source: string,
  ) {
    super(`${source}: ${problems.join("; ")}; Nomad refuses such a config`);
  }
}

/**
 * An operator's config as Nomad sends it to the plugin ({@link encodeConfig}), or a
 * {@link ConfigRefusedError} naming `source` where Nomad's decoder would refuse it.
 *
 * @example
 * ```ts
 * const bytes = encodeCheckedConfig(spec, { command: "/bin/sleep", agrs: ["60"] }, "task.json");
 * // throws: task.json: "agrs" is not declared (declared: args, command); Nomad refuses such a config
 * ```
 */
export function encodeCheckedConfig(spec: Spec | undefined, value: Record<string, unknown>, source: string): Uint8Array {
  const problems = configProblems(spec, value);
  if (problems.length > 0) throw new ConfigRefusedError(problems, source);
  return encodeConfig(spec, value);
}
