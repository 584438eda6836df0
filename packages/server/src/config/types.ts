/**
 * HCL type expressions (`"string"`, `"list(string)"`, `"map(number)"`, `"object({a=string})"`, ...):
 * the runtime parser used to validate schemas and decoded values, and the type-level mapping that
 * gives decoded config its TypeScript type.
 */

/** A parsed HCL type expression. */
export type HclType =
  | {
      /** A primitive type. */
      readonly kind: "string" | "number" | "bool" | "any";
    }
  | {
      /** A collection type. */
      readonly kind: "list" | "set" | "map";
      /** Type of every element (every value, for a map). */
      readonly elem: HclType;
    }
  | {
      /** `object({name=type,...})`. */
      readonly kind: "object";
      /** Attribute types by name. */
      readonly attrs: ReadonlyMap<string, HclType>;
    }
  | {
      /** `tuple([type,...])`. */
      readonly kind: "tuple";
      /** Element types, in order. */
      readonly elems: readonly HclType[];
    };

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

/** `S` without spaces, so `"map( string )"` maps like `"map(string)"`. */
export type StripSpaces<S extends string> = S extends `${infer A} ${infer B}` ? StripSpaces<`${A}${B}`> : S;

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

const cache = new Map<string, HclType>();

/**
 * Parse an HCL type expression. Throws a `TypeError` naming the problem; schemas are code, so a bad
 * type is a programming error caught when the schema is built.
 *
 * @example
 * ```ts
 * parseHclType("list(map(string))"); // { kind: "list", elem: { kind: "map", elem: { kind: "string" } } }
 * ```
 */
export function parseHclType(expr: string): HclType {
  const hit = cache.get(expr);
  if (hit !== undefined) return hit;
  const p = new Parser(expr);
  const t = p.type();
  p.skipSpace();
  if (p.pos !== expr.length) p.fail("unexpected trailing input");
  cache.set(expr, t);
  return t;
}

/**
 * Render a parsed type back to its canonical expression (used in error messages).
 *
 * @example
 * ```ts
 * formatHclType(parseHclType("list( string )")); // "list(string)"
 * ```
 */
export function formatHclType(t: HclType): string {
  switch (t.kind) {
    case "list":
    case "set":
    case "map":
      return `${t.kind}(${formatHclType(t.elem)})`;
    case "object":
      return `object({${[...t.attrs].map(([k, v]) => `${k}=${formatHclType(v)}`).join(",")}})`;
    case "tuple":
      return `tuple([${t.elems.map(formatHclType).join(",")}])`;
    default:
      return t.kind;
  }
}

const PRIMITIVES = new Set(["string", "number", "bool", "any"]);

class Parser {
  pos = 0;
  constructor(readonly src: string) {}

  fail(why: string): never {
    throw new TypeError(`invalid HCL type ${JSON.stringify(this.src)} at offset ${this.pos}: ${why}`);
  }

  skipSpace(): void {
    while (this.pos < this.src.length && /\s/.test(this.src[this.pos]!)) this.pos++;
  }

  expect(ch: string): void {
    this.skipSpace();
    if (this.src[this.pos] !== ch) this.fail(`expected "${ch}"`);
    this.pos++;
  }

  peek(): string | undefined {
    this.skipSpace();
    return this.src[this.pos];
  }

  ident(): string {
    this.skipSpace();
    const m = /^[A-Za-z_][A-Za-z0-9_-]*/.exec(this.src.slice(this.pos));
    if (m === null) this.fail("expected a type name");
    this.pos += m[0].length;
    return m[0];
  }

  type(): HclType {
    const name = this.ident();
    if (PRIMITIVES.has(name)) return { kind: name as "string" };
    switch (name) {
      case "list":
      case "set":
      case "map": {
        this.expect("(");
        const elem = this.type();
        this.expect(")");
        return { kind: name, elem };
      }
      case "object": {
        this.expect("(");
        this.expect("{");
        const attrs = new Map<string, HclType>();
        while (this.peek() !== "}") {
          const key = this.ident();
          this.expect("=");
          // A repeated attribute replaces the earlier one: HCL's typeexpr takes
          // object({a=string,a=number}) as object({a=number}), and Nomad does too.
          attrs.set(key, this.type());
          if (this.peek() === ",") this.pos++;
          else if (this.peek() !== "}") this.fail('expected "," or "}"');
        }
        this.expect("}");
        this.expect(")");
        return { kind: "object", attrs };
      }
      case "tuple": {
        this.expect("(");
        this.expect("[");
        const elems: HclType[] = [];
        while (this.peek() !== "]") {
          elems.push(this.type());
          if (this.peek() === ",") this.pos++;
          else if (this.peek() !== "]") this.fail('expected "," or "]"');
        }
        this.expect("]");
        this.expect(")");
        return { kind: "tuple", elems };
      }
      default:
        return this.fail(`unknown type "${name}"`);
    }
  }
}

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
