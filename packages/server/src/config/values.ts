/**
 * Checking decoded msgpack values against HCL types. Every failure is a {@link ConfigFieldError}
 * carrying the field path, so the status the caller gets names the field.
 */
import { parseCtyJsonType, type HclType, formatHclType } from "./types.js";
import { HCL_NUMBER_TEXT, shortestDecimal } from "@nomadkit/client/hcl";

/** A path into a config value: object keys and list indexes. */
export type FieldPath = readonly (string | number)[];

const fieldErrorBrand = Symbol.for("@nomadkit/server/ConfigFieldError");

/**
 * A decoded value did not match the schema at `path`. `decodeConfig` turns it into InvalidArgument;
 * a custom `HclSpec` node throws it from `decode`.
 *
 * @example
 * ```ts
 * throw new ConfigFieldError(["mount", 0, "source"], "must be absolute"); // field "mount[0].source": must be absolute
 * ```
 */
export class ConfigFieldError extends Error {
  constructor(
    /** Where the problem is: keys and list indexes from the root of the config ([] for the root). */
    readonly path: FieldPath,
    /** What is wrong, without the field name (the message adds it). */
    readonly problem: string,
  ) {
    super(path.length === 0 ? problem : `field "${formatPath(path)}": ${problem}`);
    this.name = "ConfigFieldError";
    Object.defineProperty(this, fieldErrorBrand, { value: true });
  }

  /** True for instances from either build (ESM or CommonJS): a custom spec node may come from the other. */
  static override [Symbol.hasInstance](v: unknown): boolean {
    if (this !== ConfigFieldError) return Function.prototype[Symbol.hasInstance].call(this, v);
    return typeof v === "object" && v !== null && (v as Record<symbol, unknown>)[fieldErrorBrand] === true;
  }
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_-]*$/;

/**
 * Format a field path the way error messages name fields.
 *
 * @example
 * ```ts
 * formatPath(["mount", 0, "source"]); // "mount[0].source"
 * formatPath(["labels", "a b"]); // 'labels["a b"]'
 * ```
 */
export function formatPath(path: FieldPath): string {
  let out = "";
  for (const seg of path) {
    if (typeof seg === "number") out += `[${seg}]`;
    else if (IDENT.test(seg)) out += out === "" ? seg : `.${seg}`;
    else out += `[${JSON.stringify(seg)}]`;
  }
  return out;
}

/** What a msgpack-decoded value is, in HCL words, for "expected X, got Y". */
export function describeValue(v: unknown): string {
  if (v === null || v === undefined) return "null";
  if (typeof v === "boolean") return "bool";
  if (typeof v === "number" || typeof v === "bigint") return Number.isNaN(v) ? "NaN" : "number";
  if (typeof v === "string") return "string";
  if (Array.isArray(v)) return "list";
  if (v instanceof Uint8Array) return "bytes";
  if (v instanceof Date) return "timestamp";
  if (isPlainMap(v)) return "map";
  return "msgpack extension";
}

/** A msgpack map as @msgpack/msgpack decodes it: a plain object. */
export function isPlainMap(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
}

const INTEGER = /^[-+]?\d+$/;

/**
 * An integer as a JavaScript number. Nomad holds a job's numbers as float64 and writes them as Go
 * does, the double's shortest decimal, which cty keeps exactly: so an integer Nomad sends is a
 * double's exact value (an int64 such as 2^60) or that shortest decimal (1e23 arrives as cty's text
 * "100000000000000000000000"); either is that double. Any other integer (9007199254740993, which
 * no double is) is refused, naming the field, instead of being rounded.
 */
function integerNumber(v: bigint, path: FieldPath): number {
  const n = Number(v);
  if (Number.isFinite(n) && (BigInt(n) === v || shortestDecimalValue(n) === v)) return n;
  throw new ConfigFieldError(path, `integer ${v} is not a value a JavaScript number holds (nor the shortest decimal of one)`);
}

/** The value of integral double `n`'s shortest decimal (`String(n)`, as Go writes it: 1e+23), exactly. */
function shortestDecimalValue(n: number): bigint | undefined {
  const { digits, exp } = shortestDecimal(n);
  return exp >= 0 ? (n < 0 ? -1n : 1n) * BigInt(digits) * 10n ** BigInt(exp) : undefined;
}

/** Deepest nesting accepted for `any` values, so hostile input cannot exhaust the stack. */
const MAX_DEPTH = 256;

/**
 * Convert a msgpack-decoded value to the JS value of HCL type `t`, or throw
 * {@link ConfigFieldError}. `null` is returned for null (the caller decides whether that is allowed).
 * A null inside a list, set or map becomes the element type's zero value ({@link zeroValue}). A set
 * holds each distinct element once, as a cty set does (equal by value, objects attribute by
 * attribute): a repeated element is dropped, the first one kept where it was.
 */
export function convertValue(t: HclType, v: unknown, path: FieldPath, depth = 0): unknown {
  if (v === null || v === undefined) return null;
  if (depth > MAX_DEPTH) throw new ConfigFieldError(path, "value nested too deeply");
  const mismatch = () => new ConfigFieldError(path, `expected ${formatHclType(t)}, got ${describeValue(v)}`);
  switch (t.kind) {
    case "string":
      if (typeof v !== "string") throw mismatch();
      return v;
    case "bool":
      if (typeof v !== "boolean") throw mismatch();
      return v;
    case "number":
      if (typeof v === "number" && !Number.isNaN(v)) return v;
      if (typeof v === "bigint") return integerNumber(v, path);
      // cty encodes numbers that are neither int64 nor exact float64 as decimal strings.
      if (typeof v === "string" && HCL_NUMBER_TEXT.test(v)) return INTEGER.test(v) ? integerNumber(BigInt(v), path) : Number(v);
      throw mismatch();
    case "list": {
      if (!Array.isArray(v)) throw mismatch();
      const out = new Array<unknown>(v.length);
      for (let i = 0; i < v.length; i++) out[i] = element(t.elem, v[i], [...path, i], depth);
      return out;
    }
    case "set": {
      if (!Array.isArray(v)) throw mismatch();
      const out: unknown[] = [];
      const seen = new Set<string>();
      for (let i = 0; i < v.length; i++) {
        const e = convertValue(t.elem, v[i], [...path, i], depth + 1);
        // From the value as received: cty keeps a null and the zero value it becomes apart.
        const key = setKey(t.elem, v[i], [...path, i]);
        if (seen.has(key)) continue;
        seen.add(key);
        out.push(e === null ? zeroValue(t.elem) : e);
      }
      return out;
    }
    case "map": {
      if (!isPlainMap(v)) throw mismatch();
      const out: Record<string, unknown> = {};
      for (const k of Object.keys(v)) out[k] = element(t.elem, v[k], [...path, k], depth);
      return out;
    }
    case "object": {
      if (!isPlainMap(v)) throw mismatch();
      const out: Record<string, unknown> = {};
      for (const [k, at] of t.attrs) {
        const val = convertValue(at, v[k], [...path, k], depth + 1);
        if (val !== null) out[k] = val;
      }
      return out;
    }
    case "tuple": {
      if (!Array.isArray(v)) throw mismatch();
      if (v.length !== t.elems.length) {
        throw new ConfigFieldError(path, `expected ${t.elems.length} elements, got ${v.length}`);
      }
      return t.elems.map((et, i) => convertValue(et, v[i], [...path, i], depth + 1));
    }
    case "any":
      return convertDynamic(v, path, depth);
  }
}

/**
 * A set element as a string that two elements share exactly when cty's equality holds for them:
 * strings compared in NFC (cty normalizes them), numbers by value (`1`, `1.0`, cty's `"1"`),
 * objects attribute by attribute (an absent attribute is null), maps entry by entry, lists and
 * tuples in order, nested sets as sets. Read from `v` as received, already checked against `t` by
 * `convertValue`: a null nested anywhere differs from the zero value it becomes, as it does in cty.
 */
function setKey(t: HclType, v: unknown, path: FieldPath): string {
  if (v === null || v === undefined) return "~";
  switch (t.kind) {
    case "string":
      return JSON.stringify((v as string).normalize("NFC"));
    case "number":
      // String(-0) is "0": cty's numbers are equal.
      return `n${String(convertValue(t, v, path))}`;
    case "bool":
      return v ? "T" : "F";
    case "list":
      return `[${(v as unknown[]).map((e) => setKey(t.elem, e, path)).join(";")}]`;
    case "tuple":
      return `[${(v as unknown[]).map((e, i) => setKey(t.elems[i]!, e, path)).join(";")}]`;
    case "set":
      // As a set: each distinct element once, in no particular order.
      return `{${[...new Set((v as unknown[]).map((e) => setKey(t.elem, e, path)))].sort().join(";")}}`;
    case "map": {
      const m = v as Record<string, unknown>;
      return `{${Object.keys(m)
        .sort()
        .map((k) => `${JSON.stringify(k)}:${setKey(t.elem, m[k], path)}`)
        .join(";")}}`;
    }
    case "object": {
      const o = v as Record<string, unknown>;
      return `<${[...t.attrs.keys()]
        .sort()
        .map((k) => setKey(t.attrs.get(k)!, o[k], path))
        .join(";")}>`;
    }
    case "any":
      return `?${dynamicKey(convertValue(t, v, path))}`;
  }
}

/** A decoded value of type `any`, by its JSON shape (map keys sorted). */
function dynamicKey(v: unknown): string {
  if (v === null || v === undefined) return "~";
  if (typeof v === "string") return JSON.stringify(v.normalize("NFC"));
  if (Array.isArray(v)) return `[${v.map(dynamicKey).join(";")}]`;
  if (isPlainMap(v)) {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${dynamicKey(v[k])}`)
      .join(";")}}`;
  }
  return typeof v === "number" ? `n${String(v)}` : v ? "T" : "F";
}

// Nomad sends a collection holding nulls as it is (HCL's `args = ["-v", var.unset]`, or a JSON job's
// null), and a Go driver decoding it sees each null as its element type's zero value.
function element(t: HclType, v: unknown, path: FieldPath, depth: number): unknown {
  const out = convertValue(t, v, path, depth + 1);
  return out === null ? zeroValue(t) : out;
}

/** What Go's msgpack decoding gives a driver for a null of HCL type `t`. */
export function zeroValue(t: HclType): unknown {
  switch (t.kind) {
    case "string":
      return "";
    case "number":
      return 0;
    case "bool":
      return false;
    case "list":
    case "set":
    case "tuple":
      return [];
    case "map":
    case "object":
      return {};
    case "any":
      return null;
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A value of type `any`. Nomad marshals a config with its value's own type, so the value comes as
 * it is; cty marshals one typed dynamically as `[type as JSON in bin, value]`: decode that with its
 * type. Only bin is taken as a type: a list of a string and a value is the operator's own
 * (`["\"string\"", "x"]`), which cty writes as strings.
 */
function convertDynamic(v: unknown, path: FieldPath, depth: number): unknown {
  if (Array.isArray(v) && v.length === 2 && v[0] instanceof Uint8Array) {
    let typeJson: unknown;
    try {
      typeJson = JSON.parse(utf8.decode(v[0]));
    } catch {
      typeJson = undefined;
    }
    let t;
    try {
      t = parseCtyJsonType(typeJson);
    } catch (err) {
      if (err instanceof RangeError) throw new ConfigFieldError(path, "value's type nested too deeply");
      throw err;
    }
    if (t !== undefined) return t.kind === "any" ? plain(v[1], path, depth + 1) : convertValue(t, v[1], path, depth + 1);
  }
  return plain(v, path, depth);
}

function plain(v: unknown, path: FieldPath, depth: number): unknown {
  if (depth > MAX_DEPTH) throw new ConfigFieldError(path, "value nested too deeply");
  if (v === null || v === undefined) return null;
  if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") return v;
  if (typeof v === "bigint") return integerNumber(v, path);
  if (Array.isArray(v)) return v.map((e, i) => plain(e, [...path, i], depth + 1));
  if (isPlainMap(v)) {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v)) out[k] = plain(v[k], [...path, k], depth + 1);
    return out;
  }
  throw new ConfigFieldError(path, `unsupported value: ${describeValue(v)}`);
}
