import { execFile } from "node:child_process";
import { isAbsolute } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { isNamespaceMount } from "./linux.js";
import { findSystemBinary } from "./system-binary.js";
import type { NetworkIsolation } from "./types.js";

/** A command line: the file to execute and its arguments. */
export interface CommandLine {
  /** Executable path or name (looked up in PATH by the spawner). */
  file: string;
  /** Arguments, without the executable. */
  args: string[];
}

/** Options for {@link netnsCommand}. */
export interface NetnsCommandOptions {
  /**
   * Switch to this uid after entering the namespace (entering needs root, so spawn as root). Needs
   * `gid`: nsenter changes groups only with one, and the process would keep group root.
   */
  uid?: number;
  /** Switch to this gid after entering the namespace; supplementary groups are dropped. */
  gid?: number;
  /** The nsenter binary; default found on the executor's PATH. */
  nsenter?: string;
}

/**
 * Whether a spec asks for a namespace a process must enter: it has a path (HOST mode and empty
 * specs do not).
 *
 * @example
 * ```ts
 * import { needsNetns } from "@nomadkit/server/network";
 * needsNetns(task.networkIsolationSpec); // false for HOST networking
 * ```
 */
export function needsNetns(
  spec: Partial<NetworkIsolation> | undefined,
): spec is Partial<NetworkIsolation> & {
  /** The namespace to enter, e.g. `/var/run/netns/<alloc id>`. */
  path: string;
} {
  return !!spec && typeof spec.path === "string" && spec.path !== "";
}

/**
 * Wraps a command so it runs inside the spec's network namespace: `nsenter --net=<path>
 * [--setgid G --setuid U] -- file args...`. A spec without a path returns the command unchanged.
 * Because entering a namespace needs root, a task user must be given here (as uid/gid) instead of
 * to spawn: nsenter drops privileges after `setns`.
 *
 * @example
 * ```ts
 * import { spawn } from "node:child_process";
 * import { netnsCommand } from "@nomadkit/server/network";
 * const { file, args } = netnsCommand(spec, "ip", ["-o", "link"], { uid: 65534, gid: 65534 });
 * spawn(file, args, { stdio: "inherit" });
 * ```
 */
export function netnsCommand(
  spec: Partial<NetworkIsolation> | undefined,
  file: string,
  args: readonly string[],
  options: NetnsCommandOptions = {},
): CommandLine {
  if (!needsNetns(spec)) return { file, args: [...args] };
  if (options.uid !== undefined && options.gid === undefined)
    throw new TypeError("netnsCommand: options.uid needs options.gid (nsenter would leave the process in group root)");
  const pre = [`--net=${spec.path}`];
  if (options.gid !== undefined) pre.push(`--setgid=${options.gid}`);
  if (options.uid !== undefined) pre.push(`--setuid=${options.uid}`);
  return { file: options.nsenter ?? nsenterPath(), args: [...pre, "--", file, ...args] };
}

/**
 * Checks that the spec's namespace exists before a task is started in it, so a missing namespace
 * is an error naming the field (InvalidArgument) rather than a cryptic nsenter failure; a host
 * where nsenter cannot be run (not installed) is FailedPrecondition naming the field and nsenter.
 *
 * @example
 * ```ts
 * import { assertNetnsUsable } from "@nomadkit/server/network";
 * await assertNetnsUsable(task.networkIsolationSpec, "network_isolation_spec.path");
 * ```
 */
export async function assertNetnsUsable(spec: Partial<NetworkIsolation> | undefined, field = "network_isolation.path"): Promise<void> {
  if (!needsNetns(spec)) return;
  if (!isAbsolute(spec.path) || !(await isNamespaceMount(spec.path))) {
    throw new ConnectError(`${field}: ${JSON.stringify(spec.path)} is not a mounted network namespace`, Code.InvalidArgument);
  }
  // A namespace file of another kind passes the check above, and nsenter --net would then fail in
  // the task's place (the task would seem to exit 1). Nothing short of setns() tells the kind of a
  // bind-mounted one: try it, as the launch will. In the C locale: the refusal is told by its
  // message, which a translated util-linux would word otherwise.
  const nsenter = nsenterPath();
  const { refused, unusable } = await new Promise<{ refused?: string; unusable?: string }>((resolve) => {
    const env = { ...process.env, LC_ALL: "C" };
    execFile(nsenter, [`--net=${spec.path}`, "--", "true"], { timeout: 10_000, env }, (err, _out, stderr) => {
      // The spawn's own failure: nsenter itself cannot run, and every task would fail in its place
      // (behind a cgroup's gate it exits 127: the task seems to start and end). Not a passing
      // shortage (EMFILE, EAGAIN): the launch reports that itself.
      const code = (err as NodeJS.ErrnoException | null)?.code;
      if (typeof code === "string" && NSENTER_MISSING.has(code)) return resolve({ unusable: code });
      resolve(err && /Invalid argument/.test(String(stderr)) ? { refused: String(stderr).trim() } : {});
    });
  });
  if (unusable !== undefined) {
    throw new ConnectError(
      `${field}: entering ${JSON.stringify(spec.path)} needs nsenter (util-linux), which cannot be run here (${nsenter}: ${unusable})`,
      Code.FailedPrecondition,
    );
  }
  if (refused !== undefined) {
    throw new ConnectError(`${field}: ${JSON.stringify(spec.path)} is not a network namespace (${refused})`, Code.InvalidArgument);
  }
}

/** Spawn errors that mean nsenter is not there (or not runnable) on this host. */
const NSENTER_MISSING = new Set(["ENOENT", "EACCES", "ENOEXEC", "EPERM", "ENOTDIR", "ELOOP"]);

let cachedNsenter: string | undefined;

/**
 * Absolute path of nsenter on the current PATH (tasks may have a PATH without it); `nsenter` when
 * not found.
 *
 * @example
 * ```ts
 * import { nsenterPath } from "@nomadkit/server/network";
 * nsenterPath(); // "/usr/bin/nsenter"
 * ```
 */
export function nsenterPath(): string {
  return (cachedNsenter ??= findSystemBinary("nsenter")) ?? "nsenter";
}
