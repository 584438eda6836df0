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
 * Parse an HCL type expression. Throws a `TypeError` naming the problem and where it is; schemas
 * are code, so a bad type is a programming error caught when the schema is built.
 *
 * The syntax is what Nomad takes in an hclspec `Attr.type` (and `BlockAttrs.type`): Nomad parses
 * the string as an HCL expression and evaluates it with `string`, `number`, `bool` and `any` as
 * variables and `list`, `set`, `map`, `tuple` and `object` as functions. So spaces, newlines and
 * comments (`#` or `//` to the end of the line, or between `/*` and the next `*` `/`) may come
 * between tokens; an object's attributes are separated by commas or newlines (a trailing comma is
 * fine), given with `=` or `:`, and named bare (`source`) or quoted (`"a b"`). `optional(...)` is
 * rejected: it belongs to HCL's `typeexpr`, which Nomad does not use for these types.
 *
 * @example
 * ```ts
 * parseHclType("list(map(string))"); // { kind: "list", elem: { kind: "map", elem: { kind: "string" } } }
 * parseHclType(`object({
 *   source   = string # host path
 *   "read-only": bool
 * })`); // { kind: "object", attrs: Map { "source" => { kind: "string" }, "read-only" => { kind: "bool" } } }
 * ```
 */
export function parseHclType(expr: string): HclType {
  const hit = cache.get(expr);
  if (hit !== undefined) return hit;
  const p = new Parser(expr);
  const t = p.type(0);
  p.skip();
  if (p.pos !== expr.length) p.fail(`unexpected ${p.found()} after the type`);
  cache.set(expr, t);
  return t;
}

/**
 * The value Nomad makes of an hclspec `Literal` (a `Default`'s fallback), for the simple
 * expressions literals are written in: `null`, `true`, `false`, numbers (a leading `-` too), quoted
 * strings (HCL's escapes; `$${` and `%%{` stand for `${` and `%{`; NFC, as cty holds strings),
 * tuples `[...]` and objects `{key = value}` (`=` or `:`, keys bare, quoted or whole numbers),
 * with comments and newlines as HCL allows. Throws a `TypeError` for anything else (a function
 * call, a template with `${...}`, arithmetic), which Nomad evaluates and this does not.
 *
 * @example
 * ```ts
 * parseHclLiteral('{"greeting" = "hi $${name}", ports = [80, -1.5]}'); // { greeting: "hi ${name}", ports: [80, -1.5] }
 * ```
 */
export function parseHclLiteral(src: string): unknown {
  const p = new Parser(src, "literal");
  const v = p.literal(0);
  p.skip();
  if (p.pos !== src.length) p.fail(`unexpected ${p.found()} after the value`);
  return v;
}

/**
 * Render a parsed type back to its canonical expression (used in error messages). Attribute names
 * that are not HCL identifiers are quoted, so the result parses back to the same type.
 *
 * @example
 * ```ts
 * formatHclType(parseHclType("list( string )")); // "list(string)"
 * formatHclType(parseHclType('object({ "a b" : number })')); // 'object({"a b"=number})'
 * ```
 */
export function formatHclType(t: HclType): string {
  switch (t.kind) {
    case "list":
    case "set":
    case "map":
      return `${t.kind}(${formatHclType(t.elem)})`;
    case "object":
      return `object({${[...t.attrs].map(([k, v]) => `${formatName(k)}=${formatHclType(v)}`).join(",")}})`;
    case "tuple":
      return `tuple([${t.elems.map(formatHclType).join(",")}])`;
    default:
      return t.kind;
  }
}

/**
 * An HCL number as text, as cty converts a string to a number (`"8080"`, `"-1.5e3"`, `".5"`):
 * what Nomad's decoder takes where a number is declared, and how cty sends a number no float64 holds.
 *
 * @example
 * ```ts
 * HCL_NUMBER_TEXT.test("1e23"); // true
 * HCL_NUMBER_TEXT.test("0x10"); // false
 * ```
 */
export const HCL_NUMBER_TEXT = /^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$/;

/**
 * The shortest decimal that reads back as finite `n`, without its sign, as `digits` × 10^`exp`
 * (the digits as `String(n)` writes them, trailing zeros included): what JavaScript and Go's JSON
 * encoder write, and so the decimal HCL reads from a job's number (Nomad holds job numbers as
 * float64) and cty keeps exactly.
 *
 * @example
 * ```ts
 * shortestDecimal(1e23); // { digits: "1", exp: 23 }
 * shortestDecimal(-0.15); // { digits: "15", exp: -2 }
 * shortestDecimal(2 ** 60); // { digits: "1152921504606847000", exp: 0 }
 * ```
 */
export function shortestDecimal(n: number): {
  /** The decimal's digits, no sign, no leading zeros. */
  digits: string;
  /** The power of ten they are multiplied by. */
  exp: number;
} {
  const m = /^(\d+)(?:\.(\d+))?(?:e([-+]\d+))?$/.exec(String(Math.abs(n)));
  if (m === null)
    throw new RangeError(`shortestDecimal: ${n} is not a finite number`);
  const frac = m[2] ?? "";
  const digits = (m[1]! + frac).replace(/^0+(?=\d)/, "");
  return { digits, exp: Number(m[3] ?? 0) - frac.length };
}

const PRIMITIVES = new Set(["string", "number", "bool", "any"]);

/** What each type function takes, for error messages. */
const CONSTRUCTORS: Readonly<Record<string, string>> = {
  list: "list(T), T the element type",
  set: "set(T), T the element type",
  map: "map(T), T the type of every value",
  tuple: "tuple([T, ...]), the element types in brackets",
  object: "object({name = T, ...}), the attribute types in braces",
};

// Why optional() fails: Nomad's hclspec decoder (helper/pluginutils/hclspecutils) evaluates the type
// with its own list/set/map/tuple/object functions, not HCL's typeexpr.TypeConstraint, so
// optional is an unknown function there and the driver's whole schema is refused.
const OPTIONAL =
  "optional(...) is not supported: Nomad evaluates Attr types with its own type functions " +
  "(list, set, map, tuple, object), not HCL's typeexpr, and would refuse the schema (\"There is no " +
  'function named \\"optional\\""); every attribute of an object type is required, so for optional ' +
  "fields use a block (spec.block) whose attrs are not required, or map(...) / any";

/** An HCL identifier (hclsyntax: `(ID_Start | '_') (ID_Continue | '-')*`). */
const IDENT = /[\p{ID_Start}_][\p{ID_Continue}-]*/uy;

const DIGITS = /[0-9]+/y;

/** Deepest nesting parsed; a hostile type string must not exhaust the stack. */
const MAX_DEPTH = 256;

function formatName(name: string): string {
  IDENT.lastIndex = 0;
  // A bare `for` opening an object constructor starts a for expression, so it is always quoted.
  const m = IDENT.exec(name);
  if (m !== null && m[0].length === name.length && name !== "for") return name;
  return `"${name.replace(/[\\"\n\r\t]|[$%]\{|[\u0000-\u001f\u007f]/g, (c) => {
    switch (c) {
      case "\\":
      case '"':
        return `\\${c}`;
      case "\n":
        return "\\n";
      case "\r":
        return "\\r";
      case "\t":
        return "\\t";
      case "${":
      case "%{":
        return `${c[0]}${c}`;
      default:
        return `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;
    }
  })}"`;
}

/**
 * A recursive-descent parser for the subset of HCL native syntax a type expression uses, with
 * hclsyntax's newline rules: newlines separate attributes inside an object constructor's braces,
 * and are plain spacing inside parentheses, brackets and at the top level.
 */
class Parser {
  pos = 0;
  private readonly newlines: boolean[] = [false];
  constructor(
    readonly src: string,
    private readonly what = "type",
  ) {
    // hclsyntax skips a leading UTF-8 byte order mark.
    if (src.startsWith("\uFEFF")) this.pos = 1;
  }

  fail(why: string): never {
    let where = `offset ${this.pos}`;
    if (this.src.includes("\n")) {
      const before = this.src.slice(0, this.pos);
      const line = before.split("\n").length;
      where += ` (line ${line}, column ${this.pos - before.lastIndexOf("\n")})`;
    }
    throw new TypeError(
      `invalid HCL ${this.what} ${JSON.stringify(this.src)} at ${where}: ${why}`,
    );
  }

  /** The input at `pos`, for an error message. */
  found(): string {
    const c = this.src[this.pos];
    if (c === undefined) return "the end of the input";
    if (this.atNewline()) return "a newline";
    IDENT.lastIndex = this.pos;
    const word = IDENT.exec(this.src)?.[0];
    if (word !== undefined) return JSON.stringify(word);
    const code = this.src.codePointAt(this.pos)!;
    if (/[\s\p{Cc}]/u.test(c)) {
      return `character U+${code.toString(16).toUpperCase().padStart(4, "0")} (HCL takes only spaces, tabs and newlines between tokens)`;
    }
    return JSON.stringify(String.fromCodePoint(code));
  }

  /** Skip spacing and whole lines: before an object's next item, where newlines only separate. */
  skipLines(): void {
    this.skip();
    while (this.atNewline()) {
      this.pos += this.src[this.pos] === "\r" ? 2 : 1;
      this.skip();
    }
  }

  atNewline(): boolean {
    const c = this.src[this.pos];
    return c === "\n" || (c === "\r" && this.src[this.pos + 1] === "\n");
  }

  /**
   * Skip spaces, tabs and comments, and newlines where they are spacing. A line comment ends
   * before its newline, which then counts as one (hclsyntax turns it into a newline token).
   */
  skip(): void {
    const separating = this.newlines[this.newlines.length - 1];
    const src = this.src;
    for (;;) {
      const c = src[this.pos];
      if (c === " " || c === "\t") this.pos++;
      else if (this.atNewline()) {
        if (separating) return;
        this.pos += c === "\r" ? 2 : 1;
      } else if (c === "#" || (c === "/" && src[this.pos + 1] === "/")) {
        while (this.pos < src.length && !this.atNewline()) this.pos++;
      } else if (c === "/" && src[this.pos + 1] === "*") {
        const end = src.indexOf("*/", this.pos + 2);
        if (end < 0)
          this.fail('unterminated comment: "/*" without a closing "*/"');
        this.pos = end + 2;
      } else return;
    }
  }

  peek(): string | undefined {
    this.skip();
    return this.src[this.pos];
  }

  /** `f` with newlines counting as separators (`{`) or as spacing (`(`, `[`). */
  within<T>(separating: boolean, f: () => T): T {
    this.newlines.push(separating);
    const t = f();
    this.newlines.pop();
    return t;
  }

  /** The identifier at `pos` (spacing already skipped), or undefined. */
  identifier(): string | undefined {
    IDENT.lastIndex = this.pos;
    const m = IDENT.exec(this.src);
    if (m === null) return undefined;
    this.pos += m[0].length;
    return m[0];
  }

  /** The ")" ending `name(`'s one argument; a trailing comma may come first, as in any HCL call. */
  closeCall(name: string, what: string): void {
    let c = this.peek();
    if (c === ",") {
      this.pos++;
      c = this.peek();
      if (c !== ")" && c !== undefined)
        this.fail(`${name}(...) takes one argument: ${what}`);
    }
    if (c !== ")")
      this.fail(`expected ")" to close "${name}(", found ${this.found()}`);
    this.pos++;
  }

  type(depth: number): HclType {
    if (depth > MAX_DEPTH) this.fail(`type nested deeper than ${MAX_DEPTH}`);
    this.skip();
    const start = this.pos;
    if (this.src[this.pos] === "(") {
      // (T) is T, as for any HCL expression.
      this.pos++;
      return this.within(false, () => {
        const t = this.type(depth + 1);
        if (this.peek() !== ")")
          this.fail(
            `expected ")" to close the "(" at offset ${start}, found ${this.found()}`,
          );
        this.pos++;
        return t;
      });
    }
    const name = this.identifier();
    if (name === undefined) this.fail(`expected a type, found ${this.found()}`);
    const call = this.peek() === "(";
    if (PRIMITIVES.has(name)) {
      if (call) this.fail(`"${name}" takes no arguments`);
      return { kind: name as "string" };
    }
    if (name === "optional") {
      this.pos = start;
      this.fail(OPTIONAL);
    }
    const what = CONSTRUCTORS[name];
    if (what === undefined) {
      this.pos = start;
      return this.fail(`unknown type "${name}"`);
    }
    if (!call)
      this.fail(`"${name}" needs its argument in parentheses: ${what}`);
    this.pos++;
    return this.within(false, () => {
      if (this.peek() === ")")
        this.fail(`${name}() needs an argument: ${what}`);
      let t: HclType;
      if (name === "object") t = this.objectArg(depth, what);
      else if (name === "tuple") t = this.tupleArg(depth, what);
      else t = { kind: name as "list", elem: this.type(depth + 1) };
      this.closeCall(name, what);
      return t;
    });
  }

  /** A literal value (see {@link parseHclLiteral}). */
  literal(depth: number): unknown {
    if (depth > MAX_DEPTH) this.fail(`value nested deeper than ${MAX_DEPTH}`);
    const c = this.peek();
    if (c === '"') return this.quoted().normalize("NFC");
    if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number();
    if (c === "[") {
      this.pos++;
      return this.within(false, () => {
        const out: unknown[] = [];
        while (this.peek() !== "]") {
          out.push(this.literal(depth + 1));
          const sep = this.peek();
          if (sep === ",") this.pos++;
          else if (sep !== "]") this.fail(`expected "," or "]" after an element, found ${this.found()}`);
        }
        this.pos++;
        return out;
      });
    }
    if (c === "{") {
      this.pos++;
      return this.within(true, () => {
        const out: Record<string, unknown> = {};
        for (let first = true; ; first = false) {
          this.skipLines();
          if (this.src[this.pos] === "}") break;
          const key = this.attrName(first);
          const sep = this.peek();
          if (sep !== "=" && sep !== ":") this.fail(`expected "=" or ":" after key ${JSON.stringify(key)}, found ${this.found()}`);
          this.pos++;
          const v = this.within(false, () => this.literal(depth + 1));
          // A repeated key: the last value wins, as in HCL's object constructor.
          Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
          const next = this.peek();
          if (next === "}") break;
          if (next === ",") this.pos++;
          else if (!this.atNewline()) this.fail(`expected "," or a newline after key ${JSON.stringify(key)}, or "}", found ${this.found()}`);
        }
        this.pos++;
        return out;
      });
    }
    const start = this.pos;
    const word = this.identifier();
    if (word === "null") return null;
    if (word === "true" || word === "false") return word === "true";
    this.pos = start;
    return this.fail(`expected a value (null, a bool, a number, a quoted string, [...] or {...}), found ${this.found()}`);
  }

  /** A number literal, after an optional unary minus: `-1.5e3`. */
  number(): number {
    let sign = 1;
    if (this.src[this.pos] === "-") {
      this.pos++;
      sign = -1;
      this.skip();
    }
    const m = /[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;
    m.lastIndex = this.pos;
    const text = m.exec(this.src)?.[0];
    if (text === undefined) this.fail(`expected a number, found ${this.found()}`);
    this.pos += text.length;
    return sign * Number(text);
  }

  tupleArg(depth: number, what: string): HclType {
    if (this.peek() !== "[")
      this.fail(`tuple takes ${what}; found ${this.found()}`);
    this.pos++;
    return this.within(false, () => {
      const elems: HclType[] = [];
      while (this.peek() !== "]") {
        elems.push(this.type(depth + 1));
        const c = this.peek();
        if (c === ",") this.pos++;
        else if (c !== "]")
          this.fail(
            `expected "," or "]" after a tuple element, found ${this.found()}`,
          );
      }
      this.pos++;
      return { kind: "tuple", elems };
    });
  }

  objectArg(depth: number, what: string): HclType {
    if (this.peek() !== "{")
      this.fail(`object takes ${what}; found ${this.found()}`);
    this.pos++;
    return this.within(true, () => {
      const attrs = new Map<string, HclType>();
      for (let first = true; ; first = false) {
        this.skipLines();
        if (this.src[this.pos] === "}") break;
        const key = this.attrName(first);
        const sep = this.peek();
        if (sep !== "=" && sep !== ":") {
          this.fail(
            `expected "=" or ":" after attribute name ${JSON.stringify(key)}, found ${this.found()}`,
          );
        }
        this.pos++;
        // The type must start on the same line: type() stops at a newline here.
        // A repeated attribute replaces the earlier one: Nomad builds the attribute map from an
        // HCL object constructor, where a repeated key's last value wins.
        attrs.set(key, this.type(depth + 1));
        const c = this.peek();
        if (c === "}") break;
        if (c === ",") this.pos++;
        else if (!this.atNewline()) {
          this.fail(
            `expected "," or a newline after attribute ${JSON.stringify(key)}, or "}", found ${this.found()}`,
          );
        }
      }
      this.pos++;
      return { kind: "object", attrs };
    });
  }

  /** A bare identifier or a quoted string (cty normalizes either to NFC), or a whole number. */
  attrName(first: boolean): string {
    const start = this.pos;
    if (this.src[this.pos] === '"') return this.quoted().normalize("NFC");
    DIGITS.lastIndex = this.pos;
    const digits = DIGITS.exec(this.src)?.[0];
    if (digits !== undefined) {
      // A number key is converted to a string as cty does (007 names attribute "7"); other
      // number forms (1.5, 1e3) are left out: quoting says the same thing plainly.
      this.pos += digits.length;
      if (/[.eE\p{ID_Continue}-]/u.test(this.src[this.pos] ?? "")) {
        this.pos = start;
        this.fail("write a number-like attribute name quoted");
      }
      return BigInt(digits).toString();
    }
    const name = this.identifier();
    if (name === undefined) {
      this.fail(
        `expected an attribute name (an identifier or a quoted string), found ${this.found()}`,
      );
    }
    if (first && name === "for") {
      this.pos = start;
      this.fail(
        'a bare "for" opening {...} begins a for expression in HCL; quote the attribute name: "for" = ...',
      );
    }
    return name.normalize("NFC");
  }

  /** What a quoted string is in the input, for error messages. */
  get quotedNoun(): string {
    return this.what === "type" ? "attribute name" : "string";
  }

  /** A quoted string without template sequences, unescaped as hclsyntax does. */
  quoted(): string {
    const open = this.pos++;
    const src = this.src;
    let out = "";
    for (;;) {
      const c = src[this.pos];
      if (c === undefined) {
        this.pos = open;
        this.fail(`unterminated quoted ${this.quotedNoun}`);
      }
      if (c === '"') {
        this.pos++;
        return out;
      }
      if (c === "\n" || c === "\r")
        this.fail(
          `a quoted ${this.quotedNoun} cannot span lines (write a newline as "\\n")`,
        );
      if ((c === "$" || c === "%") && src[this.pos + 1] === "{") {
        this.fail(
          `"${c}{" begins a template sequence, which ${this.what === "type" ? "an attribute name" : "a literal"} cannot hold; write "${c}${c}{" for a literal "${c}{"`,
        );
      }
      if (
        (c === "$" || c === "%") &&
        src[this.pos + 1] === c &&
        src[this.pos + 2] === "{"
      ) {
        out += `${c}{`;
        this.pos += 3;
      } else if (c === "\\") {
        out += this.escape();
      } else {
        out += c;
        this.pos++;
      }
    }
  }

  escape(): string {
    const e = this.src[this.pos + 1];
    const simple: Record<string, string> = {
      n: "\n",
      r: "\r",
      t: "\t",
      '"': '"',
      "\\": "\\",
    };
    if (e !== undefined && Object.hasOwn(simple, e)) {
      this.pos += 2;
      return simple[e]!;
    }
    if (e === "u" || e === "U") {
      const n = e === "u" ? 4 : 8;
      const hex = this.src.slice(this.pos + 2, this.pos + 2 + n);
      if (!/^[0-9A-Fa-f]+$/.test(hex) || hex.length !== n)
        this.fail(`"\\${e}" must be followed by ${n} hexadecimal digits`);
      const code = parseInt(hex, 16);
      if (code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
        this.fail(`"\\${e}${hex}" is not a Unicode character`);
      this.pos += 2 + n;
      return String.fromCodePoint(code);
    }
    return this.fail(
      `invalid escape sequence ${JSON.stringify(`\\${e ?? ""}`)} (HCL has \\n, \\r, \\t, \\", \\\\, \\uNNNN and \\UNNNNNNNN)`,
    );
  }
}
