// Configs are shaped like Nomad's HCL decoder shapes them before msgpack encoding.
import { create } from "@bufbuild/protobuf";
import { decode } from "@msgpack/msgpack";
import { SpecSchema } from "@nomadkit/protocol/hclspec";
import { describe, expect, it } from "vitest";
import { ConfigRefusedError, configProblems, encodeCheckedConfig, encodeConfig, shapeConfig } from "../src/index.js";

const attr = (name: string, type: string, required = false) => create(SpecSchema, { block: { case: "Attr", value: { name, type, required } } });
const schema = create(SpecSchema, {
  block: {
    case: "object",
    value: {
      attributes: {
        command: attr("command", "string", true),
        args: attr("args", "list(string)"),
        create_network: create(SpecSchema, {
          block: { case: "default", value: { primary: attr("create_network", "bool"), default: { block: { case: "literal", value: { value: "false" } } } } },
        }),
        mount: create(SpecSchema, { block: { case: "blockList", value: { name: "mount" } } }),
      },
    },
  },
});

describe("shapeConfig", () => {
  it("fills every declared attribute: value, default literal, [] for block lists, else null", () => {
    expect(shapeConfig(schema, { command: "/bin/sleep" })).toEqual({ command: "/bin/sleep", args: null, create_network: false, mount: [] });
  });
  it("shapes nested blocks, replaces null with the default, converts primitive values as HCL does", () => {
    const bool = (name: string, dflt: string) =>
      create(SpecSchema, { block: { case: "default", value: { primary: attr(name, "bool"), default: { block: { case: "literal", value: { value: dflt } } } } } });
    const mountBody = create(SpecSchema, { block: { case: "object", value: { attributes: { target: attr("target", "string", true), readonly: bool("readonly", "false") } } } });
    const nested = create(SpecSchema, {
      block: {
        case: "object",
        value: {
          attributes: {
            port: attr("port", "number"),
            name: attr("name", "string"),
            debug: bool("debug", "true"),
            mount: create(SpecSchema, { block: { case: "blockList", value: { name: "mount", nested: mountBody } } }),
            volume: create(SpecSchema, { block: { case: "blockMap", value: { name: "volume", labels: ["name"], nested: mountBody } } }),
          },
        },
      },
    });
    expect(shapeConfig(nested, { port: "8080", name: 5, debug: null, mount: [{ target: "/data" }], volume: { v: { target: "/v", readonly: "true" } } })).toEqual({
      port: 8080,
      name: "5",
      debug: true,
      mount: [{ target: "/data", readonly: false }],
      volume: { v: { target: "/v", readonly: true } },
    });
    // What HCL would not convert stays as given, for the plugin to refuse.
    expect(shapeConfig(nested, { port: "eighty" })).toMatchObject({ port: "eighty", mount: [], volume: {} });
    // A block map as Nomad's HCL jobspec gives it (`volume "a" {}` `volume "b" {}`): an array of label objects, every label kept.
    expect(shapeConfig(nested, { volume: [{ a: [{ target: "/a" }] }, { b: [{ target: "/b" }] }] })).toMatchObject({
      volume: { a: { target: "/a", readonly: false }, b: { target: "/b", readonly: false } },
    });
    // Nomad refuses a label given twice (hcldec: "Duplicate volume block") and a label level without a label.
    expect(configProblems(nested, { volume: [{ a: { target: "/a" } }, { a: { target: "/b" } }] })).toEqual([
      '"volume.a" is given 2 blocks, one is allowed (a block map\'s labels must be unique)',
    ]);
    expect(configProblems(nested, { volume: [] })).toEqual(['"volume" needs a name label']);
    expect(configProblems(nested, { volume: [{ a: { target: "/a" } }, {}] })).toEqual([]);
    // An element that is not an object holds no label: Nomad refuses it, the kit no longer drops it unsaid.
    expect(configProblems(nested, { volume: ["a", { b: { target: "/b" } }] })).toEqual(['"volume[0]" is not an object of name labels']);
  });
  it("converts the elements of lists, sets and maps as cty does (nested too)", () => {
    const collections = create(SpecSchema, {
      block: {
        case: "object",
        value: {
          attributes: {
            args: attr("args", "list(string)"),
            ports: attr("ports", "set( number )"),
            env: attr("env", "map(string)"),
            matrix: attr("matrix", "list(map(bool))"),
          },
        },
      },
    });
    expect(
      shapeConfig(collections, { args: [8080, 2.5, true, "x"], ports: ["80", 443], env: { PORT: 8080, DEBUG: false }, matrix: [{ a: "true", b: "false" }] }),
    ).toEqual({ args: ["8080", "2.5", "true", "x"], ports: [80, 443], env: { PORT: "8080", DEBUG: "false" }, matrix: [{ a: true, b: false }] });
    // cty's primitive conversions: "1"/"0" are bools, numbers never take an exponent in a string.
    const prim = create(SpecSchema, { block: { case: "object", value: { attributes: { flags: attr("flags", "list(bool)"), big: attr("big", "list(string)") } } } });
    expect(shapeConfig(prim, { flags: ["1", "0", "true"], big: [1e21, 1e-7, 2.5] })).toEqual({ flags: [true, false, true], big: ["1000000000000000000000", "0.0000001", "2.5"] });
    // Not a collection where one is declared: left for the plugin to refuse.
    expect(shapeConfig(collections, { args: "x", env: [1] })).toMatchObject({ args: "x", env: [1] });
  });

  it("reads type expressions as HCL does: a repeated object attribute's last type, no spaces inside names", () => {
    const odd = create(SpecSchema, {
      block: { case: "object", value: { attributes: { o: attr("o", "object({ port = string, port = number })"), s: attr("s", "li st(string)") } } },
    });
    // An HCL object constructor keeps the last `port`; "li st" is no type (Nomad refuses it), so the value is left as given.
    expect(shapeConfig(odd, { o: { port: "8080" }, s: [1] })).toEqual({ o: { port: 8080 }, s: [1] });
    // A type as a Go driver's spec writes it: attributes on lines, comments, a quoted name, ":".
    const goStyle = create(SpecSchema, {
      block: { case: "object", value: { attributes: { v: attr("v", 'list(object({\n  # host side\n  source = string\n  "read-only": bool // quoted\n}))') } } },
    });
    expect(shapeConfig(goStyle, { v: [{ source: 5, "read-only": "true" }] })).toEqual({ v: [{ source: "5", "read-only": true }] });
  });

  it("holds each distinct element of a set once, as a cty set does, in the order Nomad sends them", () => {
    const sets = create(SpecSchema, {
      block: {
        case: "object",
        value: {
          attributes: {
            names: attr("names", "set(string)"),
            ports: attr("ports", "set(number)"),
            flags: attr("flags", "set(bool)"),
            mounts: attr("mounts", "set(object({ source = string, readonly = bool }))"),
            groups: attr("groups", "set(list(string))"),
            nested: attr("nested", "set(set(string))"),
            labels: attr("labels", "set(map(number))"),
            pairs: attr("pairs", "set(tuple([string, number]))"),
            list: attr("list", "list(string)"),
          },
        },
      },
    });
    expect(
      shapeConfig(sets, {
        // Equal once converted to the element type, as cty compares them.
        names: ["b", "a", "b", 5, "5"],
        ports: [80, "80", 443, 1.5, "1.50", 0, -0],
        flags: [true, "true", "1", false, "0"],
        // Objects attribute by attribute, whatever the key order; an absent attribute is a null one.
        mounts: [{ source: "/a", readonly: true }, { readonly: "true", source: "/a" }, { source: "/a", readonly: false }, { source: "/a" }, { source: "/a", readonly: null }],
        // Lists in order, sets as sets.
        groups: [["a", "b"], ["b", "a"], ["a", "b"]],
        nested: [["a", "b"], ["b", "a", "a"]],
        labels: [{ x: 1, y: "2" }, { y: 2, x: "1" }, { x: 1 }],
        pairs: [["a", 1], ["a", "1"], ["a", 2]],
        // A list keeps its repeats.
        list: ["a", "a"],
      }),
    ).toEqual({
      // cty's order for sets of primitives: strings by bytes, numbers ascending, false first.
      names: ["5", "a", "b"],
      ports: [0, 1.5, 80, 443],
      flags: [false, true],
      mounts: [{ source: "/a", readonly: true }, { source: "/a", readonly: false }, { source: "/a" }],
      groups: [["a", "b"], ["b", "a"]],
      nested: [["a", "b"]],
      labels: [{ x: 1, y: 2 }, { x: 1 }],
      pairs: [["a", 1], ["a", 2]],
      list: ["a", "a"],
    });
    // A null is an element apart from "" in cty; strings are compared in NFC.
    const strings = create(SpecSchema, { block: { case: "object", value: { attributes: { s: attr("s", "set(string)") } } } });
    expect(shapeConfig(strings, { s: ["", null, null, "", "\u00e9", "e\u0301"] })).toEqual({ s: ["", null, "\u00e9"] });
    // Byte order of UTF-8, not of UTF-16 (U+FF5E sorts before U+1F600 in UTF-16 code units).
    expect(shapeConfig(strings, { s: ["\u{1F600}", "\uFF5E", "Z", "a"] })).toEqual({ s: ["Z", "a", "\uFF5E", "\u{1F600}"] });
    // Not what the type says: compared as given, left for the plugin to refuse.
    expect(shapeConfig(strings, { s: [{ a: 1 }, { a: 1 }, [1], "x"] })).toEqual({ s: [{ a: 1 }, [1], "x"] });
  });

  it("holds each distinct block of a block set once (hcldec makes a cty set of them); a block list keeps repeats", () => {
    const block = (c: "blockList" | "blockSet", name: string, nested: ReturnType<typeof attr>) => create(SpecSchema, { block: { case: c, value: { name, nested } } });
    const body = (attributes: Record<string, ReturnType<typeof attr>>) => create(SpecSchema, { block: { case: "object", value: { attributes } } });
    const volume = body({
      source: attr("source", "string"),
      readonly: create(SpecSchema, {
        block: { case: "default", value: { primary: attr("readonly", "bool"), default: { block: { case: "literal", value: { value: "false" } } } } },
      }),
      tags: attr("tags", "set(string)"),
      // A nested block set compares as a set; a nested block list in order.
      opt: block("blockSet", "opt", body({ k: attr("k", "string") })),
      step: block("blockList", "step", body({ n: attr("n", "number") })),
    });
    const spec = body({ volume: block("blockSet", "volume", volume), each: block("blockList", "each", volume) });
    const blocks = [
      { source: "/a", opt: [{ k: "x" }, { k: "y" }] },
      // Equal to the first once shaped: the default filled in, "e"+U+0301 in NFC, a set in another order.
      { source: "/a", readonly: "false", tags: null, opt: [{ k: "y" }, { k: "x" }, { k: "x" }] },
      { source: "/a", readonly: true, opt: [{ k: "x" }, { k: "y" }] },
      { source: "caf\u00e9", tags: ["b", "a"], step: [{ n: 1 }, { n: 2 }] },
      { source: "cafe\u0301", tags: ["a", "b", "a"], step: [{ n: "1" }, { n: 2 }] },
      // A block list inside compares in order.
      { source: "caf\u00e9", tags: ["a", "b"], step: [{ n: 2 }, { n: 1 }] },
    ];
    const shaped = shapeConfig(spec, { volume: blocks, each: blocks }) as { volume: unknown[]; each: { source: string }[] };
    expect(shaped.each).toHaveLength(6);
    // Every string in NFC, as cty holds it.
    expect(shaped.each[4]!.source).toBe("caf\u00e9");
    expect(shaped.volume).toEqual([
      { source: "/a", readonly: false, tags: null, opt: [{ k: "x" }, { k: "y" }], step: [] },
      { source: "/a", readonly: true, tags: null, opt: [{ k: "x" }, { k: "y" }], step: [] },
      { source: "caf\u00e9", readonly: false, tags: ["a", "b"], opt: [], step: [{ n: 1 }, { n: 2 }] },
      { source: "caf\u00e9", readonly: false, tags: ["a", "b"], opt: [], step: [{ n: 2 }, { n: 1 }] },
    ]);
  });

  it("reads the config as Nomad's JSON reading does (tools/test/hcldec-go.test.ts holds this to Nomad's decoder)", () => {
    const body = create(SpecSchema, { block: { case: "object", value: { attributes: { x: attr("", "number") } } } });
    const blocks = create(SpecSchema, {
      block: {
        case: "object",
        value: {
          attributes: {
            named: attr("other", "string"),
            list: create(SpecSchema, { block: { case: "blockList", value: { name: "list", nested: body } } }),
            map2: create(SpecSchema, { block: { case: "blockMap", value: { name: "map2", labels: ["a", "b"], nested: body } } }),
            attrs: create(SpecSchema, { block: { case: "blockAttrs", value: { name: "attrs", type: "number" } } }),
            obj: attr("obj", "object({a = string})"),
            anys: attr("anys", "list(any)"),
          },
        },
      },
    });
    expect(
      shapeConfig(blocks, { other: "$${x} %%{y}", list: { x: "1" }, map2: { p: { q: { x: "2" } } }, attrs: { k: "3" }, obj: { a: "x", b: 1 }, anys: [1, "x"] }),
    ).toEqual({ named: "${x} %{y}", list: [{ x: 1 }], map2: { p: { q: { x: 2 } } }, attrs: { k: 3 }, obj: { a: "x" }, anys: ["1", "x"] });
    // A live interpolation is Nomad's to fill from the task's environment: left as given.
    expect(shapeConfig(blocks, { other: "$${x} ${z}" })).toMatchObject({ named: "$${x} ${z}" });
    // cty sends a number no float64 holds exactly as its decimal text.
    expect(decode(encodeConfig(blocks, { attrs: { a: 0.1, b: 1.5, c: 1e23 } }))).toMatchObject({ attrs: { a: "0.1", b: 1.5, c: "100000000000000000000000" } });
  });
  it("fills a default with the value Nomad makes of its literal, as the SDK writes it (HCL, not JSON)", () => {
    const dflt = (name: string, type: string, value: string) =>
      create(SpecSchema, { block: { case: "default", value: { primary: attr(name, type), default: { block: { case: "literal", value: { value } } } } } });
    const s = create(SpecSchema, {
      block: {
        case: "object",
        value: {
          attributes: {
            // toHclLiteral("${NOMAD_TASK_DIR}/data %{x}"), toHclLiteral({ k: "v", "a b": [1, -2.5, true, null] }), toHclLiteral("e\u0301")
            dir: dflt("dir", "string", '"$${NOMAD_TASK_DIR}/data %%{x}"'),
            labels: dflt("labels", "any", '{"k" = "v", "a b" = [1, -2.5, true, null]}'),
            accent: dflt("accent", "string", '"e\u0301"'),
            // As a Go driver may write one.
            env: dflt("env", "map(string)", '{\n  LANG = "C" # comment\n  "TZ": "UTC"\n}'),
            // A function call is Nomad's to evaluate: left null, the plugin's default applies.
            up: dflt("up", "string", 'upper("x")'),
          },
        },
      },
    });
    expect(shapeConfig(s, {})).toStrictEqual({
      dir: "${NOMAD_TASK_DIR}/data %{x}",
      labels: { k: "v", "a b": [1, -2.5, true, null] },
      accent: "\u00e9",
      env: { LANG: "C", TZ: "UTC" },
      up: null,
    });
  });
  it('drops "//" in a block\'s body, as HCL\'s JSON reading does (a comment); an attribute\'s map keeps it', () => {
    const s = create(SpecSchema, {
      block: {
        case: "object",
        value: {
          attributes: {
            a: attr("a", "map(string)"),
            m: create(SpecSchema, { block: { case: "blockList", value: { name: "m", nested: create(SpecSchema, { block: { case: "object", value: { attributes: { x: attr("x", "string") } } } }) } } }),
            labels: create(SpecSchema, { block: { case: "blockAttrs", value: { name: "labels", type: "string" } } }),
          },
        },
      },
    });
    const config = { "//": "why", a: { "//": "kept", k: "v" }, m: [{ "//": ["any", 1], x: "y" }], labels: { "//": "note", env: "prod" } };
    expect(configProblems(s, config)).toEqual([]);
    expect(shapeConfig(s, config)).toStrictEqual({ a: { "//": "kept", k: "v" }, m: [{ x: "y" }], labels: { env: "prod" } });
  });
  it("keeps undeclared keys so the plugin can reject them", () => {
    expect(shapeConfig(schema, { command: "x", bogus: 1 })).toMatchObject({ bogus: 1 });
  });
  it("passes values through without a schema and encodes msgpack", () => {
    expect(shapeConfig(undefined, { a: 1 })).toEqual({ a: 1 });
    expect(decode(encodeConfig(schema, { command: "/bin/true", args: ["-x"] }))).toEqual({
      command: "/bin/true",
      args: ["-x"],
      create_network: false,
      mount: [],
    });
  });
});

describe("configProblems", () => {
  const object = (attributes: Record<string, ReturnType<typeof attr>>) => create(SpecSchema, { block: { case: "object", value: { attributes } } });
  const nested = create(SpecSchema, {
    block: {
      case: "object",
      value: {
        attributes: {
          command: attr("command", "string", true),
          mount: create(SpecSchema, {
            block: { case: "blockList", value: { name: "mount", minItems: 1n, nested: object({ source: attr("source", "string", true), target: attr("target", "string") }) } },
          }),
          logging: create(SpecSchema, { block: { case: "blockValue", value: { name: "logging", required: true, nested: object({ driver: attr("driver", "string") }) } } }),
          labels: create(SpecSchema, { block: { case: "blockMap", value: { name: "labels", labels: ["name"], nested: object({ value: attr("value", "string") }) } } }),
          retries: create(SpecSchema, {
            block: { case: "default", value: { primary: attr("retries", "number"), default: { block: { case: "literal", value: { value: "3" } } } } },
          }),
          // hcldec: a required primary is required even with a default.
          image: create(SpecSchema, {
            block: { case: "default", value: { primary: attr("image", "string", true), default: { block: { case: "literal", value: { value: '"x"' } } } } },
          }),
        },
      },
    },
  });

  it("accepts a config that fits, whatever the value types (left to the plugin)", () => {
    expect(configProblems(schema, { command: "/bin/true", args: ["x"], create_network: true })).toEqual([]);
    expect(configProblems(schema, { command: 5 })).toEqual([]);
    expect(configProblems(nested, { command: "x", image: "i", mount: [{ source: "/a" }], logging: {}, labels: { a: { value: "1" } } })).toEqual([]);
  });

  it("names undeclared keys with what the schema declares, at any depth", () => {
    expect(configProblems(schema, { command: "x", bogus: 1 })).toEqual(['"bogus" is not declared (declared: args, command, create_network, mount)']);
    expect(configProblems(nested, { command: "x", image: "i", mount: [{ source: "/a" }, { source: "/b", tagret: "/c" }], logging: { drvier: "x" }, labels: { a: { value: "1", extra: 2 } } })).toEqual([
      '"mount[1].tagret" is not declared (declared: source, target)',
      '"logging.drvier" is not declared (declared: driver)',
      '"labels.a.extra" is not declared (declared: value)',
    ]);
  });

  it("names missing required attributes and blocks; one set to null is there (hcldec takes it); a default needs its primary's", () => {
    expect(configProblems(schema, {})).toEqual(['"command" is required']);
    expect(configProblems(schema, { command: null })).toEqual([]);
    expect(configProblems(nested, { mount: [{ target: "/t" }], image: "i" })).toEqual(['"command" is required', '"mount[0].source" is required', '"logging" is required']);
    expect(configProblems(nested, { command: "x", image: "i", logging: {} })).toEqual(['"mount" is required']);
    expect(configProblems(nested, { command: "x", mount: [{ source: "/a" }], logging: {} })).toEqual(['"image" is required']);
  });

  it("has nothing to say without a schema; a non-object spec reads its name from the body", () => {
    expect(configProblems(undefined, { anything: 1 })).toEqual([]);
    expect(configProblems(attr("x", "string"), { anything: 1 })).toEqual(['"anything" is not declared (declared: x)']);
  });
});

describe("encodeCheckedConfig", () => {
  it("encodes what fits as encodeConfig does, and refuses the rest naming the source", () => {
    expect(encodeCheckedConfig(schema, { command: "/bin/true" }, "x")).toEqual(encodeConfig(schema, { command: "/bin/true" }));
    const err = (() => {
      try {
        encodeCheckedConfig(schema, { agrs: [] }, "task.json");
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(ConfigRefusedError);
    expect((err as ConfigRefusedError).problems).toEqual(['"agrs" is not declared (declared: args, command, create_network, mount)', '"command" is required']);
    expect((err as Error).message).toBe('task.json: "agrs" is not declared (declared: args, command, create_network, mount); "command" is required; Nomad refuses such a config');
  });
});
