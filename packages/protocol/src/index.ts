/**
 * The Nomad plugin protocol as protobuf-es messages and service descriptors, one namespace per
 * contract area. Prefer the subpath imports (`@nomadkit/protocol/driver`, ...) in application code.
 *
 * @example
 * ```ts
 * import { driver } from "@nomadkit/protocol";
 * console.log(driver.Driver.typeName); // hashicorp.nomad.plugins.drivers.proto.Driver
 * ```
 * @module
 */
export * as base from "./base.js";
export * as driver from "./driver.js";
export * as executor from "./executor.js";
export * as device from "./device.js";
export * as hclspec from "./hclspec.js";
export * as structs from "./structs.js";
export * as goplugin from "./goplugin.js";
export * as health from "./health.js";
