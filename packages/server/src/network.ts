/**
 * Network isolation for Nomad task drivers: the platform-agnostic {@link NetworkManager} behind
 * CreateNetwork / DestroyNetwork, its Linux implementation (named network namespaces at
 * `/var/run/netns/<alloc_id>`), and helpers to run a task process inside a namespace.
 *
 * @example
 * ```ts
 * import { LinuxNetnsManager, netnsCommand } from "@nomadkit/server/network";
 * const nets = new LinuxNetnsManager();
 * const { spec } = await nets.create(allocId, "web");
 * const { file, args } = netnsCommand(spec, "/usr/bin/my-server", ["--port", "8080"]);
 * ```
 * @module
 */
export { validateAllocId } from "./network/types.js";
export type { CreateNetworkResult, NetworkIsolation, NetworkManager } from "./network/types.js";
export { LinuxNetnsManager, NETNS_DIR, isNamespaceMount } from "./network/linux.js";
export type { LinuxNetnsManagerOptions } from "./network/linux.js";
export { assertNetnsUsable, needsNetns, netnsCommand, nsenterPath } from "./network/exec.js";
export type { CommandLine, NetnsCommandOptions } from "./network/exec.js";
