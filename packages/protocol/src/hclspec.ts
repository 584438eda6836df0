/**
 * HCL specification messages (`hashicorp.nomad.plugins.shared.hclspec`) that describe a plugin's config schema.
 * @module
 */
export * from "./gen/hashicorp/nomad/plugins/shared/hclspec/hcl_spec_pb.js";
