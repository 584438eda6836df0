// Configs are shaped like Nomad's HCL decoder shapes them before msgpack encoding.
import { create } from "@bufbuild/protobuf";
import { decode } from "@msgpack/msgpack";
import { SpecSchema } from "@nomadkit/protocol/hclspec";
import { describe, expect, it } from "vitest";
import { encodeConfig, shapeConfig } from "../src/index.js";

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
