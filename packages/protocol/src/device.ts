/**
 * Nomad's device plugin service (`hashicorp.nomad.plugins.device`).
 * @module
 */
export * from "./gen/hashicorp/nomad/plugins/device/device_pb.js";
