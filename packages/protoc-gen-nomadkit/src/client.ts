import type { DescFile } from "@bufbuild/protobuf";
import type { GeneratedFile } from "@bufbuild/protoplugin";
import { deprecatedTag, docText, protoDoc } from "./doc.js";
import { clientMethodName, localNames } from "./names.js";
import type { Options } from "./options.js";

/** Emit one `XClient` class per service of `file`. */
export function generateClientFile(f: GeneratedFile, file: DescFile, options: Options): void {
  const ClientRuntime = f.import("ClientRuntime", options.runtimeImport, true);
  const ClientOptions = f.import("ClientOptions", options.runtimeImport, true);
  const CallOptions = f.import("CallOptions", options.runtimeImport, true);
  const clientRuntime = f.import("clientRuntime", options.runtimeImport);
  const Transport = f.import("Transport", "@connectrpc/connect", true);
  const MessageInitShape = f.import("MessageInitShape", "@bufbuild/protobuf", true);

  for (const service of file.services) {
    const svc = f.importSchema(service);
    const className = `${service.name}Client`;
    const inputs = service.methods.map((method) => f.importSchema(method.input, true));
    const outputs = service.methods.map((method) => f.importShape(method.output));
    // Parameters must not shadow what the code refers to (a service named `options`).
    const local = localNames(
      [svc, ...inputs, ...outputs, ClientRuntime, ClientOptions, CallOptions, clientRuntime, Transport, MessageInitShape],
      ["transport", "options", "request", "requests", "_transport", "_options"],
    );
    const { request, requests, options: opts } = local;
    f.print(
      f.jsDoc(
        docText(
          protoDoc(service),
          `Typed client for \`${service.typeName}\`. Every method runs through the one client runtime, so` +
            "\nall share the same error semantics: caller cancellation (`isCancellation`), `RecoverableError`," +
            "\n`PluginShutdownError` when the plugin exits.",
          `@generated from service ${service.typeName}`,
          deprecatedTag(service),
        ),
      ),
    );
    f.print(f.export("class", className), " {");
    if (service.methods.length === 0) {
      // Nothing to call: no runtime to keep (an unread `#rt` fails noUnusedLocals), and `_` keeps
      // noUnusedParameters quiet about the constructor's parameters.
      f.print("  /** Takes the arguments every client takes; a service without methods needs no runtime. */");
      f.print("  constructor(", local._transport, ": ", Transport, " | ", ClientRuntime, ", ", local._options, "?: ", ClientOptions, ") {}");
      f.print("}");
      f.print();
      continue;
    }
    f.print("  readonly #rt: ", ClientRuntime, ";");
    f.print();
    f.print("  /** Share one `ClientRuntime` between clients of one plugin, or pass a transport and options. */");
    f.print("  constructor(", local.transport, ": ", Transport, " | ", ClientRuntime, ", ", opts, "?: ", ClientOptions, ") {");
    f.print("    this.#rt = ", clientRuntime, "(", local.transport, ", ", opts, ");");
    f.print("  }");
    service.methods.forEach((method, i) => {
      const I = inputs[i];
      const O = outputs[i];
      const name = clientMethodName(method);
      const desc = [svc, ".method.", method.localName];
      f.print();
      f.print(
        f.jsDoc(
          docText(protoDoc(method), `@generated from rpc ${service.typeName}.${method.name}`, deprecatedTag(method)),
          "  ",
        ),
      );
      const req = [MessageInitShape, "<typeof ", I, ">"];
      switch (method.methodKind) {
        case "unary":
          f.print("  ", name, "(", request, ": ", ...req, ", ", opts, "?: ", CallOptions, "): globalThis.Promise<", O, "> {");
          f.print("    return this.#rt.unary(", ...desc, ", ", request, ", ", opts, ");");
          break;
        case "server_streaming":
          f.print("  ", name, "(", request, ": ", ...req, ", ", opts, "?: ", CallOptions, "): globalThis.AsyncIterable<", O, "> {");
          f.print("    return this.#rt.serverStream(", ...desc, ", ", request, ", ", opts, ");");
          break;
        case "client_streaming":
          f.print("  ", name, "(", requests, ": globalThis.AsyncIterable<", ...req, ">, ", opts, "?: ", CallOptions, "): globalThis.Promise<", O, "> {");
          f.print("    return this.#rt.clientStream(", ...desc, ", ", requests, ", ", opts, ");");
          break;
        case "bidi_streaming":
          f.print("  ", name, "(", requests, ": globalThis.AsyncIterable<", ...req, ">, ", opts, "?: ", CallOptions, "): globalThis.AsyncIterable<", O, "> {");
          f.print("    return this.#rt.bidiStream(", ...desc, ", ", requests, ", ", opts, ");");
          break;
      }
      f.print("  }");
    });
    f.print("}");
    f.print();
  }
}
