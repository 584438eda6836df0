import type { DescFile } from "@bufbuild/protobuf";
import type { GeneratedFile } from "@bufbuild/protoplugin";
import { deprecatedTag, docText, protoDoc } from "./doc.js";
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
    f.print("  readonly #rt: ", ClientRuntime, ";");
    f.print();
    f.print("  /** Share one `ClientRuntime` between clients of one plugin, or pass a transport and options. */");
    f.print("  constructor(transport: ", Transport, " | ", ClientRuntime, ", options?: ", ClientOptions, ") {");
    f.print("    this.#rt = ", clientRuntime, "(transport, options);");
    f.print("  }");
    for (const method of service.methods) {
      const I = f.importSchema(method.input, true);
      const O = f.importShape(method.output);
      const ref = `${method.localName}`;
      f.print();
      f.print(
        f.jsDoc(
          docText(protoDoc(method), `@generated from rpc ${service.typeName}.${method.name}`, deprecatedTag(method)),
          "  ",
        ),
      );
      switch (method.methodKind) {
        case "unary":
          f.print("  ", ref, "(request: ", MessageInitShape, "<typeof ", I, ">, options?: ", CallOptions, "): Promise<", O, "> {");
          f.print("    return this.#rt.unary(", svc, ".method.", ref, ", request, options);");
          break;
        case "server_streaming":
          f.print("  ", ref, "(request: ", MessageInitShape, "<typeof ", I, ">, options?: ", CallOptions, "): AsyncIterable<", O, "> {");
          f.print("    return this.#rt.serverStream(", svc, ".method.", ref, ", request, options);");
          break;
        case "client_streaming":
          f.print("  ", ref, "(requests: AsyncIterable<", MessageInitShape, "<typeof ", I, ">>, options?: ", CallOptions, "): Promise<", O, "> {");
          f.print("    return this.#rt.clientStream(", svc, ".method.", ref, ", requests, options);");
          break;
        case "bidi_streaming":
          f.print("  ", ref, "(requests: AsyncIterable<", MessageInitShape, "<typeof ", I, ">>, options?: ", CallOptions, "): AsyncIterable<", O, "> {");
          f.print("    return this.#rt.bidiStream(", svc, ".method.", ref, ", requests, options);");
          break;
      }
      f.print("  }");
    }
    f.print("}");
    f.print();
  }
}
