// The hclspec builder and msgpack config decoding: schema messages as Nomad reads them, typed
// decoding with defaults, errors that name the field, and hostile bytes that never crash.
import { create, toJson } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { encode } from "@msgpack/msgpack";
import { SpecSchema } from "@nomadkit/protocol/hclspec";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeConfig, parseHclType, spec, toHclLiteral, type SpecValue } from "../src/config/index.js";

const taskSchema = spec.object({
  command: spec.attr("string", { required: true }),
  args: spec.attr("list(string)"),
  env: spec.attr("map(string)"),
  timeout: spec.attr("number", { default: 30 }),
  verbose: spec.default(spec.attr("bool"), false),
  mode: spec.literal("fast"),
  limits: spec.block({ cpu: spec.attr("number"), memory: spec.attr("number", { required: true }) }),
  mount: spec.blockList({ source: spec.attr("string", { required: true }), readonly: spec.attr("bool") }, { max: 3 }),
  port: spec.blockMap(["label"], { to: spec.attr("number") }),
  labels: spec.blockAttrs("string"),
  extra: spec.attr("any"),
  image_name: spec.attr("string", { name: "image" }),
});

type TaskConfig = SpecValue<typeof taskSchema>;

function invalid(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    return (err as ConnectError).rawMessage;
  }
  throw new Error("expected InvalidArgument");
}

/** Nomad's encoding: every attribute of the object present, unset ones as nil. */
function nomadMsgpack(v: Record<string, unknown>): Uint8Array {
  const all: Record<string, unknown> = {
    command: null,
    args: null,
    env: null,
    timeout: null,
    verbose: null,
    mode: "fast",
    limits: null,
    mount: [],
    port: {},
    labels: null,
    extra: null,
    image_name: null,
  };
  return encode({ ...all, ...v });
}

describe("hclspec builder", () => {
  it("produces the Spec message Nomad reads", () => {
    const json = toJson(SpecSchema, taskSchema.toProto()) as { object: { attributes: Record<string, unknown> } };
    const a = json.object.attributes;
    expect(a["command"]).toEqual({ Attr: { name: "command", type: "string", required: true } });
    expect(a["args"]).toEqual({ Attr: { name: "args", type: "list(string)" } });
    expect(a["timeout"]).toEqual({ default: { primary: { Attr: { name: "timeout", type: "number" } }, default: { literal: { value: "30" } } } });
    expect(a["verbose"]).toEqual({ default: { primary: { Attr: { name: "verbose", type: "bool" } }, default: { literal: { value: "false" } } } });
    expect(a["mode"]).toEqual({ literal: { value: '"fast"' } });
    expect(a["limits"]).toMatchObject({ blockValue: { name: "limits", nested: { object: { attributes: { memory: { Attr: { name: "memory", required: true } } } } } } });
    expect(a["mount"]).toMatchObject({ blockList: { name: "mount", maxItems: "3" } });
    expect(a["port"]).toMatchObject({ blockMap: { name: "port", labels: ["label"] } });
    expect(a["labels"]).toEqual({ blockAttrs: { name: "labels", type: "string" } });
    expect(a["image_name"]).toEqual({ Attr: { name: "image", type: "string" } });
    expect(create(SpecSchema, taskSchema.toProto()).block.case).toBe("object");
  });

  it("renders literals as HCL expressions", () => {
    expect(toHclLiteral('a "b" ${c} %{d} \\ \n\t\x01')).toBe('"a \\"b\\" $${c} %%{d} \\\\ \\n\\t\\u0001"');
    expect(toHclLiteral(["a", 1, true, null])).toBe('["a", 1, true, null]');
    expect(toHclLiteral({ k: "v", "a b": [1] })).toBe('{"k" = "v", "a b" = [1]}');
    expect(() => toHclLiteral(Number.NaN)).toThrow(TypeError);
  });

  it("rejects bad schemas when they are built", () => {
    expect(() => spec.attr("lists(string)" as "string")).toThrow(/unknown type "lists"/);
    expect(() => spec.attr("list(string" as "string")).toThrow(/expected "\)"/);
    expect(() => spec.attr("number", { default: "x" as unknown as number })).toThrow(/does not fit type number/);
    expect(() => spec.attr("string").toProto()).toThrow(/needs a name/);
    expect(() => spec.object({ "bad name": spec.attr("string") }).toProto()).toThrow(/not a valid HCL identifier/);
    expect(parseHclType("object({a = list(number), b=tuple([string, bool])})")).toMatchObject({ kind: "object" });
  });

  it("takes a repeated object attribute as HCL does: the last one is its type", () => {
    // Nomad evaluates object({...}) over an HCL object constructor, where a repeated key's last value wins.
    expect(parseHclType("object({port = string, port = number})")).toEqual({ kind: "object", attrs: new Map([["port", { kind: "number" }]]) });
    const s = spec.object({ o: spec.attr("object({ port = string, port = number })") });
    expect(decodeConfig(s, encode({ o: { port: 8080 } }))).toEqual({ o: { port: 8080 } });
    expect(invalid(() => decodeConfig(s, encode({ o: { port: "http" } }), "task config"))).toMatch(/expected number, got string/);
  });

  it("takes a type as written in a Go driver's spec: attributes on lines, comments, quoted names; sent to Nomad as written", () => {
    const type = `list(object({
      # host side
      source = string
      "read-only": bool // quoted: not a name a Go struct field would have
      ports = list(number), /* trailing comma */
    }))`;
    const s = spec.object({ volumes: spec.attr(type) });
    const proto = s.toProto();
    expect(proto.block.case === "object" && proto.block.value.attributes.volumes?.block).toEqual(
      expect.objectContaining({ case: "Attr", value: expect.objectContaining({ name: "volumes", type }) }),
    );
    expect(decodeConfig(s, encode({ volumes: [{ source: "/data", "read-only": true, ports: [80, "443"] }] }))).toEqual({
      volumes: [{ source: "/data", "read-only": true, ports: [80, 443] }],
    });
    expect(invalid(() => decodeConfig(s, encode({ volumes: [{ source: "/data", "read-only": "yes", ports: [] }] }), "task config"))).toBe(
      'task config: field "volumes[0].read-only": expected bool, got string',
    );
  });

  it("refuses optional(...) when the schema is built: Nomad would refuse the whole schema", () => {
    expect(() => spec.attr("object({ source = string, readonly = optional(bool) })")).toThrow(
      /at offset 37: optional\(\.\.\.\) is not supported: Nomad evaluates Attr types with its own type functions/,
    );
    expect(() => spec.blockAttrs("object({ a = optional(string, \"x\") })")).toThrow(/optional\(\.\.\.\) is not supported/);
  });
});

describe("decodeConfig", () => {
  it("names a field by its HCL name, the one the operator wrote, when it differs from the property", () => {
    expect(invalid(() => decodeConfig(taskSchema, nomadMsgpack({ command: "x", image_name: 5 }), "task config"))).toBe(
      'task config: field "image": expected string, got number',
    );
    const renamed = spec.object({
      extraArgs: spec.attr("list(string)", { name: "args" }),
      ports: spec.blockList({ hostPort: spec.attr("number", { name: "host_port", required: true }) }, { name: "port" }),
    });
    expect(invalid(() => decodeConfig(renamed, encode({ extraArgs: ["-v", 1], ports: [] }), "task config"))).toContain('field "args[1]"');
    expect(invalid(() => decodeConfig(renamed, encode({ extraArgs: [], ports: [{}] }), "task config"))).toContain(
      'field "port[0].host_port"',
    );
  });

  it("refuses an integer no JavaScript number is instead of rounding it", () => {
    const big = (n: bigint) => ({ command: "x", timeout: n });
    const bytes = (v: unknown) => encode(v, { useBigInt64: true });
    expect(decodeConfig(taskSchema, bytes(big(9007199254740991n)), "task config").timeout).toBe(9007199254740991);
    expect(invalid(() => decodeConfig(taskSchema, bytes(big(9007199254740993n)), "task config"))).toBe(
      'task config: field "timeout": integer 9007199254740993 is not a value a JavaScript number holds (nor the shortest decimal of one)',
    );
    // As cty writes a number that is neither int64 nor exact float64: a decimal string.
    expect(invalid(() => decodeConfig(taskSchema, encode({ command: "x", timeout: "123456789012345678901" }), "task config"))).toContain(
      'field "timeout": integer 123456789012345678901 is not a value',
    );
    expect(decodeConfig(taskSchema, encode({ command: "x", timeout: "1.5" }), "task config").timeout).toBe(1.5);
    expect(invalid(() => decodeConfig(taskSchema, bytes({ command: "x", extra: -9223372036854775807n }), "task config"))).toContain('field "extra"');
  });

  it("takes the big integers Nomad sends: a double's value as an int64, or its shortest decimal as cty's text", () => {
    // Nomad holds a job's numbers as float64: `timeout = 1152921504606846976` (2^60) arrives as that
    // int64, `timeout = 1e23` as "100000000000000000000000" (10^23 exactly, which no double is; the
    // job held the double nearest it). A Go driver takes both; so must a TypeScript one.
    const bytes = (v: unknown) => encode(v, { useBigInt64: true });
    expect(decodeConfig(taskSchema, bytes({ command: "x", timeout: 2n ** 60n }), "task config").timeout).toBe(2 ** 60);
    expect(decodeConfig(taskSchema, bytes({ command: "x", timeout: -(2n ** 63n) }), "task config").timeout).toBe(-(2 ** 63));
    expect(decodeConfig(taskSchema, bytes({ command: "x", extra: 2n ** 60n }), "task config").extra).toBe(2 ** 60);
    expect(decodeConfig(taskSchema, encode({ command: "x", timeout: "100000000000000000000000" }), "task config").timeout).toBe(1e23);
    expect(decodeConfig(taskSchema, encode({ command: "x", timeout: "-1180591620717411300000" }), "task config").timeout).toBe(-(2 ** 70));
    const s = spec.object({ ports: spec.attr("set(number)"), m: spec.attr("map(number)") });
    expect(decodeConfig(s, encode({ ports: ["100000000000000000000000", 1], m: { k: "1180591620717411300000" } }))).toEqual({
      ports: [1e23, 1],
      m: { k: 2 ** 70 },
    });
  });

  it("takes an `any` value that looks like cty's dynamic wrapper as the list it is: Nomad writes none, and a type as bytes", () => {
    // a = ["\"string\"", "hello"] and a = ["[\"list\",\"number\"]", ["1", "2"]]: cty writes the
    // value's own type (a tuple of strings), with no [type, value] wrapper.
    const s = spec.object({ a: spec.attr("any") });
    const bytes = (hex: string) => Buffer.from(hex, "hex");
    expect(decodeConfig(s, bytes("81a16192a822737472696e6722a568656c6c6f"))).toStrictEqual({ a: ['"string"', "hello"] });
    expect(decodeConfig(s, bytes("81a16192b15b226c697374222c226e756d626572225d92a131a132"))).toStrictEqual({ a: ['["list","number"]', ["1", "2"]] });
    // The wrapper cty writes for a dynamically typed value (type JSON as bin) is still read.
    expect(decodeConfig(s, encode({ a: [Buffer.from('["list","number"]'), [1, 2]] }))).toStrictEqual({ a: [1, 2] });
  });

  it("names the field of an `any` value whose cty type is nested too deeply", () => {
    const deep = "[\"list\",".repeat(20_000) + '"string"' + "]".repeat(20_000);
    const msg = invalid(() =>
      decodeConfig(taskSchema, nomadMsgpack({ command: "x", extra: [Buffer.from(deep), ["x"]] }), "task config"),
    );
    expect(msg).toContain("extra");
    expect(msg).toContain("nested too deeply");
    expect(msg).not.toContain("call stack");
  });

  it("decodes Nomad's msgpack into typed values with defaults", () => {
    const cfg: TaskConfig = decodeConfig(
      taskSchema,
      nomadMsgpack({
        command: "/bin/echo",
        args: ["a", "b"],
        env: { A: "1" },
        limits: { cpu: null, memory: 128 },
        mount: [{ source: "/tmp", readonly: true }],
        port: { http: { to: 8080 } },
        extra: [Buffer.from('["list","number"]'), [1, 2]],
        image_name: "alpine",
      }),
      "task config",
    );
    expect(cfg).toEqual({
      command: "/bin/echo",
      args: ["a", "b"],
      env: { A: "1" },
      timeout: 30,
      verbose: false,
      mode: "fast",
      limits: { memory: 128 },
      mount: [{ source: "/tmp", readonly: true }],
      port: { http: { to: 8080 } },
      extra: [1, 2],
      image_name: "alpine",
    });
    // Type-level: required and defaulted fields are not optional.
    const cmd: string = cfg.command;
    const timeout: number = cfg.timeout;
    const args: string[] | undefined = cfg.args;
    expect([cmd, timeout, args]).toBeDefined();
  });

  it("treats empty bytes as an empty block (defaults apply, required fields reported)", () => {
    const s = spec.object({ level: spec.attr("string", { default: "info" }), n: spec.attr("number") });
    expect(decodeConfig(s, new Uint8Array(), "plugin config")).toEqual({ level: "info" });
    expect(invalid(() => decodeConfig(taskSchema, new Uint8Array(), "task config"))).toBe('task config: field "command": required attribute is missing');
  });

  it("gives a required attribute written as null its type's zero value: Nomad sends it, a Go driver sees that", () => {
    // hcldec checks that a required attribute is written, not its value: `command = null` (or an
    // unset variable) reaches the driver as nil. Only a missing one (not sent at all) is an error.
    const s = spec.object({
      command: spec.attr("string", { required: true }),
      n: spec.attr("number", { required: true }),
      list: spec.attr("list(string)", { required: true }),
      obj: spec.attr("object({ a = string })", { required: true }),
      anything: spec.attr("any", { required: true }),
      pair: spec.array([spec.attr("bool", { name: "x", required: true })]),
      mount: spec.blockList({ source: spec.attr("string", { required: true }) }),
    });
    expect(decodeConfig(s, encode({ command: null, n: null, list: null, obj: null, anything: null, pair: [null], mount: [{ source: null }] }))).toStrictEqual({
      command: "",
      n: 0,
      list: [],
      obj: {},
      anything: null,
      pair: [false],
      mount: [{ source: "" }],
    });
    expect(invalid(() => decodeConfig(s, encode({ n: 1, list: [], obj: {}, anything: 1, pair: [true], mount: [] }), "task config"))).toBe(
      'task config: field "command": required attribute is missing',
    );
    expect(invalid(() => decodeConfig(s, new Uint8Array(), "task config"))).toBe('task config: field "command": required attribute is missing');
    expect(invalid(() => decodeConfig(spec.object({ pair: spec.array([spec.attr("bool", { name: "x", required: true })]) }), new Uint8Array()))).toBe(
      'config: field "pair[0]": required attribute is missing',
    );
    // A schema that is one attribute, not an object: empty bytes are nothing sent, not a null.
    expect(invalid(() => decodeConfig(spec.attr("string", { required: true, name: "command" }), new Uint8Array()))).toBe(
      "config: required attribute is missing",
    );
    expect(decodeConfig(spec.attr("string", { required: true, name: "command" }), encode(null))).toBe("");
  });

  it("takes a block whose body is one unset attribute or block: Nomad sends its value, null", () => {
    // A block's value is its body's: with a body that is one attribute (or one nested block),
    // `m {}` is a null. These bytes are cty's msgpack of what hcldec makes of each config.
    const x = () => spec.attr("string", { name: "x" });
    const bytes = (hex: string) => Buffer.from(hex, "hex");
    // blockList / blockSet: m { x = "a" } m {}  ->  {"m": ["a", null]}
    expect(decodeConfig(spec.object({ m: spec.blockList(x()) }), bytes("81a16d92a161c0"))).toStrictEqual({ m: ["a", undefined] });
    expect(decodeConfig(spec.object({ m: spec.blockSet(x()) }), bytes("81a16d92a161c0"))).toStrictEqual({ m: ["a", undefined] });
    // blockMap: m "p" {} m "q" { x = "b" }  ->  {"m": {"p": null, "q": "b"}}
    expect(decodeConfig(spec.object({ m: spec.blockMap(["l"], x()) }), bytes("81a16d82a170c0a171a162"))).toStrictEqual({ m: { p: undefined, q: "b" } });
    // A required block that is there, its body unset: m {}  ->  {"m": null}
    expect(decodeConfig(spec.object({ m: spec.block(x(), { required: true }) }), bytes("81a16dc0"))).toStrictEqual({});
    // A block list of blocks whose body is one optional block: m {}  ->  {"m": [null]}
    const inner = spec.object({ m: spec.blockList(spec.block({ y: spec.attr("string") }, { name: "inner" })) });
    expect(decodeConfig(inner, bytes("81a16d91c0"))).toStrictEqual({ m: [undefined] });
    // A required attribute as the body, written as null: its zero value, as anywhere else.
    expect(decodeConfig(spec.object({ m: spec.blockList(spec.attr("number", { name: "n", required: true })) }), bytes("81a16d91c0"))).toStrictEqual({ m: [0] });
    // Not sent at all (empty bytes), a required block is still missing.
    expect(invalid(() => decodeConfig(spec.object({ m: spec.block(x(), { required: true }) }), new Uint8Array()))).toBe('config: field "m": required block is missing');
  });

  it("decodes a literal as Nomad holds it: strings and keys in NFC", () => {
    // cty normalizes every string; a Go driver gets the composed form Nomad sends.
    const s = spec.object({ mode: spec.literal({ "cafe\u0301": ["e\u0301", 1, undefined] }), name: spec.attr("string", { default: "e\u0301" }) });
    const v = decodeConfig(s, new Uint8Array());
    expect(v).toStrictEqual({ mode: { "caf\u00e9": ["\u00e9", 1, null] }, name: "\u00e9" });
    expect(s.fields.mode.value).toStrictEqual({ "cafe\u0301": ["e\u0301", 1, undefined] });
    // A hole is written as null too, and decodes as one.
    expect(decodeConfig(spec.object({ l: spec.literal([1, , 3]) }), new Uint8Array())).toStrictEqual({ l: [1, null, 3] });
  });

  it("gives a null inside a list, set or map its element type's zero value, as a Go driver sees it", () => {
    // Nomad sends them as they are: HCL's `args = ["-v", var.unset]`, or a JSON job's null.
    const s = spec.object({
      args: spec.attr("list(string)"),
      ports: spec.attr("set(number)"),
      flags: spec.attr("map(bool)"),
      nested: spec.attr("list(list(string))"),
      objs: spec.attr("list(object({ a = string }))"),
      anys: spec.attr("list(any)"),
    });
    const v = { args: ["-v", null], ports: [null], flags: { on: null }, nested: [null, ["x", null]], objs: [null, { a: null }], anys: [null] };
    expect(decodeConfig(s, encode(v))).toEqual({
      args: ["-v", ""],
      ports: [0],
      flags: { on: false },
      nested: [[], ["x", ""]],
      objs: [{}, {}],
      anys: [null],
    });
  });

  it("holds each distinct element of a set once, as cty does: the first kept where it was, the others dropped", () => {
    const s = spec.object({
      names: spec.attr("set(string)"),
      ports: spec.attr("set(number)"),
      flags: spec.attr("set(bool)"),
      mounts: spec.attr("set(object({ source = string, readonly = bool }))"),
      groups: spec.attr("set(list(string))"),
      nested: spec.attr("set(set(string))"),
      labels: spec.attr("set(map(string))"),
      tuples: spec.attr("set(tuple([string, number]))"),
      anys: spec.attr("set(any)"),
      list: spec.attr("list(string)"),
    });
    const v = {
      names: ["b", "a", "b", "a", "c"],
      // Numbers by value, however encoded (cty writes some as decimal strings).
      ports: [80, 443, "80", 1.5, "1.50", 0, -0],
      flags: [true, false, true, false],
      // Objects attribute by attribute, in any key order; an absent attribute is a null one.
      mounts: [{ source: "/a", readonly: true }, { readonly: true, source: "/a" }, { source: "/a", readonly: false }, { source: "/a" }, { source: "/a", readonly: null }],
      // Lists in order; sets as sets.
      groups: [["a", "b"], ["b", "a"], ["a", "b"]],
      nested: [["a", "b"], ["b", "a", "a"]],
      labels: [{ x: "1", y: "2" }, { y: "2", x: "1" }, { x: "2" }],
      tuples: [["a", 1], ["a", "1"], ["a", 2]],
      anys: [{ k: "v" }, { k: "v" }, "v"],
      // A list keeps its repeats.
      list: ["a", "a"],
    };
    expect(decodeConfig(s, encode(v))).toEqual({
      names: ["b", "a", "c"],
      ports: [80, 443, 1.5, 0],
      flags: [true, false],
      mounts: [{ source: "/a", readonly: true }, { source: "/a", readonly: false }, { source: "/a" }],
      groups: [["a", "b"], ["b", "a"]],
      nested: [["a", "b"]],
      labels: [{ x: "1", y: "2" }, { x: "2" }],
      tuples: [["a", 1], ["a", 2]],
      anys: [{ k: "v" }, "v"],
      list: ["a", "a"],
    });
    // cty keeps a null apart from "" (the driver gets both, as "", as a Go driver does), also nested;
    // it compares strings in NFC.
    const t = spec.object({ s: spec.attr("set(string)"), l: spec.attr("set(list(string))"), u: spec.attr("set(string)") });
    expect(decodeConfig(t, encode({ s: ["", null, null, ""], l: [["a", null], ["a", ""]], u: ["\u00e9", "e\u0301"] }))).toEqual({
      s: ["", ""],
      l: [["a", ""], ["a", ""]],
      u: ["\u00e9"],
    });
  });

  it("accepts cty's big numbers encoded as strings", () => {
    const s = spec.object({ n: spec.attr("number") });
    expect(decodeConfig(s, encode({ n: "0.1000000000000000000001" }))).toEqual({ n: 0.1 });
    expect(invalid(() => decodeConfig(s, encode({ n: "ten" }), "plugin config"))).toBe('plugin config: field "n": expected number, got string');
  });

  it.each([
    [{ command: "x", args: ["a", 7] }, 'task config: field "args[1]": expected string, got number'],
    [{ command: 5 }, 'task config: field "command": expected string, got number'],
    [{ command: "x", env: { "A B": true } }, 'task config: field "env["A B"]": expected string, got bool'],
    [{ command: "x", limits: { cpu: 1 } }, 'task config: field "limits.memory": required attribute is missing'],
    [{ command: "x", mount: [{ source: "/a" }, { readonly: "yes" }] }, 'task config: field "mount[1].source": required attribute is missing'],
    [{ command: "x", mount: [{ source: "/a", readonly: "yes" }] }, 'task config: field "mount[0].readonly": expected bool, got string'],
    [{ command: "x", mount: [{ source: "a" }, { source: "b" }, { source: "c" }, { source: "d" }] }, 'task config: field "mount": expected at most 3 blocks, got 4'],
    [{ command: "x", port: { http: { to: "eighty" } } }, 'task config: field "port.http.to": expected number, got string'],
    [{ command: "x", port: ["http"] }, 'task config: field "port": expected a map keyed by label, got list'],
    [{ command: "x", timeout: [1] }, 'task config: field "timeout": expected number, got list'],
  ])("names the field: %j", (value, message) => {
    expect(invalid(() => decodeConfig(taskSchema, nomadMsgpack(value), "task config"))).toBe(message);
  });

  it("refuses a map key named __proto__ without calling the msgpack malformed", () => {
    const s = spec.object({ labels: spec.attr("map(string)") });
    expect(invalid(() => decodeConfig(s, encode({ labels: { ["__proto__"]: "a" } }), "task config"))).toBe(
      'task config: a map key "__proto__" is not supported',
    );
  });

  it("rejects a non-map root and malformed bytes as InvalidArgument", () => {
    expect(invalid(() => decodeConfig(taskSchema, encode([1, 2]), "task config"))).toBe("task config: expected a map of fields, got list");
    expect(invalid(() => decodeConfig(taskSchema, Uint8Array.of(0xc1), "task config"))).toMatch(/^task config: malformed msgpack: /);
    expect(invalid(() => decodeConfig(taskSchema, Uint8Array.of(0x92, 0x01), "task config"))).toMatch(/^task config: malformed msgpack: /);
    // Extra bytes after a valid value, and a huge declared length with nothing behind it.
    expect(invalid(() => decodeConfig(taskSchema, Uint8Array.of(0x80, 0x80), "task config"))).toMatch(/malformed msgpack/);
    expect(invalid(() => decodeConfig(taskSchema, Uint8Array.of(0xdd, 0xff, 0xff, 0xff, 0xff), "task config"))).toMatch(/malformed msgpack/);
    expect(invalid(() => decodeConfig(taskSchema, encode({ __proto__x: 1, command: Uint8Array.of(1) }), "task config"))).toBe(
      'task config: field "command": expected string, got bytes',
    );
  });

  const good = nomadMsgpack({ command: "/bin/sh", args: ["-c", "true"], mount: [{ source: "/x" }], port: { a: { to: 1 } }, extra: "s" });

  it("property: random bytes decode or fail with InvalidArgument, nothing else", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 256 }), (bytes) => {
        try {
          decodeConfig(taskSchema, bytes, "task config");
        } catch (err) {
          return err instanceof ConnectError && err.code === Code.InvalidArgument && err.rawMessage.startsWith("task config: ");
        }
        return true;
      }),
      { seed: 0x5eed, numRuns: 3000 },
    );
  });

  it("property: truncated and bit-flipped encodings fail with InvalidArgument, nothing else", () => {
    fc.assert(
      fc.property(fc.nat({ max: good.length - 1 }), fc.nat({ max: good.length - 1 }), fc.integer({ min: 0, max: 255 }), (cut, at, byte) => {
        for (const bytes of [good.subarray(0, cut), Uint8Array.from(good, (b, i) => (i === at ? byte : b))]) {
          try {
            decodeConfig(taskSchema, bytes, "task config");
          } catch (err) {
            if (!(err instanceof ConnectError && err.code === Code.InvalidArgument)) return false;
          }
        }
        return true;
      }),
      { seed: 0xc0ffee, numRuns: 2000 },
    );
  });

  it("property: well-typed values round-trip", () => {
    const s = spec.object({ a: spec.attr("list(string)"), m: spec.attr("map(number)"), b: spec.attr("bool") });
    fc.assert(
      fc.property(
        fc.record({ a: fc.array(fc.string()), m: fc.dictionary(fc.string().filter((k) => k !== "__proto__"), fc.double({ noNaN: true }).map((x) => (Object.is(x, -0) ? 0 : x))), b: fc.boolean() }),
        (v) => {
          expect(decodeConfig(s, encode(v))).toEqual(v);
        },
      ),
      { seed: 7, numRuns: 300 },
    );
  });
});
