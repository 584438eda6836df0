/**
 * Nomad's task-driver service (`hashicorp.nomad.plugins.drivers.proto`): the Driver service, task
 * configs, handles, stats, exec streaming and network isolation messages.
 *
 * @example
 * ```ts
 * import { create } from "@bufbuild/protobuf";
 * import { ExecTaskStreamingRequestSchema } from "@nomadkit/protocol/driver";
 * const setup = create(ExecTaskStreamingRequestSchema, { setup: { taskId: "t1", command: ["sh"] } });
 * ```
 * @module
 */
export * from "./gen/hashicorp/nomad/plugins/drivers/proto/driver_pb.js";
