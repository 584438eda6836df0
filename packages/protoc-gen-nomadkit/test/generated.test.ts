// Hostile but valid downstream protos: generated clients and servers must typecheck under the repo's
// strict options (plus noUnusedParameters), and run end to end (client → in-memory router → server).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { join } from "node:path";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { Code, ConnectError, createConnectRouter, createRouterTransport } from "@connectrpc/connect";
import { protocGenNomadkit } from "../src/index.js";
import { compileProtos, createWorkspace, runPlugin, type Workspace } from "./workspace.js";

const kinds = `
  rpc Unary(Req) returns (Req);
  rpc ServerStream(Req) returns (stream Req);
  rpc ClientStream(stream Req) returns (Req);
  rpc Bidi(stream Req) returns (stream Req);`;

const protos = {
  // RPCs named like Object.prototype members (protobuf-es escapes only constructor, toString,
  // toJSON and valueOf), and `Then`, which would make a client thenable.
  "reserved.proto": `syntax = "proto3";
package hostile.reserved;
message Req { string s = 1; }
service Reserved {
  rpc Get(Req) returns (Req);
  rpc HasOwnProperty(Req) returns (Req);
  rpc IsPrototypeOf(Req) returns (Req);
  rpc PropertyIsEnumerable(Req) returns (Req);
  rpc ToLocaleString(Req) returns (Req);
  rpc __defineGetter__(Req) returns (Req);
  rpc __defineSetter__(Req) returns (Req);
  rpc __lookupGetter__(Req) returns (stream Req);
  rpc __lookupSetter__(stream Req) returns (Req);
  rpc __proto__(Req) returns (Req);
  rpc Constructor(Req) returns (Req);
  rpc ToString(stream Req) returns (stream Req);
  rpc Then(Req) returns (Req);
}
// Without __proto__, registered with connect's router.service().
service Inherited {
  rpc Get(Req) returns (Req);
  rpc HasOwnProperty(Req) returns (Req);
  rpc ToLocaleString(Req) returns (Req);
  rpc Then(Req) returns (Req);
}
`,
  // Messages and services named like the globals generated code uses.
  "globals.proto": `syntax = "proto3";
package hostile.globals;
message Promise { string s = 1; }
message AsyncIterable { string s = 1; }
service Globals {
  rpc Unary(AsyncIterable) returns (Promise);
  rpc ServerStream(Promise) returns (stream AsyncIterable);
  rpc ClientStream(stream AsyncIterable) returns (Promise);
  rpc Bidi(stream Promise) returns (stream AsyncIterable);
}
`,
  "global_services.proto": `syntax = "proto3";
package hostile.globalservices;
message Req { string s = 1; }
service Promise {${kinds}
}
service AsyncIterable {${kinds}
}
`,
  // Services named like the parameters and locals of generated code.
  "locals.proto": `syntax = "proto3";
package hostile.locals;
message Req { string s = 1; }
${["router", "handlers", "runtime", "rt", "context", "request", "requests", "options", "transport"]
  .map((name) => `service ${name} {${kinds}\n}\n`)
  .join("")}`,
  // A service without methods, alone in its file and next to one with methods.
  "empty.proto": `syntax = "proto3";
package hostile.empty;
message Req { string s = 1; }
service Empty {}
service NotEmpty { rpc Get(Req) returns (Req); }
`,
};

let ws: Workspace;
let errors: Map<string, string[]>;

beforeAll(() => {
  ws = createWorkspace(protos);
  errors = ws.typecheck({
    // Handlers that leave methods out, as plain objects and class instances, must be accepted.
    "uses_reserved.ts": `import { createConnectRouter } from "@connectrpc/connect";
import { registerReserved, type ReservedHandlers } from "./gen/server/reserved_nomadkit.js";
registerReserved(createConnectRouter(), {});
const some: Partial<ReservedHandlers> = { get: (r) => ({ s: r.s }), __proto__$: () => ({}) };
registerReserved(createConnectRouter(), some);
class Impl {
  get() {
    return {};
  }
}
registerReserved(createConnectRouter(), new Impl());
// Handlers built by an async function: TypeScript refuses one whose result has a callable \`then\`.
async function make(): Promise<Partial<ReservedHandlers>> {
  return { then$: (r) => ({ s: r.s }) };
}
void make().then((h) => registerReserved(createConnectRouter(), h));
`,
  });
});

afterAll(() => ws?.remove());

/** The type errors of one proto file's generated client and server. */
function typeErrors(proto: string): string[] {
  const stem = proto.replace(/\.proto$/, "");
  return ["client", "server"].flatMap((kind) => errors.get(`gen/${kind}/${stem}_nomadkit.ts`) ?? [`no ${kind} for ${proto}`]);
}

/** Object.prototype members protobuf-es leaves unescaped, in the order of service Reserved. */
const prototypeMembers = [
  "hasOwnProperty",
  "isPrototypeOf",
  "propertyIsEnumerable",
  "toLocaleString",
  "__defineGetter__",
  "__defineSetter__",
  "__lookupGetter__",
  "__lookupSetter__",
  "__proto__",
];

describe("RPCs named like Object.prototype members, or `then`", () => {
  it("escape handler and client method names with `$`, and typecheck", () => {
    const server = ws.files.get("gen/server/reserved_nomadkit.ts")!;
    const client = ws.files.get("gen/client/reserved_nomadkit.ts")!;
    for (const name of prototypeMembers) {
      expect(server).toContain(`\n  ${name}$(`);
      expect(client).toContain(`\n  ${name}$(`);
    }
    expect(client).toMatch(/^ {2}then\$\(request: /m);
    expect(server).toMatch(/^ {2}then\$\(request: /m); // a thenable handlers object could not come from an async function
    // Routed under the real localName; with a `__proto__` RPC method by method, since connect's
    // router.service() would drop it.
    expect(server).toContain(
      "  router.rpc(Reserved.method.__proto__, rt.unary(Reserved.method.__proto__, handlers.__proto__$?.bind(handlers)));",
    );
    expect(server).toContain("  router.rpc(Reserved.method.get, rt.unary(Reserved.method.get, handlers.get?.bind(handlers)));");
    expect(server).toContain(
      "    hasOwnProperty: rt.unary(Inherited.method.hasOwnProperty, handlers.hasOwnProperty$?.bind(handlers)),",
    );
    expect(typeErrors("reserved.proto")).toEqual([]);
    expect(errors.get("uses_reserved.ts")).toEqual([]);
  });

  it("answer Unimplemented when left out, serve them when implemented, and leave the client unthenable", async () => {
    // The generated TypeScript runs as is: vitest compiles it, and the vitest config points the
    // runtimes it imports at the client and server packages' sources.
    const { registerReserved, registerInherited } = await import(join(ws.dir, "gen/server/reserved_nomadkit.ts"));
    const { ReservedClient, InheritedClient } = await import(join(ws.dir, "gen/client/reserved_nomadkit.ts"));
    expect(() => registerReserved(createConnectRouter(), {})).not.toThrow();

    const echo = (prefix: string) => (r: { s: string }) => ({ s: `${prefix}:${r.s}` });
    const transport = createRouterTransport((router) => {
      registerReserved(router, { get: echo("get"), __proto__$: echo("proto"), then$: echo("then") });
      registerInherited(router, { get: echo("get"), then$: echo("then") });
    });
    const code = (p: Promise<unknown>) => p.then(() => "answered", (e: unknown) => ConnectError.from(e).code);

    const reserved = new ReservedClient(transport);
    expect(await reserved.get({ s: "x" })).toMatchObject({ s: "get:x" });
    expect(await reserved.__proto__$({ s: "x" })).toMatchObject({ s: "proto:x" });
    expect(await reserved.then$({ s: "x" })).toMatchObject({ s: "then:x" });
    for (const name of [...prototypeMembers.slice(0, 6), "constructor"].map((n) => `${n}$`)) {
      expect([name, await code(reserved[name]({ s: "x" }))]).toEqual([name, Code.Unimplemented]);
    }
    const drain = async (stream: AsyncIterable<unknown>) => {
      for await (const _ of stream);
    };
    expect(await code(drain(reserved.__lookupGetter__$({})))).toBe(Code.Unimplemented);
    expect(await code(reserved.__lookupSetter__$((async function* () {})()))).toBe(Code.Unimplemented);

    const inherited = new InheritedClient(transport);
    expect(await inherited.get({ s: "y" })).toMatchObject({ s: "get:y" });
    expect(await inherited.then$({ s: "y" })).toMatchObject({ s: "then:y" });
    expect(await code(inherited.hasOwnProperty$({ s: "y" }))).toBe(Code.Unimplemented);
    expect(await code(inherited.toLocaleString$({ s: "y" }))).toBe(Code.Unimplemented);

    // A thenable client would make `await client` call its RPC and never settle.
    for (const client of [reserved, inherited]) {
      expect("then" in client).toBe(false);
      const settled = await Promise.race([
        (async () => (await client) === client)(),
        new Promise((resolve) => setTimeout(() => resolve("still pending"), 2_000)),
      ]);
      expect(settled).toBe(true);
    }
  });
});

describe("messages and services named Promise or AsyncIterable", () => {
  it("do not shadow the globals generated code uses", () => {
    expect(ws.files.get("gen/client/globals_nomadkit.ts")).toContain("): globalThis.Promise<Promise> {");
    expect(typeErrors("globals.proto")).toEqual([]);
    expect(typeErrors("global_services.proto")).toEqual([]);
  });
});

describe("services named like generated parameters and locals", () => {
  it("get parameters and locals that do not shadow them", () => {
    const server = ws.files.get("gen/server/locals_nomadkit.ts")!;
    expect(server).toContain(
      "export function registerrouter(router$: ConnectRouter, handlers: Partial<routerHandlers>, runtime?: ServerRuntime): void {",
    );
    expect(server).toContain("  router$.service(router, {");
    expect(typeErrors("locals.proto")).toEqual([]);
  });
});

describe("a service without methods", () => {
  it("compiles under noUnusedLocals and noUnusedParameters", () => {
    expect(ws.files.get("gen/server/empty_nomadkit.ts")).toContain("  router.service(Empty, {});");
    expect(typeErrors("empty.proto")).toEqual([]);
  });

  it("still registers and constructs", async () => {
    const { registerEmpty } = await import(join(ws.dir, "gen/server/empty_nomadkit.ts"));
    const { EmptyClient } = await import(join(ws.dir, "gen/client/empty_nomadkit.ts"));
    expect(() => registerEmpty(createConnectRouter(), {})).not.toThrow();
    expect(new EmptyClient(createRouterTransport(() => {}))).toBeInstanceOf(EmptyClient);
  });
});

describe("RPCs of one service whose generated names collide", () => {
  it("fail generation, naming the file, the service and both RPCs", () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-protoc-gen-"));
    try {
      const protoFile = compileProtos(dir, {
        "acme/casing.proto": `syntax = "proto3";
package acme.casing;
message Req { string s = 1; }
service Casing {
  rpc Foo(Req) returns (Req);
  rpc Bar(Req) returns (Req);
  rpc foo(Req) returns (Req);
}
`,
      });
      for (const kind of ["client", "server"]) {
        expect(() => runPlugin(protocGenNomadkit, protoFile, ["acme/casing.proto"], `kind=${kind},target=ts`)).toThrow(
          'acme/casing.proto: service acme.casing.Casing: rpc Foo and rpc foo both generate the name "foo"',
        );
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
