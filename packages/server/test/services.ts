// Every service in @nomadkit/protocol, found from the descriptors (not from a hand-kept list), and
// the generated client class / server register helper for each.
import type { DescService } from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import * as protocol from "@nomadkit/protocol";
import * as clients from "@nomadkit/client";
import type { ServerRuntime } from "../src/runtime.js";
import * as base from "../src/gen/hashicorp/nomad/plugins/base/proto/base_nomadkit.js";
import * as driver from "../src/gen/hashicorp/nomad/plugins/drivers/proto/driver_nomadkit.js";
import * as executor from "../src/gen/hashicorp/nomad/plugins/executor/proto/executor_nomadkit.js";
import * as device from "../src/gen/hashicorp/nomad/plugins/device/device_nomadkit.js";
import * as controller from "../src/gen/plugin/grpc_controller_nomadkit.js";
import * as stdio from "../src/gen/plugin/grpc_stdio_nomadkit.js";
import * as broker from "../src/gen/plugin/grpc_broker_nomadkit.js";
import * as health from "../src/gen/grpc/health/v1/health_nomadkit.js";

/** All services of all files exported by @nomadkit/protocol's namespaces, deduplicated. */
export function allServices(): DescService[] {
  const byName = new Map<string, DescService>();
  for (const ns of Object.values(protocol)) {
    for (const v of Object.values(ns as Record<string, unknown>)) {
      const d = v as { kind?: string; services?: DescService[] };
      if (d?.kind === "file") for (const s of d.services ?? []) byName.set(s.typeName, s);
    }
  }
  return [...byName.values()];
}

const serverGen: Record<string, unknown> = {
  ...base,
  ...driver,
  ...executor,
  ...device,
  ...controller,
  ...stdio,
  ...broker,
  ...health,
};

export type Register = (router: ConnectRouter, handlers: Record<string, unknown>, runtime?: ServerRuntime) => void;

/** `registerX` for a service, or undefined if it was not generated. */
export function registerFor(service: DescService): Register | undefined {
  return serverGen[`register${service.name}`] as Register | undefined;
}

/** `XMethodNames` for a service, or undefined if it was not generated. */
export function methodNamesFor(service: DescService): readonly string[] | undefined {
  return serverGen[`${service.name}MethodNames`] as readonly string[] | undefined;
}

export type ClientCtor = new (transport: unknown, options?: unknown) => Record<string, (...args: unknown[]) => unknown>;

/** `XClient` for a service (from @nomadkit/client's public entry), or undefined. */
export function clientFor(service: DescService): ClientCtor | undefined {
  return (clients as Record<string, unknown>)[`${service.name}Client`] as ClientCtor | undefined;
}
