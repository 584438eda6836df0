// Derived from the descriptors: every RPC of every service in @nomadkit/protocol has a generated
// client method and a server handler key + register wrapper. An RPC added to a .proto without
// regenerating protoc-gen-nomadkit's output fails here.
import { describe, expect, it } from "vitest";
import { createConnectRouter } from "@connectrpc/connect";
import { allServices, clientFor, methodNamesFor, registerFor } from "./services.js";

const services = allServices();

describe("generated wrappers cover every RPC", () => {
  it("finds the contract's services", () => {
    expect(services.map((s) => s.typeName).sort()).toEqual([
      "grpc.health.v1.Health",
      "hashicorp.nomad.plugins.base.proto.BasePlugin",
      "hashicorp.nomad.plugins.device.DevicePlugin",
      "hashicorp.nomad.plugins.drivers.proto.Driver",
      "hashicorp.nomad.plugins.executor.proto.Executor",
      "plugin.GRPCBroker",
      "plugin.GRPCController",
      "plugin.GRPCStdio",
    ]);
  });

  for (const service of services) {
    describe(service.typeName, () => {
      it("client: a method per RPC", () => {
        const Client = clientFor(service);
        expect(Client, `${service.name}Client`).toBeTypeOf("function");
        for (const m of service.methods) {
          expect(Client!.prototype[m.localName], `${service.name}Client.${m.localName}`).toBeTypeOf("function");
        }
      });

      it("server: a handler key per RPC and a registered route for each", () => {
        expect(methodNamesFor(service)).toEqual(service.methods.map((m) => m.localName));
        const register = registerFor(service);
        expect(register, `register${service.name}`).toBeTypeOf("function");
        const router = createConnectRouter();
        register!(router, {});
        const paths = router.handlers.map((h) => h.requestPath).sort();
        expect(paths).toEqual(service.methods.map((m) => `/${service.typeName}/${m.name}`).sort());
      });
    });
  }
});
