import { encode } from "@msgpack/msgpack";
import { HCL_NUMBER_TEXT, parseHclLiteral, parseHclType, shortestDecimal, type HclType } from "@nomadkit/client/hcl";
import type { Spec } from "@nomadkit/protocol/hclspec";

/**
 * Shapes a JSON config like Nomad's HCL decoder (hcldec) shapes an operator's block before encoding
 * it, through nested blocks too: every declared attribute is present; a missing one, or one set to
 * null, takes its declared default (a `Default` spec with a literal) or null; a missing block list
 * or map is empty, a block given as one object where a list of them is declared is a list of one; a
 * primitive attribute's value, and each element of a list, set or map one (an object's attributes,
 * a tuple's elements), is converted to its declared type where HCL converts (`"8080"` for a number,
 * `5` for a string, `"true"` for a bool; a list or map of `any` holding strings and numbers or
 * bools takes them all as strings); a set holds each distinct element once, as a cty set does (the
 * first kept where it was), and so does a block set. Strings are read as HCL's JSON syntax reads
 * them, as templates: `$${` and `%%{` stand for `${` and `%{` (a string with a live `${...}` or
 * `%{...}` is left as given: Nomad fills it from the task's environment, which the kit does not
 * have). An attribute or block is read from the config under its spec's `name` where it has one,
 * and an object or array spec reads the same block as its parent, as hcldec does. Keys the schema
 * does not declare are kept, so the plugin gets the chance to reject them; a body's `"//"`, a
 * comment to HCL's JSON reading, is dropped as Nomad drops it. A schema whose root is
 * not an object (Nomad would send a tuple or a single value; no driver's is) leaves the config as given.
 *
 * @example
 * ```ts
 * shapeConfig(schema, { command: "/bin/sleep" }); // { command: "/bin/sleep", args: null }
 * ```
 */
export function shapeConfig(spec: Spec | undefined, value: Record<string, unknown>): Record<string, unknown> {
  const shaped = shapeBody(spec, value);
  return isPlainObject(shaped) ? shaped : { ...value };
}

/** A block's body (a JSON object) decoded by `spec`, with the keys `spec` does not read kept. */
function shapeBody(spec: Spec | undefined, body: unknown): unknown {
  if (spec === undefined || !isPlainObject(body)) return body; // a type for the plugin to judge
  const shaped = shape(spec, body, "");
  if (!isPlainObject(shaped)) return shaped;
  const names = bodyNames(spec, "");
  for (const [k, v] of Object.entries(body)) if (!names.has(k) && !(k in shaped) && k !== COMMENT) shaped[k] = v;
  return shaped;
}

/** A body's property HCL's JSON reading skips, whatever its value: a comment. */
const COMMENT = "//";

/** A block's body without its comments. */
function withoutComments(body: unknown): unknown {
  return isPlainObject(body) && COMMENT in body ? Object.fromEntries(Object.entries(body).filter(([k]) => k !== COMMENT)) : body;
}

/** The name a spec reads from its block's body: its own, else the object key it is under. */
function nameOf(own: string, implied: string): string {
  return own !== "" ? own : implied;
}

/** What `spec` makes of `body` (a block's attributes and nested blocks), as hcldec decodes it. */
function shape(spec: Spec | undefined, body: Record<string, unknown>, implied: string): unknown {
  switch (spec?.block.case) {
    case "object": {
      const out: Record<string, unknown> = {};
      for (const [name, attr] of Object.entries(spec.block.value.attributes)) out[name] = shape(attr, body, name);
      return out;
    }
    case "array":
      return spec.block.value.values.map((v) => shape(v, body, ""));
    case "default": {
      const v = shape(spec.block.value.primary, body, implied);
      return v === null || v === undefined ? shape(spec.block.value.default, body, implied) : v;
    }
    case "literal":
      return literal(spec);
    case "Attr": {
      const v = body[nameOf(spec.block.value.name, implied)];
      if (v === undefined || v === null) return null;
      const type = parseType(spec.block.value.type);
      const read = asTemplates(v);
      return type === undefined ? read : convert(type, read);
    }
    case "blockValue": {
      const blocks = blocksOf(body[nameOf(spec.block.value.name, implied)]);
      return blocks.length === 0 ? null : shapeBody(spec.block.value.nested, blocks[0]);
    }
    case "blockAttrs": {
      const blocks = blocksOf(body[nameOf(spec.block.value.name, implied)]);
      if (blocks.length === 0) return null;
      const type = parseType(spec.block.value.type);
      const read = asTemplates(withoutComments(blocks[0]));
      return type === undefined ? read : convert({ kind: "map", elem: type }, read);
    }
    case "blockList": {
      const nested = spec.block.value.nested;
      return blocksOf(body[nameOf(spec.block.value.name, implied)]).map((b) => shapeBody(nested, b));
    }
    case "blockSet": {
      // hcldec makes a cty set of the blocks: equal blocks are one (the first kept where it was).
      const nested = spec.block.value.nested;
      const blocks = blocksOf(body[nameOf(spec.block.value.name, implied)]).map((b) => shapeBody(nested, b));
      return distinct(blocks, (v) => shapedKey(nested, v));
    }
    case "blockMap": {
      const { nested, labels } = spec.block.value;
      // hcldec's map of maps, one level a label; a block whose labels came before is a duplicate
      // (refused by configProblems), the first kept.
      const out: Record<string, unknown> = {};
      for (const b of labelledBlocks(body[nameOf(spec.block.value.name, implied)], labels, "")) {
        let level = out;
        for (const l of b.labels.slice(0, -1)) level = (level[l] ??= {}) as Record<string, unknown>;
        const last = b.labels[b.labels.length - 1]!;
        if (!(last in level)) level[last] = shapeBody(nested, b.body);
      }
      return out;
    }
    default:
      return null;
  }
}

/**
 * The blocks a JSON property holds, as HCL's JSON syntax reads them: none for null, one for an
 * object, each element of an array.
 */
function blocksOf(v: unknown): unknown[] {
  if (v === undefined || v === null) return [];
  return Array.isArray(v) ? v : [v];
}

/** One block of a block map: its labels, its body, and the path problems name it by. */
interface LabelledBlock {
  labels: string[];
  body: unknown;
  path: string;
}

/**
 * The blocks a block map's JSON property holds, in order, as HCL's JSON reading unpacks them
 * (hcl/v2 json/structure.go, unpackBlock): at each label level the properties of an object, or of
 * each object of an array in turn (Nomad's HCL jobspec gives `port "a" {}` `port "b" {}` as
 * `[{"a": [{}]}, {"b": [{}]}]`), each one a label; under the last label null is no block, an
 * object one, an array one per element. A level with no property at all (null, `{}`, `[]`) is a
 * missing label, and an array's element that is not an object holds none: both said into `problem`.
 */
function labelledBlocks(v: unknown, labels: readonly string[], path: string, problem?: (message: string) => void): LabelledBlock[] {
  const out: LabelledBlock[] = [];
  const walk = (x: unknown, used: string[], p: string): void => {
    if (used.length === labels.length) {
      for (const body of blocksOf(x)) out.push({ labels: used, body, path: p });
      return;
    }
    const label = labels[used.length]!;
    // An array's element that is not an object holds no label: HCL refuses it ("Incorrect JSON value type").
    if (Array.isArray(x)) x.forEach((e, i) => isPlainObject(e) || problem?.(`"${p}[${i}]" is not an object of ${label} labels`));
    const objects = Array.isArray(x) ? x.filter(isPlainObject) : isPlainObject(x) ? [x] : [];
    const entries = objects.flatMap((o) => Object.entries(o));
    if (entries.length === 0) problem?.(`"${p}" needs a ${label} label`);
    for (const [k, y] of entries) walk(y, [...used, k], at(p, k));
  };
  // No property, no block: only a property that is there wants its labels.
  if (v !== undefined) walk(v, [], path);
  return out;
}

/** The names of the attributes and blocks `spec` reads from its block's body. */
function bodyNames(spec: Spec | undefined, implied: string, into = new Set<string>()): Set<string> {
  switch (spec?.block.case) {
    case "object":
      for (const [name, attr] of Object.entries(spec.block.value.attributes)) bodyNames(attr, name, into);
      break;
    case "array":
      for (const v of spec.block.value.values) bodyNames(v, "", into);
      break;
    case "default":
      bodyNames(spec.block.value.primary, implied, into);
      bodyNames(spec.block.value.default, implied, into);
      break;
    case "Attr":
    case "blockValue":
    case "blockAttrs":
    case "blockList":
    case "blockSet":
    case "blockMap":
      into.add(nameOf(spec.block.value.name, implied));
      break;
    default:
      break;
  }
  return into;
}

/**
 * A JSON value as HCL's JSON syntax reads an attribute's: each string (an object's keys too) a
 * template, whose `$${` and `%%{` are `${` and `%{`, in NFC as cty holds strings. A string with a
 * live interpolation or directive stays as given.
 */
function asTemplates(v: unknown): unknown {
  if (typeof v === "string") return templateText(v);
  if (Array.isArray(v)) return v.map(asTemplates);
  if (isPlainObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [templateText(k), asTemplates(x)]));
  return v;
}

function templateText(s: string): string {
  let out = "";
  for (let i = 0; i < s.length; ) {
    const two = s.slice(i, i + 2);
    if (two === "${" || two === "%{") return s.normalize("NFC"); // live: Nomad's to fill
    const three = s.slice(i, i + 3);
    if (three === "$${" || three === "%%{") {
      out += three.slice(1);
      i += 3;
    } else {
      out += s[i];
      i += 1;
    }
  }
  return out.normalize("NFC");
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
      const { nested, labels } = spec.block.value;
      const level = (x: unknown, depth: number): string =>
        depth === labels.length ? shapedKey(nested, x) : isPlainObject(x) ? `{${entryKeys(x, (k) => level(x[k], depth + 1))}}` : asIs(x);
      return level(v, 0);
    }
    case "blockAttrs": {
      const type = parseType(spec.block.value.type);
      return type === undefined ? asIs(v) : setKey({ kind: "map", elem: type }, v);
    }
    case "array": {
      const values = spec.block.value.values;
      return Array.isArray(v) ? `[${v.map((e, i) => shapedKey(values[i], e)).join(";")}]` : asIs(v);
    }
    default:
      return asIs(v);
  }
}


/**
 * A number as cty writes it into a string: the decimal HCL read (the shortest that gives the
 * number, as Go's JSON encoder writes it for Nomad), in Go's 'f' format, never an exponent (1e21 →
 * "1000000000000000000000", 1.5e-300 → "0.000…015").
 */
function ctyNumberString(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  const { digits, exp } = shortestDecimal(n);
  const sign = n < 0 ? "-" : "";
  if (exp >= 0) return sign + digits + "0".repeat(exp);
  const point = digits.length + exp;
  return sign + (point > 0 ? `${digits.slice(0, point)}.${digits.slice(point)}` : `0.${"0".repeat(-point)}${digits}`);
}

/**
 * Whether cty encodes `n` as a msgpack number: HCL reads a number as the decimal it is written as
 * (at far more than float64's precision), and cty writes one that no float64 holds exactly (0.1,
 * 1e23) as its decimal text instead.
 */
function ctyExact(n: number): boolean {
  if (!Number.isFinite(n) || Number.isInteger(n) && Math.abs(n) <= Number.MAX_SAFE_INTEGER) return true;
  const { digits, exp } = shortestDecimal(n);
  // n's exact value: mantissa × 2^e2.
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, Math.abs(n));
  const bits = view.getBigUint64(0);
  const biased = Number((bits >> 52n) & 0x7ffn);
  const fraction = bits & ((1n << 52n) - 1n);
  const mantissa = biased === 0 ? fraction : fraction | (1n << 52n);
  const e2 = (biased === 0 ? 1 : biased) - 1075;
  const pow = (b: bigint, e: number) => b ** BigInt(Math.max(e, 0));
  // digits × 10^exp = mantissa × 2^e2, both sides scaled to integers.
  return BigInt(digits) * pow(10n, exp) * pow(2n, -e2) === mantissa * pow(10n, -exp) * pow(2n, e2);
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
      return Array.isArray(value) ? value.map((v) => convert(elemOf(type.elem, value), v)) : value;
    case "set": {
      if (!Array.isArray(value)) return value;
      const elem = elemOf(type.elem, value);
      return ctySetOrder(elem, distinct(value.map((e) => convert(elem, e)), (v) => setKey(elem, v)));
    }
    case "map": {
      if (!isPlainObject(value)) return value;
      const elem = elemOf(type.elem, Object.values(value));
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, convert(elem, v)]));
    }
    case "object":
      // cty's conversion to an object type keeps only the type's attributes.
      return isPlainObject(value)
        ? Object.fromEntries(Object.entries(value).flatMap(([k, v]) => (type.attrs.has(k) ? [[k, convert(type.attrs.get(k)!, v)]] : [])))
        : value;
    case "tuple":
      return Array.isArray(value) ? value.map((v, i) => (i < type.elems.length ? convert(type.elems[i]!, v) : v)) : value;
    case "string":
      // cty holds every string in NFC (cty.StringVal normalizes), and Nomad encodes it so.
      if (typeof value === "string") return value.normalize("NFC");
      return typeof value === "number" ? ctyNumberString(value) : typeof value === "boolean" ? String(value) : value;
    case "number":
      return typeof value === "string" && HCL_NUMBER_TEXT.test(value.trim()) ? Number(value) : value;
    case "bool":
      // cty's string to bool: "true" and "1", "false" and "0".
      return value === "true" || value === "1" ? true : value === "false" || value === "0" ? false : value;
    case "any":
      return value;
  }
}

/**
 * A collection's element type: `any` is the one type cty unifies the elements to, where they are
 * strings, numbers and bools and one of them a string (all become strings); else left as given.
 */
function elemOf(elem: HclType, values: unknown[]): HclType {
  if (elem.kind !== "any") return elem;
  const kinds = new Set(values.filter((v) => v !== null).map((v) => typeof v));
  return kinds.size > 1 && kinds.has("string") && [...kinds].every((k) => k === "string" || k === "number" || k === "boolean") ? { kind: "string" } : elem;
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

function literal(spec: Spec | undefined): unknown {
  if (spec?.block.case !== "literal") return null;
  try {
    // What Nomad evaluates the literal to, for the simple kinds (the SDK's toHclLiteral writes only
    // those: `{"k" = "$${v}"}`); a function call or a template is beyond the kit.
    return parseHclLiteral(spec.block.value.value);
  } catch (err) {
    if (err instanceof TypeError) return null;
    throw err;
  }
}

/**
 * What Nomad's HCL decoder would refuse in an operator's config before any plugin sees it: keys the
 * schema does not declare ("Unsupported argument"; a `"//"` comment is not one), required attributes or blocks that are missing
 * ("Missing required argument"; an attribute set to null is there), fewer or more blocks than a
 * block list or set allows, more than one block where one is declared, a block map's level
 * without a label (`{}`, `[]` or null) and a block map's labels given twice, in nested blocks too.
 * Values' types are left to the plugin, which decodes them. Each problem names its path
 * (`mount[1].target`). Empty when the config fits, or without a schema.
 *
 * @example
 * ```ts
 * configProblems(schema, { command: "/bin/sleep", bogus: 1 });
 * // ['"bogus" is not declared (declared: args, command)']
 * ```
 */
export function configProblems(spec: Spec | undefined, value: unknown): string[] {
  const problems: string[] = [];
  checkBody(spec, value, "", problems);
  return problems;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const at = (path: string, key: string) => (path === "" ? key : `${path}.${key}`);

/** A block's body against the spec of its content. */
function checkBody(spec: Spec | undefined, body: unknown, path: string, problems: string[]): void {
  if (spec === undefined || !isPlainObject(body)) return; // a type for the plugin to judge
  const names = bodyNames(spec, "");
  const declared = [...names].sort();
  for (const key of Object.keys(body)) {
    if (!names.has(key) && key !== COMMENT) problems.push(`"${at(path, key)}" is not declared (declared: ${declared.join(", ") || "nothing"})`);
  }
  checkSpec(spec, body, "", path, problems);
}

function checkSpec(spec: Spec | undefined, body: Record<string, unknown>, implied: string, path: string, problems: string[]): void {
  switch (spec?.block.case) {
    case "object":
      for (const [name, attr] of Object.entries(spec.block.value.attributes)) checkSpec(attr, body, name, path, problems);
      return;
    case "array":
      for (const v of spec.block.value.values) checkSpec(v, body, "", path, problems);
      return;
    case "default":
      // hcldec checks required attributes in the body schema, before any default applies.
      return checkSpec(spec.block.value.primary, body, implied, path, problems);
    case "Attr": {
      const name = nameOf(spec.block.value.name, implied);
      if (spec.block.value.required && body[name] === undefined) problems.push(`"${at(path, name)}" is required`);
      return;
    }
    case "blockValue":
    case "blockAttrs": {
      const name = nameOf(spec.block.value.name, implied);
      const blocks = blocksOf(body[name]);
      if (spec.block.value.required && blocks.length === 0) problems.push(`"${at(path, name)}" is required`);
      if (blocks.length > 1) problems.push(`"${at(path, name)}" is given ${blocks.length} blocks, one is allowed`);
      if (spec.block.case === "blockValue") checkBody(spec.block.value.nested, blocks[0], at(path, name), problems);
      return;
    }
    case "blockList":
    case "blockSet": {
      const { nested, minItems, maxItems } = spec.block.value;
      const name = nameOf(spec.block.value.name, implied);
      const blocks = blocksOf(body[name]);
      if (blocks.length === 0 && minItems > 0n) problems.push(`"${at(path, name)}" is required`);
      else if (blocks.length < minItems) problems.push(`"${at(path, name)}" has ${blocks.length} blocks, at least ${minItems} are required`);
      if (maxItems > 0n && blocks.length > maxItems) problems.push(`"${at(path, name)}" has ${blocks.length} blocks, at most ${maxItems} are allowed`);
      blocks.forEach((b, i) => checkBody(nested, b, `${at(path, name)}[${i}]`, problems));
      return;
    }
    case "blockMap": {
      const { nested, labels } = spec.block.value;
      const name = nameOf(spec.block.value.name, implied);
      const blocks = labelledBlocks(body[name], labels, at(path, name), (m) => problems.push(m));
      // hcldec: "Duplicate <name> block", a block map's labels must be unique.
      const count = new Map<string, number>();
      for (const b of blocks) count.set(JSON.stringify(b.labels), (count.get(JSON.stringify(b.labels)) ?? 0) + 1);
      const told = new Set<string>();
      for (const b of blocks) {
        const key = JSON.stringify(b.labels);
        const n = count.get(key)!;
        if (n > 1) {
          if (!told.has(key)) problems.push(`"${b.path}" is given ${n} blocks, one is allowed (a block map's labels must be unique)`);
          told.add(key);
          continue;
        }
        checkBody(nested, b.body, b.path, problems);
      }
      return;
    }
    default:
      return;
  }
}

/**
 * Encodes a shaped config as msgpack, the bytes Nomad puts in `msgpack_config` / `msgpack_driver_config`:
 * as cty encodes them, a number no float64 holds exactly (0.1) goes as its decimal text.
 *
 * @example
 * ```ts
 * const { spec } = await plugin.driver.taskConfigSchema({});
 * const bytes = encodeConfig(spec, { command: "/bin/sleep", args: ["60"] });
 * ```
 */
export function encodeConfig(spec: Spec | undefined, value: Record<string, unknown>): Uint8Array {
  return encode(ctyNumbers(shapeConfig(spec, value)), { useBigInt64: true });
}

/**
 * `v` with each number as cty writes it ({@link ctyExact}): an integer decimal in int64's range as
 * that integer, another decimal no float64 holds as its text.
 */
function ctyNumbers(v: unknown): unknown {
  if (typeof v === "number") {
    if (ctyExact(v)) return v;
    // An integer decimal in int64's range is what cty sends, as an int64 (2 ** 60 is read as
    // 1152921504606847000, the decimal it is written as).
    const { digits, exp } = shortestDecimal(v);
    if (exp >= 0) {
      const int = BigInt(digits) * 10n ** BigInt(exp) * (v < 0 ? -1n : 1n);
      if (int >= -(2n ** 63n) && int < 2n ** 63n) return int;
    }
    return ctyNumberString(v);
  }
  if (Array.isArray(v)) return v.map(ctyNumbers);
  if (isPlainObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, ctyNumbers(x)]));
  return v;
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
