// parseHclType (@nomadkit/client/hcl) against Nomad's reading of an hclspec Attr type: HCL's own
// parser (hclsyntax, from Debian's golang-github-hashicorp-hcl-v2-dev) and the evaluation Nomad
// applies, string/number/bool/any as variables and list/set/map/tuple/object as functions
// (tools/hcl-type-go). Each type must be taken by both as the same cty type, or refused by both.
// The first run installs Debian's Go packages and builds, which takes minutes; later runs reuse
// node_modules/.cache/nomadkit-go.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { parseHclType, type HclType } from "@nomadkit/client/hcl";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { buildGoCommand } from "./run-process.js";

const skip =
  process.platform !== "linux" || !existsSync("/usr/bin/dpkg")
    ? "the Go reader is built from Debian's Go packages (Linux with dpkg)"
    : undefined;

let bin = "";

/** What Nomad makes of each type: its cty type in cty's JSON notation, or its diagnostics. */
function nomad(
  types: readonly string[],
): Array<{ type?: unknown; error?: string }> {
  const r = spawnSync(bin, [], {
    input: JSON.stringify(types),
    encoding: "utf8",
    maxBuffer: 64 << 20,
  });
  if (r.status !== 0)
    throw new Error(`hcl-type-go: exit ${r.status}\n${r.stderr}`);
  return JSON.parse(r.stdout) as Array<{ type?: unknown; error?: string }>;
}

/** `t` in cty's JSON type notation, objects' keys sorted. */
function ctyJson(t: HclType): unknown {
  switch (t.kind) {
    case "any":
      return "dynamic";
    case "list":
    case "set":
    case "map":
      return [t.kind, ctyJson(t.elem)];
    case "object":
      return [
        "object",
        Object.fromEntries(
          [...t.attrs]
            .sort(([a], [b]) => (a < b ? -1 : 1))
            .map(([k, v]) => [k, ctyJson(v)]),
        ),
      ];
    case "tuple":
      return ["tuple", t.elems.map(ctyJson)];
    default:
      return t.kind;
  }
}

function sorted(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sorted);
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(
      Object.entries(v)
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([k, x]) => [k, sorted(x)]),
    );
  }
  return v;
}

/** The types on which parseHclType and Nomad disagree, each with both readings. */
function disagreements(types: readonly string[]): string[] {
  const theirs = nomad(types);
  const out: string[] = [];
  types.forEach((src, i) => {
    let ours: unknown;
    let err: unknown;
    try {
      ours = ctyJson(parseHclType(src));
    } catch (e) {
      err = e;
    }
    // Anything but a TypeError is a crash, whatever Nomad says.
    if (err !== undefined && !(err instanceof TypeError))
      out.push(`${JSON.stringify(src)}: threw ${String(err)}`);
    const them = theirs[i]!;
    const same =
      them.error !== undefined
        ? err !== undefined
        : err === undefined &&
          JSON.stringify(ours) === JSON.stringify(sorted(them.type));
    if (!same) {
      const ourText =
        err !== undefined
          ? `refused (${(err as Error).message})`
          : JSON.stringify(ours);
      const theirText =
        them.error !== undefined
          ? `refused (${them.error})`
          : JSON.stringify(them.type);
      out.push(
        `${JSON.stringify(src)}: nomad ${theirText}, parseHclType ${ourText}`,
      );
    }
  });
  return out;
}

// Taken by both, or refused by both.
const CASES = [
  "string",
  " list( string ) ",
  "map(list(number))",
  "set(object({ source = string, readonly = bool }))",
  "object({})",
  "tuple([])",
  "tuple([string, number,])",
  "any",
  "object({a = any})",
  "object({a=string,a=number})",
  // Newline-separated attributes, trailing commas, newlines inside calls and brackets.
  "object({\n  a = string\n  b = list(number)\n})",
  "object({\r\n\r\n  a = string,\r\n  b = list(number),\r\n})",
  "object({\n  a = string\n  b = list(\n    number\n  )\n})",
  "\ntuple([\n  string,\n  bool,\n])\n",
  "object({\n})",
  "object({\n}\n)",
  "object({a = string,\n b = number})",
  "object({ a = string, })",
  "tuple([string\n,number])",
  "list\n(string)",
  "object({a = string\n\n})",
  "list(string\r\n)",
  "object({a = string b = number})",
  "object({\n  a\n  = string\n})",
  "object({\n  a =\n    string\n})",
  "object({a = string,, b = bool})",
  "object({a = string\n,b = number})",
  "object({a = list\n(string)})",
  "tuple([\n  string\n  bool\n])",
  // ":" for "=".
  "object({a: string, b: list(number)})",
  'object({"a" : string})',
  // Comments.
  "# c\nobject({ // x\n  a = string # y\n  /* z */ b = list(/* t */ number) // w\n}) # done",
  "object({a = string # p\nb = list(number)})",
  "object({a = /* a\n */ string, b = list(number)})",
  "object({a = string /*\n*/ b = list(number)})",
  "object({a = string\n/* c\n*/\nb = number})",
  "object({a = string,\n# only a comment\n})",
  "object({/* c */ a = string})",
  "object({a = string}/* c */)",
  "object({a=string#c\n})",
  "object({a=string//c\r\n})",
  "list(# c\nstring)",
  "list(string) // no newline at the end",
  "list(string /* element",
  "string /* a */ /",
  "# only",
  // optional(...), which Nomad's type functions do not have.
  "object({a = string, b = optional(list(number))})",
  "object({b = optional(number, 8080)})",
  "list(optional(string))",
  "optional(string)",
  // Attribute names: quoted, escaped, NFC, keywords, numbers.
  'object({"a b" = string, "read-only" = bool, "tab\\there" = number, "$${x}%%{y}" = any, "\\u00e9\\U0001F600\\\\\\"" = string})',
  'object({"e\u0301" = string, "\u00e9" = number})',
  "object({a-b = string, _x = number, true = bool, null = any, \u00e9 = string})",
  'object({"for" = string})',
  "object({for = string})",
  'object({"" = string})',
  'object({"a" = string, a = number})',
  "object({1 = string, 007 = number})",
  "object({1a = string})",
  'object({"a${b}" = string})',
  'object({"a\\q" = string})',
  'object({"\\u12" = string})',
  'object({"\\ud800" = string})',
  'object({"a\nb" = string})',
  'object({"a = string})',
  "object({a.b = string})",
  "object({(a) = string})",
  // Calls.
  "map(\n  list(string,),\n)",
  "(list((string)))",
  "list(string, number)",
  "list(string...)",
  "set()",
  "map",
  "list(string(x))",
  "tuple(string)",
  "String",
  "list(String)",
  "list(null)",
  "{a = string}",
  'object({a = "string"})',
  "object({a = string}) extra",
  // Spacing: only spaces, tabs and newlines (a leading byte order mark is dropped).
  "\uFEFF\tlist( string )",
  "list(\fstring)",
  "list(string\r)",
  "list(\u00a0string)",
  "",
  "\n\n",
];

// Nomad takes these; parseHclType refuses them with a TypeError. Rare forms no driver spec uses: a
// null type (Nomad's "any"), a for expression, a fractional or exponent number as attribute name.
const GAPS = [
  "null",
  "tuple([for x in [] : string])",
  "object({1.5 = string})",
  "object({1e3 = string})",
];

// Random types, written with random spacing, comments, separators and quoting.
const NAMES = [
  "a",
  "source",
  "read-only",
  "_x",
  "a1",
  "\u00e9",
  "e\u0301",
  "a b",
  "for",
  "1",
  "007",
  "true",
  "null",
  "${x}",
  "%{y}",
  "tab\there",
  'q"uote',
  "back\\slash",
  "",
  "x.y",
];
const typeArb: fc.Arbitrary<HclType> = fc.letrec<{ t: HclType }>((tie) => ({
  t: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constantFrom<HclType>(
      { kind: "string" },
      { kind: "number" },
      { kind: "bool" },
      { kind: "any" },
    ),
    fc.record({
      kind: fc.constantFrom("list" as const, "set" as const, "map" as const),
      elem: tie("t"),
    }),
    fc
      .array(fc.tuple(fc.constantFrom(...NAMES), tie("t")), { maxLength: 4 })
      .map((entries): HclType => ({ kind: "object", attrs: new Map(entries) })),
    fc
      .array(tie("t"), { maxLength: 3 })
      .map((elems): HclType => ({ kind: "tuple", elems })),
  ),
})).t;

/** `t` written with choices from `pick` (spacing, comments, separators, quoting). */
function render(t: HclType, pick: (n: number) => number): string {
  const any = <T>(xs: readonly T[]): T => xs[pick(xs.length)]!;
  // Between tokens where a newline is spacing, and inside an object where it ends an attribute.
  const gap = () =>
    any([
      "",
      "",
      " ",
      " ",
      "\t",
      "\n",
      "\r\n",
      " /* c */ ",
      "/*\n*/",
      " # c\n",
      " // c\n",
    ]);
  const inline = () => any(["", " ", " ", "\t", "/* c */"]);
  const name = (n: string): string => {
    if (
      /^([\p{ID_Start}_][\p{ID_Continue}-]*|[0-9]+)$/u.test(n) &&
      pick(2) === 0
    )
      return n;
    let q = "";
    for (const c of n) {
      if (c === "\\" || c === '"') q += `\\${c}`;
      else if (c === "\t") q += any(["\\t", "\t"]);
      else if (c === "\n") q += "\\n";
      else if (c.codePointAt(0)! > 0x7f && pick(2) === 0)
        q += `\\u${c.codePointAt(0)!.toString(16).padStart(4, "0")}`;
      else q += c;
    }
    return `"${q.replace(/([$%])\{/g, "$1$1{")}"`;
  };
  const go = (t: HclType): string => {
    switch (t.kind) {
      case "list":
      case "set":
      case "map":
        return `${t.kind}(${gap()}${go(t.elem)}${gap()}${any(["", ","])})`;
      case "tuple":
        return `tuple([${gap()}${t.elems.map((e) => go(e) + gap()).join(`,${gap()}`)}${any(["", ","])}])`;
      case "object": {
        const items = [...t.attrs].map(
          ([k, v]) =>
            `${name(k)}${inline()}${any(["=", ":"])}${inline()}${go(v)}${inline()}`,
        );
        const sep = () =>
          any([",", ",", "\n", ",\n", "\r\n", " # c\n", ", // c\n"]);
        return `object(${gap()}{${any(["", "\n", " "])}${items.map((it, i) => it + (i < items.length - 1 ? sep() : any(["", ",", "\n"]))).join("")}}${gap()})`;
      }
      default:
        return t.kind;
    }
  };
  return `${gap()}${go(t)}${gap()}`;
}

const rendered = fc
  .tuple(typeArb, fc.array(fc.nat(), { minLength: 200, maxLength: 200 }))
  .map(([t, choices]) => {
    let i = 0;
    return render(t, (n) => choices[i++ % choices.length]! % n);
  });

/** One or two edits: a character deleted, or one of HCL's significant ones inserted. */
const mutated = fc
  .tuple(
    rendered,
    fc.array(
      fc.tuple(
        fc.nat(),
        fc.boolean(),
        fc.constantFrom(...'(){}[],=:"#/*\n\r\t\\ a1.-$%'),
      ),
      { minLength: 1, maxLength: 2 },
    ),
  )
  .map(([s, edits]) => {
    for (const [at, del, c] of edits) {
      const i = s.length === 0 ? 0 : at % (s.length + 1);
      s = del ? s.slice(0, i) + s.slice(i + 1) : s.slice(0, i) + c + s.slice(i);
    }
    return s;
  });

describe.skipIf(skip !== undefined)(
  `parseHclType reads types as Nomad does${skip ? ` [skipped: ${skip}]` : ""}`,
  () => {
    beforeAll(async () => {
      // First use on a fresh machine installs Debian's Go packages and builds: minutes.
      bin = await buildGoCommand("tools/hcl-type-go");
    }, 20 * 60_000);

    it("takes what Nomad takes, as the same type, and refuses what Nomad refuses", () => {
      expect(disagreements(CASES)).toEqual([]);
    });

    it("refuses, with a TypeError, the rare forms Nomad takes that it leaves out", () => {
      expect(nomad(GAPS).map((r) => r.error)).toEqual(
        GAPS.map(() => undefined),
      );
      for (const src of GAPS)
        expect(() => parseHclType(src)).toThrow(TypeError);
    });

    it("agrees with Nomad on random types written every way HCL allows", () => {
      // Fixed seeds: the same inputs every run.
      const types = fc.sample(rendered, { seed: 20240611, numRuns: 400 });
      expect(disagreements(types)).toEqual([]);
      // Most must be valid, or this would test only the refusals.
      const accepted = nomad(types).filter((r) => r.error === undefined).length;
      expect(accepted).toBeGreaterThan(types.length / 2);
    });

    it("agrees with Nomad on those types with a character deleted or inserted", () => {
      expect(
        disagreements(fc.sample(mutated, { seed: 20240612, numRuns: 1500 })),
      ).toEqual([]);
    });
  },
);
