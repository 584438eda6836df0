/**
 * Nomad's base plugin service (`hashicorp.nomad.plugins.base.proto`): PluginInfo, ConfigSchema, SetConfig.
 * @module
 */
export * from "./gen/hashicorp/nomad/plugins/base/proto/base_pb.js";
