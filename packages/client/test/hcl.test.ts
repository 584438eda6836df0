// @nomadkit/client/hcl, imported as a user (or @nomadkit/server, which the plugin loads) does: the
// HCL type-expression parser, in both builds, and importing nothing else of the package.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import {
  HCL_NUMBER_TEXT,
  formatHclType,
  parseHclLiteral,
  parseHclType,
  shortestDecimal,
} from "@nomadkit/client/hcl";
import { describe, expect, it } from "vitest";

const require = createRequire(import.meta.url);

describe("@nomadkit/client/hcl", () => {
  it("parses type expressions, spaces and all, and formats them back canonically", () => {
    expect(parseHclType("list(map(string))")).toEqual({
      kind: "list",
      elem: { kind: "map", elem: { kind: "string" } },
    });
    const t = parseHclType(
      " set( object({ source = string, readonly = bool }) ) ",
    );
    expect(formatHclType(t)).toBe("set(object({source=string,readonly=bool}))");
    expect(formatHclType(parseHclType("set(tuple([string, number,]))"))).toBe(
      "set(tuple([string,number]))",
    );
    expect(formatHclType(parseHclType("object({})"))).toBe("object({})");
  });

  it("throws a TypeError naming the problem", () => {
    expect(() => parseHclType("lists(string)")).toThrow(TypeError);
    expect(() => parseHclType("lists(string)")).toThrow(
      'invalid HCL type "lists(string)" at offset 0: unknown type "lists"',
    );
    // An identifier has no spaces in it.
    expect(() => parseHclType("str ing")).toThrow(/unknown type "str"/);
    expect(() => parseHclType("list(string")).toThrow(/expected "\)"/);
  });

  // Nomad parses Attr.type with hclsyntax.ParseExpression, so the syntax is HCL's native
  // expression syntax: these are the forms a type copied from a Go driver's spec can take.
  describe("HCL expression syntax, as Nomad parses it", () => {
    const mounts = {
      kind: "object",
      attrs: new Map([
        ["source", { kind: "string" }],
        ["ports", { kind: "list", elem: { kind: "number" } }],
      ]),
    };

    it("separates object attributes with newlines or commas, a trailing comma allowed", () => {
      expect(
        parseHclType("object({\n  source = string\n  ports = list(number)\n})"),
      ).toEqual(mounts);
      expect(
        parseHclType(
          "object({\r\n\r\n  source = string,\r\n  ports = list(number),\r\n})",
        ),
      ).toEqual(mounts);
      expect(
        parseHclType("object({source = string, ports = list(number),})"),
      ).toEqual(mounts);
      // Inside parentheses and brackets a newline is only spacing, as anywhere outside braces.
      expect(
        parseHclType(
          "object({\n  source = string\n  ports = list(\n    number\n  )\n})",
        ),
      ).toEqual(mounts);
      expect(
        formatHclType(parseHclType("\ntuple([\n  string,\n  bool,\n])\n")),
      ).toBe("tuple([string,bool])");
      expect(formatHclType(parseHclType("object({\n})"))).toBe("object({})");
    });

    it("rejects what HCL's object constructor rejects, naming the attribute and the line", () => {
      // Two attributes on one line need a comma.
      expect(() =>
        parseHclType("object({source = string ports = list(number)})"),
      ).toThrow(
        'at offset 24: expected "," or a newline after attribute "source", or "}", found "ports"',
      );
      // The "=" and the type stay on the line of the name.
      expect(() => parseHclType("object({\n  source\n  = string\n})")).toThrow(
        'at offset 17 (line 2, column 9): expected "=" or ":" after attribute name "source", found a newline',
      );
      expect(() =>
        parseHclType("object({\n  source =\n    string\n})"),
      ).toThrow("(line 2, column 11): expected a type, found a newline");
      expect(() =>
        parseHclType("object({source = string,, ports = bool})"),
      ).toThrow(
        'expected an attribute name (an identifier or a quoted string), found ","',
      );
      // A tuple's elements need commas, newlines or not.
      expect(() => parseHclType("tuple([\n  string\n  bool\n])")).toThrow(
        '(line 3, column 3): expected "," or "]" after a tuple element, found "bool"',
      );
    });

    it('takes ":" as well as "=" between an attribute name and its type', () => {
      expect(
        parseHclType("object({source: string, ports: list(number)})"),
      ).toEqual(mounts);
      expect(
        parseHclType("object({\n  source : string\n  ports = list(number)\n})"),
      ).toEqual(mounts);
    });

    it("skips # and // line comments and /* */ block comments", () => {
      expect(
        parseHclType(
          [
            "# mounts, as the Go driver declares them",
            "object({ // one per volume",
            "  source = string # host path",
            "  /* container side: */ ports = list(/* tcp */ number) // trailing",
            "}) # done",
          ].join("\n"),
        ),
      ).toEqual(mounts);
      // A line comment ends its line, so it separates attributes as a newline does...
      expect(
        parseHclType("object({source = string # path\nports = list(number)})"),
      ).toEqual(mounts);
      // ...and a block comment, even over several lines, is only spacing.
      expect(
        parseHclType(
          "object({source = /* a\n */ string, ports = list(number)})",
        ),
      ).toEqual(mounts);
      expect(() =>
        parseHclType("object({source = string /*\n*/ ports = list(number)})"),
      ).toThrow(
        'expected "," or a newline after attribute "source", or "}", found "ports"',
      );
      expect(
        formatHclType(parseHclType("list(string) // no newline at the end")),
      ).toBe("list(string)");
    });

    it("names an unterminated block comment where it starts", () => {
      expect(() => parseHclType("list(string /* element")).toThrow(
        'invalid HCL type "list(string /* element" at offset 12: unterminated comment: "/*" without a closing "*/"',
      );
      expect(() => parseHclType("string /* a */ /")).toThrow(
        /at offset 15: unexpected "\/"/,
      );
    });

    it("rejects optional(...), which Nomad's type functions do not have, saying why", () => {
      // Nomad evaluates the type with its own list/set/map/tuple/object functions (not HCL's
      // typeexpr), so any optional(...) makes it refuse the whole schema.
      for (const [expr, at] of [
        ["object({source = string, ports = optional(list(number))})", 33],
        ["object({ports = optional(number, 8080)})", 16],
        ["list(optional(string))", 5],
        ["optional(string)", 0],
      ] as const) {
        expect(() => parseHclType(expr)).toThrow(TypeError);
        expect(() => parseHclType(expr)).toThrow(
          `at offset ${at}: optional(...) is not supported: Nomad evaluates Attr types with its own type functions`,
        );
        expect(() => parseHclType(expr)).toThrow(
          /There is no function named \\"optional\\"/,
        );
      }
    });

    it("takes quoted attribute names, unescaped as HCL does, and formats them back quoted", () => {
      const t = parseHclType(
        'object({"a b" = string, "read-only" = bool, "tab\\there" = number, "$${x}%%{y}" = any, "\\u00e9\\U0001F600\\\\\\"" = string})',
      );
      expect(t.kind === "object" && [...t.attrs.keys()]).toEqual([
        "a b",
        "read-only",
        "tab\there",
        "${x}%{y}",
        'é😀\\"',
      ]);
      expect(formatHclType(t)).toBe(
        'object({"a b"=string,read-only=bool,"tab\\there"=number,"$${x}%%{y}"=any,"é😀\\\\\\""=string})',
      );
      expect(parseHclType(formatHclType(t))).toEqual(t);
      // cty normalizes names to NFC: a decomposed é names the same attribute as a composed one.
      expect(parseHclType('object({"e\u0301" = string})')).toEqual(
        parseHclType("object({\u00e9 = string})"),
      );
      // A bare "for" right after "{" would start a for expression; quoted, it is a name.
      expect(formatHclType(parseHclType('object({"for" = string})'))).toBe(
        'object({"for"=string})',
      );
      expect(() => parseHclType("object({for = string})")).toThrow(
        /quote the attribute name/,
      );
      // A whole-number key names the attribute its value converts to, as cty converts it.
      expect(
        formatHclType(parseHclType("object({1 = string, 007 = bool})")),
      ).toBe('object({"1"=string,"7"=bool})');
    });

    it("rejects quoted names HCL rejects or that are not plain strings", () => {
      expect(() => parseHclType('object({"a${b}" = string})')).toThrow(
        'at offset 10: "${" begins a template sequence, which an attribute name cannot hold',
      );
      expect(() => parseHclType('object({"a\\q" = string})')).toThrow(
        'at offset 10: invalid escape sequence "\\\\q"',
      );
      expect(() => parseHclType('object({"\\u12" = string})')).toThrow(
        '"\\u" must be followed by 4 hexadecimal digits',
      );
      expect(() => parseHclType('object({"\\ud800" = string})')).toThrow(
        "is not a Unicode character",
      );
      expect(() => parseHclType('object({"a\nb" = string})')).toThrow(
        "a quoted attribute name cannot span lines",
      );
      expect(() => parseHclType('object({"a = string})')).toThrow(
        "at offset 8: unterminated quoted attribute name",
      );
      // A parenthesized key is an expression, not an attribute name; a fractional one is
      // clearer quoted.
      expect(() => parseHclType("object({(a) = string})")).toThrow(
        'expected an attribute name (an identifier or a quoted string), found "("',
      );
      expect(() => parseHclType("object({1.5 = string})")).toThrow(
        "at offset 8: write a number-like attribute name quoted",
      );
      expect(() => parseHclType("object({a.b = string})")).toThrow(
        'expected "=" or ":" after attribute name "a", found "."',
      );
    });

    it("checks calls as HCL does: one argument, an optional trailing comma", () => {
      expect(formatHclType(parseHclType("map(\n  list(string,),\n)"))).toBe(
        "map(list(string))",
      );
      expect(formatHclType(parseHclType("(list((string)))"))).toBe(
        "list(string)",
      );
      expect(() => parseHclType("list(string, number)")).toThrow(
        "at offset 13: list(...) takes one argument: list(T), T the element type",
      );
      expect(() => parseHclType("set()")).toThrow("set() needs an argument");
      expect(() => parseHclType("map")).toThrow(
        '"map" needs its argument in parentheses',
      );
      expect(() => parseHclType("list(string(x))")).toThrow(
        'at offset 11: "string" takes no arguments',
      );
      expect(() => parseHclType("tuple(string)")).toThrow(
        'tuple takes tuple([T, ...]), the element types in brackets; found "string"',
      );
    });

    it("takes only HCL's spacing: spaces, tabs and newlines, and a leading byte order mark", () => {
      expect(formatHclType(parseHclType("\uFEFF\tlist( string )"))).toBe(
        "list(string)",
      );
      expect(() => parseHclType("list(\fstring)")).toThrow(
        "at offset 5: expected a type, found character U+000C (HCL takes only spaces, tabs and newlines between tokens)",
      );
      expect(() => parseHclType("list(string\r)")).toThrow(
        /found character U\+000D/,
      );
    });

    it("throws a TypeError, not a stack overflow, for absurd nesting", () => {
      const deep = "list(".repeat(100_000) + "string" + ")".repeat(100_000);
      expect(() => parseHclType(deep)).toThrow(TypeError);
      expect(() => parseHclType(deep)).toThrow("type nested deeper than 256");
    });
  });

  it("is the same in the CommonJS build", () => {
    const cjs =
      require("@nomadkit/client/hcl") as typeof import("@nomadkit/client/hcl");
    expect(cjs.formatHclType(cjs.parseHclType("map( list(number) )"))).toBe(
      "map(list(number))",
    );
    expect(() => cjs.parseHclType("map")).toThrow(TypeError);
  });

  it("imports nothing, so a plugin loading it does not load the host runtime", () => {
    const cjsFile = require.resolve("@nomadkit/client/hcl");
    expect(cjsFile).toMatch(/\/dist\/cjs\/hcl\.js$/);
    // Comment lines start with " *", so their example imports do not count.
    expect(readFileSync(cjsFile, "utf8")).not.toMatch(/\brequire\(/);
    expect(
      readFileSync(cjsFile.replace("/dist/cjs/", "/dist/esm/"), "utf8"),
    ).not.toMatch(/^\s*(import|export .* from)\b/m);
  });
});

describe("HCL numbers as text", () => {
  it("shortestDecimal gives the decimal String(n) writes, as digits × 10^exp, whatever the sign", () => {
    expect(shortestDecimal(1e23)).toEqual({ digits: "1", exp: 23 });
    expect(shortestDecimal(2 ** 60)).toEqual({
      digits: "1152921504606847000",
      exp: 0,
    }); // as String(n) writes it
    expect(shortestDecimal(-0.15)).toEqual({ digits: "15", exp: -2 });
    expect(shortestDecimal(1.5e-300)).toEqual({ digits: "15", exp: -301 });
    expect(shortestDecimal(0)).toEqual({ digits: "0", exp: 0 });
    for (const n of [0.1, 123.456, 8080, 5e-324, Number.MAX_VALUE]) {
      const { digits, exp } = shortestDecimal(n);
      expect(Number(`${digits}e${exp}`)).toBe(n);
    }
    expect(() => shortestDecimal(Infinity)).toThrow(RangeError);
  });
  it("HCL_NUMBER_TEXT takes what cty converts to a number", () => {
    for (const t of ["8080", "-1.5e3", ".5", "5.", "+1E-2"])
      expect(HCL_NUMBER_TEXT.test(t)).toBe(true);
    for (const t of ["0x10", "1e", "", " 1", "NaN", "Infinity"])
      expect(HCL_NUMBER_TEXT.test(t)).toBe(false);
  });
});

describe("parseHclLiteral", () => {
  it("gives the value Nomad makes of a simple literal: HCL's escapes and template escapes, NFC, objects with = or :", () => {
    expect(parseHclLiteral('"$${NOMAD_TASK_DIR}/d %%{x} \\"q\\" \\\\ \\n \\u00e9"')).toBe('${NOMAD_TASK_DIR}/d %{x} "q" \\ \n \u00e9');
    expect(parseHclLiteral('"e\u0301"')).toBe("\u00e9");
    expect(parseHclLiteral('{"k" = "v", "a b" = [1, -2.5, 1e3, true, false, null], 7 = {}}')).toStrictEqual({ k: "v", "a b": [1, -2.5, 1000, true, false, null], "7": {} });
    expect(parseHclLiteral('{\n  LANG = "C" # comment\n  "TZ": "UTC",\n}')).toStrictEqual({ LANG: "C", TZ: "UTC" });
    expect(parseHclLiteral("[\n  1,\n  2,\n]")).toStrictEqual([1, 2]);
    expect(Object.keys(parseHclLiteral('{"__proto__" = 1}') as object)).toEqual(["__proto__"]);
  });
  it("refuses what Nomad would have to evaluate, with a TypeError", () => {
    for (const src of ['upper("x")', '"${x}"', "1 + 2", "var.x", "{a = 1", "[1 2]", ""]) expect(() => parseHclLiteral(src), src).toThrow(TypeError);
  });
});
