// An independent gRPC peer (@grpc/grpc-js, like grpc-go's behaviour on the wire) against servePlugin.
import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import {
  create,
  fromBinary,
  toBinary,
  type DescMessage,
  type MessageShape,
} from "@bufbuild/protobuf";
import {
  HealthCheckRequestSchema,
  HealthCheckResponseSchema,
  HealthCheckResponse_ServingStatus as ServingStatus,
} from "@nomadkit/protocol/health";
import { EmptySchema } from "@nomadkit/protocol/goplugin";
import {
  PluginInfoRequestSchema,
  PluginInfoResponseSchema,
} from "@nomadkit/protocol/base";
import { NOMAD_COOKIE, testDriver } from "./goplugin-helpers.js";

function unary<I extends DescMessage, O extends DescMessage>(
  client: grpc.Client,
  path: string,
  inSchema: I,
  outSchema: O,
  req: MessageShape<I>,
): Promise<MessageShape<O>> {
  return new Promise((resolve, reject) =>
    client.makeUnaryRequest(
      path,
      (m: MessageShape<I>) => Buffer.from(toBinary(inSchema, m)),
      (b: Buffer) => fromBinary(outSchema, b),
      req,
      (err, res) => (err ? reject(err) : resolve(res!)),
    ),
  );
}

describe("servePlugin with a grpc-js host", () => {
  it("answers health, BasePlugin and GRPCController over the unix socket with :authority 'unused'", async () => {
    const child = spawn(process.execPath, [testDriver], {
      env: { ...process.env, ...NOMAD_COOKIE, PLUGIN_PROTOCOL_VERSIONS: "2" },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const exited = new Promise<number | null>((r) =>
      child.once("exit", (code) => r(code)),
    );
    const line = await new Promise<string>((resolve) => {
      let buf = "";
      child.stdout.on("data", (d: Buffer) => {
        buf += d.toString();
        if (buf.includes("\n")) resolve(buf.slice(0, buf.indexOf("\n")));
      });
    });
    const [, , network, address] = line.split("|");
    expect(network).toBe("unix");
    const client = new grpc.Client(
      `unix:${address}`,
      grpc.credentials.createInsecure(),
      {
        "grpc.default_authority": "unused",
      },
    );
    try {
      const health = await unary(
        client,
        "/grpc.health.v1.Health/Check",
        HealthCheckRequestSchema,
        HealthCheckResponseSchema,
        create(HealthCheckRequestSchema, { service: "plugin" }),
      );
      expect(health.status).toBe(ServingStatus.SERVING);
      const info = await unary(
        client,
        "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo",
        PluginInfoRequestSchema,
        PluginInfoResponseSchema,
        create(PluginInfoRequestSchema),
      );
      expect(info.name).toBe("test-driver");
      const missing = await unary(
        client,
        "/no.Such/Method",
        EmptySchema,
        EmptySchema,
        create(EmptySchema),
      ).catch((e: grpc.ServiceError) => e);
      expect((missing as grpc.ServiceError).code).toBe(
        grpc.status.UNIMPLEMENTED,
      );
      await unary(
        client,
        "/plugin.GRPCController/Shutdown",
        EmptySchema,
        EmptySchema,
        create(EmptySchema),
      ).catch(() => {});
      expect(await exited).toBe(0);
    } finally {
      client.close();
      child.kill("SIGKILL");
    }
  });
});
