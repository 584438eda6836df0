import type { DescFile } from "@bufbuild/protobuf";
import type { GeneratedFile } from "@bufbuild/protoplugin";
import { deprecatedTag, docText, protoDoc } from "./doc.js";
import type { Options } from "./options.js";

/** Emit `XHandlers`, `XMethodNames` and `registerX` for every service of `file`. */
export function generateServerFile(f: GeneratedFile, file: DescFile, options: Options): void {
  const ServerRuntime = f.import("ServerRuntime", options.runtimeImport, true);
  const HandlerContext = f.import("HandlerContext", options.runtimeImport, true);
  const MaybePromise = f.import("MaybePromise", options.runtimeImport, true);
  const serverRuntime = f.import("serverRuntime", options.runtimeImport);
  const ConnectRouter = f.import("ConnectRouter", "@connectrpc/connect", true);
  const MessageInitShape = f.import("MessageInitShape", "@bufbuild/protobuf", true);

  for (const service of file.services) {
    const svc = f.importSchema(service);
    const handlers = `${service.name}Handlers`;
    const names = `${service.name}MethodNames`;

    f.print(
      f.jsDoc(
        docText(
          protoDoc(service),
          `Handlers for \`${service.typeName}\`. Register them with \`register${service.name}\`; methods left out` +
            "\nanswer Unimplemented. Throw `RecoverableError` for recoverable/unrecoverable task failures;" +
            "\n`context.signal` aborts when the caller goes away.",
          `@generated from service ${service.typeName}`,
          deprecatedTag(service),
        ),
      ),
    );
    f.print(f.export("interface", handlers), " {");
    for (const method of service.methods) {
      const I = f.importShape(method.input);
      const O = f.importSchema(method.output, true);
      f.print(
        f.jsDoc(
          docText(protoDoc(method), `@generated from rpc ${service.typeName}.${method.name}`, deprecatedTag(method)),
          "  ",
        ),
      );
      const out = [MessageInitShape, "<typeof ", O, ">"];
      // In an interface a bare `new(...)` would declare a constructor, not a method.
      const member = method.localName === "new" ? f.string("new") : method.localName;
      switch (method.methodKind) {
        case "unary":
          f.print("  ", member, "(request: ", I, ", context: ", HandlerContext, "): ", MaybePromise, "<", ...out, ">;");
          break;
        case "server_streaming":
          f.print("  ", member, "(request: ", I, ", context: ", HandlerContext, "): AsyncIterable<", ...out, ">;");
          break;
        case "client_streaming":
          f.print("  ", member, "(requests: AsyncIterable<", I, ">, context: ", HandlerContext, "): ", MaybePromise, "<", ...out, ">;");
          break;
        case "bidi_streaming":
          f.print("  ", member, "(requests: AsyncIterable<", I, ">, context: ", HandlerContext, "): AsyncIterable<", ...out, ">;");
          break;
      }
    }
    f.print("}");
    f.print();

    f.print(f.jsDoc(`Handler names of \`${service.typeName}\`, in proto order.`));
    f.print(f.export("const", names), `: readonly (keyof ${handlers})[] = [`);
    for (const method of service.methods) f.print("  ", f.string(method.localName), ",");
    f.print("];");
    f.print();

    f.print(
      f.jsDoc(
        docText(
          `Serve \`${service.typeName}\` on \`router\`: every method goes through \`runtime\` (default: a`,
          "runtime that logs nothing); missing handlers answer Unimplemented.",
        ).replace("\n\n", "\n") +
          "\n\n@example\n```ts\nregister" +
          service.name +
          "(router, handlers, new ServerRuntime({ logger }));\n```",
      ),
    );
    f.print(
      f.export("function", `register${service.name}`),
      "(router: ",
      ConnectRouter,
      ", handlers: Partial<",
      handlers,
      ">, runtime?: ",
      ServerRuntime,
      "): void {",
    );
    f.print("  const rt = ", serverRuntime, "(runtime);");
    f.print("  router.service(", svc, ", {");
    for (const method of service.methods) {
      const fn = {
        unary: "unary",
        server_streaming: "serverStream",
        client_streaming: "clientStream",
        bidi_streaming: "bidiStream",
      }[method.methodKind];
      const n = method.localName;
      f.print("    ", n, ": rt.", fn, "(", svc, ".method.", n, ", handlers.", n, "?.bind(handlers)),");
    }
    f.print("  });");
    f.print("}");
    f.print();
  }
}
