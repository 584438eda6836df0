/**
 * Nomad's executor service (`hashicorp.nomad.plugins.executor.proto`): the per-task supervisor
 * process that keeps a task alive across driver restarts.
 * @module
 */
export * from "./gen/hashicorp/nomad/plugins/executor/proto/executor_pb.js";
