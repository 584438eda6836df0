import type { DescFile, DescMethod } from "@bufbuild/protobuf";
import type { GeneratedFile, Printable } from "@bufbuild/protoplugin";
import { deprecatedTag, docText, protoDoc } from "./doc.js";
import { handlerName, localNames } from "./names.js";
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
    const inputs = service.methods.map((method) => f.importShape(method.input));
    const outputs = service.methods.map((method) => f.importSchema(method.output, true));
    // Parameters and locals must not shadow what the code refers to (a service named `router`).
    const local = localNames(
      [svc, ...inputs, ...outputs, ServerRuntime, HandlerContext, MaybePromise, serverRuntime, ConnectRouter, MessageInitShape],
      ["request", "requests", "context", "router", "handlers", "runtime", "rt", "_handlers", "_runtime"],
    );

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
    service.methods.forEach((method, i) => {
      const I = inputs[i];
      const O = outputs[i];
      f.print(
        f.jsDoc(
          docText(protoDoc(method), `@generated from rpc ${service.typeName}.${method.name}`, deprecatedTag(method)),
          "  ",
        ),
      );
      const out = [MessageInitShape, "<typeof ", O, ">"];
      const one = [local.request, ": ", I];
      const many = [local.requests, ": globalThis.AsyncIterable<", I, ">"];
      const single = [MaybePromise, "<", ...out, ">"];
      const stream = ["globalThis.AsyncIterable<", ...out, ">"];
      const [input, result] = {
        unary: [one, single],
        server_streaming: [one, stream],
        client_streaming: [many, single],
        bidi_streaming: [many, stream],
      }[method.methodKind];
      const name = handlerName(method);
      // In an interface a bare `new(...)` would declare a constructor, not a method.
      const member = name === "new" ? f.string("new") : name;
      f.print("  ", member, "(", ...input, ", ", local.context, ": ", HandlerContext, "): ", ...result, ";");
    });
    f.print("}");
    f.print();

    f.print(f.jsDoc(`Handler names of \`${service.typeName}\`, in proto order.`));
    f.print(f.export("const", names), `: readonly (keyof ${handlers})[] = [`);
    for (const method of service.methods) f.print("  ", f.string(handlerName(method)), ",");
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
    // Without methods, handlers and runtime go unused: `_` keeps noUnusedParameters quiet.
    const empty = service.methods.length === 0;
    const { router, rt } = local;
    const handlersParam = empty ? local._handlers : local.handlers;
    const runtimeParam = empty ? local._runtime : local.runtime;
    const params = [router, ": ", ConnectRouter, ", ", handlersParam, ": Partial<", handlers, ">, ", runtimeParam, "?: ", ServerRuntime];
    f.print(f.export("function", `register${service.name}`), "(", ...params, "): void {");
    if (empty) {
      f.print("  ", router, ".service(", svc, ", {});");
      f.print("}");
      f.print();
      continue;
    }
    f.print("  const ", rt, " = ", serverRuntime, "(", runtimeParam, ");");
    const wrap = (method: DescMethod): Printable[] => {
      const fn = {
        unary: "unary",
        server_streaming: "serverStream",
        client_streaming: "clientStream",
        bidi_streaming: "bidiStream",
      }[method.methodKind];
      const handler = [handlersParam, ".", handlerName(method), "?.bind(", handlersParam, ")"];
      return [rt, ".", fn, "(", svc, ".method.", method.localName, ", ", ...handler, ")"];
    };
    if (service.methods.some((method) => method.localName === "__proto__")) {
      // connect's router.service() keys a service's methods by localName in a plain object, where
      // `__proto__` sets the prototype and the method is never routed: register each method alone.
      for (const method of service.methods) {
        f.print("  ", router, ".rpc(", svc, ".method.", method.localName, ", ", ...wrap(method), ");");
      }
    } else {
      f.print("  ", router, ".service(", svc, ", {");
      for (const method of service.methods) f.print("    ", method.localName, ": ", ...wrap(method), ",");
      f.print("  });");
    }
    f.print("}");
    f.print();
  }
}
