// go-plugin's own services: health, controller, stdio and broker. Loaded lazily by servePlugin.
import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type HandlerContext,
} from "@connectrpc/connect";
import { StdioDataSchema } from "@nomadkit/protocol/goplugin";
import {
  HealthCheckResponse_ServingStatus as ServingStatus,
  HealthCheckResponseSchema,
  type HealthCheckRequest,
} from "@nomadkit/protocol/health";
import { registerHealth } from "../gen/grpc/health/v1/health_nomadkit.js";
import { registerGRPCBroker } from "../gen/plugin/grpc_broker_nomadkit.js";
import { registerGRPCController } from "../gen/plugin/grpc_controller_nomadkit.js";
import { registerGRPCStdio } from "../gen/plugin/grpc_stdio_nomadkit.js";
import type { ServerRuntime } from "../runtime/server-runtime.js";
import type { Logger } from "../log/index.js";
import type { StdioCapture } from "./stdio.js";
import { anySignal } from "@nomadkit/client/runtime";

/** What the built-in services need from the running plugin. */
export interface CoreServicesHost {
  logger: Logger;
  runtime: ServerRuntime;
  stdio: StdioCapture;
  /** Aborted when the plugin starts shutting down. */
  shutdownSignal: AbortSignal;
  /** Starts the graceful shutdown (idempotent); called after the Shutdown RPC has been answered. */
  requestShutdown(reason: string): void;
}

// grpc-go's health server knows "" (the whole server); go-plugin registers "plugin" too.
const HEALTH_SERVICES = ["", "plugin"];

/**
 * Resolves when `signal` aborts. The listener goes when `until` aborts: a call's own signal, so that
 * the plugin-wide shutdown signal does not collect one per stream for the life of the process.
 */
function aborted(signal: AbortSignal, until?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener("abort", () => resolve(), { once: true, signal: until });
  });
}

export function registerCoreServices(
  router: ConnectRouter,
  host: CoreServicesHost,
): void {
  const status = () =>
    host.shutdownSignal.aborted
      ? ServingStatus.NOT_SERVING
      : ServingStatus.SERVING;
  const checkOne = (req: HealthCheckRequest) => {
    if (!HEALTH_SERVICES.includes(req.service)) {
      throw new ConnectError(
        `unknown service ${JSON.stringify(req.service)}`,
        Code.NotFound,
      );
    }
    return { status: status() };
  };

  registerHealth(
    router,
    {
      check: (req) => checkOne(req),
      list: () => ({
        statuses: Object.fromEntries(
          HEALTH_SERVICES.map((s) => [
            s,
            create(HealthCheckResponseSchema, { status: status() }),
          ]),
        ),
      }),
      async *watch(req, ctx: HandlerContext) {
        yield checkOne(req);
        if (host.shutdownSignal.aborted) return;
        await Promise.race([aborted(host.shutdownSignal, ctx.signal), aborted(ctx.signal)]);
        if (!ctx.signal.aborted) yield { status: status() };
      },
    },
    host.runtime,
  );

  registerGRPCController(
    router,
    {
      shutdown() {
        // Answer first; the host only waits for the process to exit.
        setImmediate(() => host.requestShutdown("GRPCController.Shutdown"));
        return {};
      },
    },
    host.runtime,
  );

  registerGRPCStdio(
    router,
    {
      async *streamStdio(_req, ctx: HandlerContext) {
        const signal = anySignal([ctx.signal, host.shutdownSignal]);
        for await (const chunk of host.stdio.subscribe(signal)) {
          yield create(StdioDataSchema, {
            channel: chunk.channel,
            data: chunk.data,
          });
        }
      },
    },
    host.runtime,
  );

  registerGRPCBroker(
    router,
    {
      // Nomad opens the broker stream but never uses it: drain what arrives and send nothing.
      async *startStream(requests, ctx: HandlerContext) {
        const it = requests[Symbol.asyncIterator]();
        const stop = Promise.race([
          aborted(host.shutdownSignal, ctx.signal),
          aborted(ctx.signal),
        ]).then(() => "stop" as const);
        for (;;) {
          const next = await Promise.race([it.next(), stop]);
          if (next === "stop" || next.done) break;
          host.logger.trace("ignoring GRPCBroker message", {
            service_id: next.value.serviceId,
          });
        }
        void it.return?.();
      },
    },
    host.runtime,
  );
}
