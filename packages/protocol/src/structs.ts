/**
 * Shared structs (`hashicorp.nomad.plugins.shared.structs`): attributes, stat values and RecoverableError.
 * @module
 */
export * from "./gen/hashicorp/nomad/plugins/shared/structs/attribute_pb.js";
export * from "./gen/hashicorp/nomad/plugins/shared/structs/stats_pb.js";
export * from "./gen/hashicorp/nomad/plugins/shared/structs/recoverable_error_pb.js";
