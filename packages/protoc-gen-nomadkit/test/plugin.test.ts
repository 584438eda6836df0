// Runs the plugin in-process on a hand-built descriptor with all four method kinds and comments,
// checking options, imports (default, runtime_import, rewrite_imports) and the generated surface.
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import {
  CodeGeneratorRequestSchema,
  FileDescriptorProtoSchema,
  MethodDescriptorProtoSchema,
  type CodeGeneratorResponse,
} from "@bufbuild/protobuf/wkt";
import { parseOptions, protocGenNomadkit } from "../src/index.js";

const file = create(FileDescriptorProtoSchema, {
  name: "acme/v1/thing.proto",
  package: "acme.v1",
  syntax: "proto3",
  messageType: [{ name: "Req" }, { name: "Res" }],
  service: [
    {
      name: "Things",
      method: [
        { name: "Get", inputType: ".acme.v1.Req", outputType: ".acme.v1.Res" },
        { name: "Watch", inputType: ".acme.v1.Req", outputType: ".acme.v1.Res", serverStreaming: true },
        { name: "Upload", inputType: ".acme.v1.Req", outputType: ".acme.v1.Res", clientStreaming: true },
        {
          name: "Chat",
          inputType: ".acme.v1.Req",
          outputType: ".acme.v1.Res",
          clientStreaming: true,
          serverStreaming: true,
        },
      ].map((m) => create(MethodDescriptorProtoSchema, m)),
    },
  ],
  sourceCodeInfo: {
    location: [
      { path: [6, 0], span: [0, 0, 0], leadingComments: " Things service doc.\n" },
      { path: [6, 0, 2, 0], span: [1, 0, 0], leadingComments: " Gets a thing.\n Second line.\n" },
    ],
  },
});

function generate(parameter: string): Map<string, string> {
  const res: CodeGeneratorResponse = protocGenNomadkit.run(
    create(CodeGeneratorRequestSchema, { parameter, fileToGenerate: [file.name], protoFile: [file] }),
  );
  if (res.error) throw new Error(res.error);
  return new Map(res.file.map((f) => [f.name, f.content]));
}

describe("options", () => {
  it("requires kind and rejects unknown options", () => {
    expect(() => parseOptions([])).toThrow(/kind is required/);
    expect(() => parseOptions([{ key: "kind", value: "both" }])).toThrow(/client.*server/);
    expect(() => parseOptions([{ key: "kind", value: "client" }, { key: "nope", value: "1" }])).toThrow(/unknown option nope/);
    expect(() => parseOptions([{ key: "kind", value: "client" }, { key: "kind", value: "server" }])).toThrow("option kind is given more than once (kind=server repeats it)");
    expect(() =>
      parseOptions([{ key: "kind", value: "client" }, { key: "runtime_import", value: "a" }, { key: "runtime_import", value: "b" }]),
    ).toThrow(/option runtime_import is given more than once/);
    expect(parseOptions([{ key: "kind", value: "server" }])).toEqual({ kind: "server", runtimeImport: "@nomadkit/server/runtime" });
  });
});

describe("kind=client", () => {
  const out = generate("kind=client,target=ts,import_extension=js");
  const src = out.get("acme/v1/thing_nomadkit.ts")!;

  it("writes one file per proto file with services, importing protoc-gen-es output next to it", () => {
    expect([...out.keys()]).toEqual(["acme/v1/thing_nomadkit.ts"]);
    expect(src).toContain('from "@nomadkit/client/runtime"');
    expect(src).toContain('import { Things } from "./thing_pb.js"');
  });

  it("delegates every method kind to the one runtime and copies doc comments", () => {
    expect(src).toContain("export class ThingsClient {");
    expect(src).toContain("return this.#rt.unary(Things.method.get, request, options);");
    expect(src).toContain("return this.#rt.serverStream(Things.method.watch, request, options);");
    expect(src).toContain("return this.#rt.clientStream(Things.method.upload, requests, options);");
    expect(src).toContain("return this.#rt.bidiStream(Things.method.chat, requests, options);");
    expect(src).toContain(" * Things service doc.");
    expect(src).toContain("   * Gets a thing.\n   * Second line.");
  });
});

describe("kind=server", () => {
  it("emits handlers, method names and a register helper wrapping every method", () => {
    const src = generate("kind=server,target=ts,import_extension=js").get("acme/v1/thing_nomadkit.ts")!;
    expect(src).toContain("export interface ThingsHandlers {");
    expect(src).toContain('export const ThingsMethodNames: readonly (keyof ThingsHandlers)[] = [\n  "get",\n  "watch",\n  "upload",\n  "chat",\n];');
    expect(src).toContain("export function registerThings(router: ConnectRouter, handlers: Partial<ThingsHandlers>, runtime?: ServerRuntime): void {");
    for (const [kind, name] of [["unary", "get"], ["serverStream", "watch"], ["clientStream", "upload"], ["bidiStream", "chat"]]) {
      expect(src).toContain(`${name}: rt.${kind}(Things.method.${name}, handlers.${name}?.bind(handlers)),`);
    }
    expect(src).toContain('from "@nomadkit/server/runtime"');
  });

  it("quotes a handler named `new`, which bare would declare a constructor", () => {
    const widgets = create(FileDescriptorProtoSchema, {
      name: "acme/v1/widget.proto",
      package: "acme.v1",
      syntax: "proto3",
      messageType: [{ name: "Req" }, { name: "Res" }],
      service: [{ name: "Widgets", method: [create(MethodDescriptorProtoSchema, { name: "New", inputType: ".acme.v1.Req", outputType: ".acme.v1.Res" })] }],
    });
    const res = protocGenNomadkit.run(
      create(CodeGeneratorRequestSchema, { parameter: "kind=server,target=ts,import_extension=js", fileToGenerate: [widgets.name], protoFile: [widgets] }),
    );
    const src = res.file.find((f) => f.name === "acme/v1/widget_nomadkit.ts")!.content;
    expect(src).toMatch(/^ {2}"new"\(request: /m);
    expect(src).not.toMatch(/^ {2}new\(/m);
    expect(src).toContain("new: rt.unary(Widgets.method.new, handlers.new?.bind(handlers)),");
  });

  it("honours runtime_import and rewrite_imports (relative to the output root)", () => {
    const src = generate(
      "kind=server,target=ts,import_extension=js,runtime_import=../runtime.js,rewrite_imports=./**/*_pb.js:../gen",
    ).get("acme/v1/thing_nomadkit.ts")!;
    expect(src).toContain('from "../../../runtime.js"');
    expect(src).toContain('import { Things } from "../../../gen/acme/v1/thing_pb.js"');
  });

  it("rewrites message imports to a package subpath", () => {
    const src = generate(
      "kind=client,target=ts,import_extension=js,rewrite_imports=./**/*_pb.js:@nomadkit/protocol/gen",
    ).get("acme/v1/thing_nomadkit.ts")!;
    expect(src).toContain('import { Things } from "@nomadkit/protocol/gen/acme/v1/thing_pb.js"');
  });

  it("applies the first matching rewrite_imports rule (the README's order for contracts importing Nomad's)", () => {
    const nomad = create(FileDescriptorProtoSchema, {
      name: "hashicorp/x/x.proto",
      package: "hashicorp.x",
      syntax: "proto3",
      messageType: [{ name: "Info" }],
    });
    const ext = create(FileDescriptorProtoSchema, {
      name: "acme/v1/ext.proto",
      package: "acme.v1",
      syntax: "proto3",
      dependency: [nomad.name],
      messageType: [{ name: "Req" }],
      service: [{ name: "Ext", method: [create(MethodDescriptorProtoSchema, { name: "Get", inputType: ".acme.v1.Req", outputType: ".hashicorp.x.Info" })] }],
    });
    const run = (rules: string[]) => {
      const parameter = ["kind=server", "target=ts", "import_extension=js", ...rules.map((r) => `rewrite_imports=${r}`)].join(",");
      const res = protocGenNomadkit.run(create(CodeGeneratorRequestSchema, { parameter, fileToGenerate: [ext.name], protoFile: [nomad, ext] }));
      if (res.error) throw new Error(res.error);
      return res.file[0]!.content;
    };
    const documented = run(["./hashicorp/**/*_pb.js:@nomadkit/protocol/gen", "./**/*_pb.js:../gen"]);
    expect(documented).toContain('from "@nomadkit/protocol/gen/hashicorp/x/x_pb.js"');
    expect(documented).toContain('from "../../../gen/acme/v1/ext_pb.js"');
    // The catch-all first takes Nomad's imports too, to a directory without them.
    expect(run(["./**/*_pb.js:../gen", "./hashicorp/**/*_pb.js:@nomadkit/protocol/gen"])).toContain('from "../../../gen/hashicorp/x/x_pb.js"');
  });
});
