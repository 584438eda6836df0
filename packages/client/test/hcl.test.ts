// @nomadkit/client/hcl, imported as a user (or @nomadkit/server, which the plugin loads) does: the
// HCL type-expression parser, in both builds, and importing nothing else of the package.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { formatHclType, parseHclType } from "@nomadkit/client/hcl";
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
      'invalid HCL type "lists(string)" at offset 5: unknown type "lists"',
    );
    // An identifier has no spaces in it.
    expect(() => parseHclType("str ing")).toThrow(/unknown type "str"/);
    expect(() => parseHclType("list(string")).toThrow(/expected "\)"/);
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
