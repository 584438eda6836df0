import { Code, ConnectError } from "@connectrpc/connect";
import { NetworkIsolationSpec_NetworkIsolationMode } from "@nomadkit/protocol/driver";

/**
 * A network isolation spec, shaped like the `NetworkIsolationSpec` message (so it can be passed to
 * `create(NetworkIsolationSpecSchema, spec)` and a received message can be passed back in).
 */
export interface NetworkIsolation {
  /** Kind of isolation; GROUP for an allocation's shared namespace. */
  mode: NetworkIsolationSpec_NetworkIsolationMode;
  /** Path of the namespace, e.g. `/var/run/netns/<alloc_id>`. */
  path: string;
  /** Driver-defined details. */
  labels: { [key: string]: string };
  /** Entry for the allocation's /etc/hosts, when a hostname was asked for. */
  hostsConfig?:
    | {
        /** The allocation's hostname. */
        hostname: string;
        /** The address it resolves to inside the namespace. */
        address: string;
      }
    | undefined;
}

/** What {@link NetworkManager.create} returns: Nomad's `CreateNetworkResponse` fields. */
export interface CreateNetworkResult {
  /** The isolation spec Nomad hands to every task of the allocation. */
  spec: NetworkIsolation;
  /** False when the namespace already existed (the call is idempotent). */
  created: boolean;
}

/**
 * Creates and removes an allocation's network namespace: the pre-run and post-run network hooks a
 * driver with `must_create_network` serves through CreateNetwork / DestroyNetwork. Implementations
 * must be idempotent: creating an existing namespace answers `created: false`, destroying a
 * missing one succeeds.
 *
 * @example
 * ```ts
 * import { LinuxNetnsManager, type NetworkManager } from "@nomadkit/server/network";
 * const nets: NetworkManager = new LinuxNetnsManager();
 * const { spec, created } = await nets.create(allocId, "web-1");
 * // ... later, in DestroyNetwork:
 * await nets.destroy(allocId, spec);
 * ```
 */
export interface NetworkManager {
  /** Creates (or finds) the namespace of `allocId`. */
  create(allocId: string, hostname: string): Promise<CreateNetworkResult>;
  /** Removes the namespace of `allocId`; `spec` is what create returned (it may be absent). */
  destroy(allocId: string, spec?: Partial<NetworkIsolation> | undefined): Promise<void>;
}

const ALLOC_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$/;

/**
 * Checks that an allocation id can name a namespace file: letters, digits, `_`, `.`, `-`, not
 * starting with a dot, no slashes, at most 200 characters. Throws InvalidArgument naming `field`.
 *
 * @example
 * ```ts
 * import { validateAllocId } from "@nomadkit/server/network";
 * validateAllocId(req.allocId); // throws ConnectError(InvalidArgument, "alloc_id: ...") on "../etc"
 * ```
 */
export function validateAllocId(allocId: string, field = "alloc_id"): void {
  if (typeof allocId !== "string" || allocId === "") {
    throw new ConnectError(`${field}: must not be empty`, Code.InvalidArgument);
  }
  if (!ALLOC_ID.test(allocId)) {
    throw new ConnectError(
      `${field}: ${JSON.stringify(allocId.slice(0, 80))} is not a valid allocation id ` +
        `(letters, digits, '_', '.', '-'; no path separators)`,
      Code.InvalidArgument,
    );
  }
}
