/**
 * HCL type expressions (`"string"`, `"list(string)"`, `"map(number)"`, `"object({a=string})"`, ...),
 * the `type` of an hclspec `Attr`: {@link parseHclType} and {@link formatHclType}. Shared by the
 * plugin side (`@nomadkit/server` validates schemas and decodes config with it) and the host side
 * (`@nomadkit/conformance` shapes configs as Nomad does). This entry point imports nothing else, so
 * a plugin that uses it does not load the host runtime of `@nomadkit/client`.
 *
 * @example
 * ```ts
 * import { formatHclType, parseHclType } from "@nomadkit/client/hcl";
 *
 * const t = parseHclType("map( list(number) )");
 * if (t.kind === "map") console.log(formatHclType(t.elem)); // "list(number)"
 * ```
 * @module
 */

/**
 * A parsed HCL type expression.
 *
 * @example
 * ```ts
 * const t: HclType = { kind: "list", elem: { kind: "string" } }; // list(string)
 * ```
 */
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
    throw new TypeError(
      `invalid HCL type ${JSON.stringify(this.src)} at offset ${this.pos}: ${why}`,
    );
  }

  skipSpace(): void {
    while (this.pos < this.src.length && /\s/.test(this.src[this.pos]!))
      this.pos++;
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
