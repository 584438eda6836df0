import { execFile } from "node:child_process";
import { statfs, unlink } from "node:fs/promises";
import { existsSync } from "node:fs";
import { findSystemBinary } from "./system-binary.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { NetworkIsolationSpec_NetworkIsolationMode } from "@nomadkit/protocol/driver";
import {
  validateAllocId,
  type CreateNetworkResult,
  type NetworkIsolation,
  type NetworkManager,
} from "./types.js";

/** Where `ip netns` keeps named namespaces; Nomad uses the same directory. */
export const NETNS_DIR = "/var/run/netns";
/** statfs(2) magic of nsfs: a mounted namespace file. */
const NSFS_MAGIC = 0x6e736673;

/** Options for {@link LinuxNetnsManager}. */
export interface LinuxNetnsManagerOptions {
  /** The `ip` binary (iproute2). Default `ip` from PATH, else from /usr/bin, /bin, /usr/sbin or /sbin. */
  ip?: string;
  /** Address written in `hostsConfig` next to the requested hostname. Default 127.0.0.1. */
  hostsAddress?: string;
  /** Extra labels put on every spec. */
  labels?: Record<string, string>;
}

/**
 * True when `path` is a mounted network (or other) namespace file, i.e. a live named namespace and
 * not a stale empty file left behind after a crash.
 *
 * @example
 * ```ts
 * import { isNamespaceMount } from "@nomadkit/server/network";
 * if (!(await isNamespaceMount(spec.path))) throw new Error("namespace is gone");
 * ```
 */
export async function isNamespaceMount(path: string): Promise<boolean> {
  try {
    return (await statfs(path)).type === NSFS_MAGIC;
  } catch {
    return false;
  }
}

/**
 * Linux {@link NetworkManager}: one named network namespace per allocation at
 * `/var/run/netns/<alloc_id>` (created with `ip netns add`, so `ip netns exec` and Nomad's tools
 * see it), with `lo` up. Needs root (CAP_SYS_ADMIN) and iproute2. Concurrent calls for the same
 * allocation are serialised.
 *
 * @example
 * ```ts
 * import { LinuxNetnsManager } from "@nomadkit/server/network";
 * const nets = new LinuxNetnsManager();
 * const { spec, created } = await nets.create("9f1c2a7e-...", "web");
 * // spec = { mode: GROUP, path: "/var/run/netns/9f1c2a7e-...", labels: {...}, hostsConfig: {...} }
 * await nets.destroy("9f1c2a7e-...", spec);
 * ```
 */
export class LinuxNetnsManager implements NetworkManager {
  private readonly ipOption: string | undefined;
  private ipPath: string | undefined;
  private readonly hostsAddress: string;
  private readonly labels: Record<string, string>;
  private readonly locks = new Map<string, Promise<unknown>>();

  constructor(options: LinuxNetnsManagerOptions = {}) {
    this.ipOption = options.ip;
    this.hostsAddress = options.hostsAddress ?? "127.0.0.1";
    this.labels = options.labels ?? {};
  }

  /** Path of the namespace of `allocId`. */
  pathOf(allocId: string): string {
    validateAllocId(allocId);
    return `${NETNS_DIR}/${allocId}`;
  }

  async create(allocId: string, hostname: string): Promise<CreateNetworkResult> {
    const path = this.pathOf(allocId);
    return this.serial(allocId, async () => {
      let created = false;
      if (!(await isNamespaceMount(path))) {
        // A plain file here is a leftover of an interrupted add/delete; ip refuses to reuse it.
        if (existsSync(path)) await unlink(path).catch(() => undefined);
        await this.run(["netns", "add", allocId], `create network namespace ${path}`);
        created = true;
      }
      try {
        await this.run(["-n", allocId, "link", "set", "lo", "up"], `bring up lo in ${path}`);
      } catch (err) {
        if (created) await this.run(["netns", "delete", allocId], "").catch(() => undefined);
        throw err;
      }
      const spec: NetworkIsolation = {
        mode: NetworkIsolationSpec_NetworkIsolationMode.GROUP,
        path,
        labels: { ...this.labels, "nomadkit.netns": allocId },
      };
      if (hostname) spec.hostsConfig = { hostname, address: this.hostsAddress };
      return { spec, created };
    });
  }

  async destroy(allocId: string, spec?: Partial<NetworkIsolation>): Promise<void> {
    const path = this.pathOf(allocId);
    if (spec?.path && spec.path !== path && spec.path !== path.replace(/^\/var\/run\//, "/run/")) {
      // Never unmount a path we did not create for this allocation.
      throw new ConnectError(
        `isolation_spec.path: ${JSON.stringify(spec.path)} is not the namespace of allocation ${allocId} (${path})`,
        Code.InvalidArgument,
      );
    }
    return this.serial(allocId, async () => {
      if (!(await isNamespaceMount(path))) {
        if (existsSync(path)) await unlink(path).catch(() => undefined);
        return;
      }
      await this.run(["netns", "delete", allocId], `delete network namespace ${path}`);
    });
  }

  private serial<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(key) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.locks.set(key, tail);
    void tail.then(() => {
      if (this.locks.get(key) === tail) this.locks.delete(key);
    });
    return next;
  }

  /** The ip to run: the option, else the one found (looked up until there is one: it may be installed later). */
  private get ip(): string {
    return this.ipOption ?? (this.ipPath ??= findSystemBinary("ip")) ?? "ip";
  }

  private run(args: string[], what: string): Promise<void> {
    const ip = this.ip;
    return new Promise((resolve, reject) => {
      execFile(ip, args, { timeout: 30_000 }, (err, _stdout, stderr) => {
        if (!err) return resolve();
        const detail = String(stderr || err.message).trim();
        reject(new ConnectError(`${what}: ${ip} ${args.join(" ")}: ${detail}`, Code.Internal, undefined, undefined, err));
      });
    });
  }
}
