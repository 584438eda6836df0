import { execFile } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";

/** A resolved task user. */
export interface ResolvedUser {
  /** Login name from passwd; the `user` string as given when it was numeric. */
  name: string;
  /** User id the task runs as. */
  uid: number;
  /** Primary group id (for a numeric uid without a passwd entry: the uid). */
  gid: number;
  /**
   * Every group id the task runs with: the user's group memberships (`id -G`, so NSS sources count)
   * when it has a passwd entry, else just `gid` (also when absent). Nomad sets them as the task's
   * supplementary groups.
   */
  groups?: number[];
  /** Home directory from passwd; `/` when unknown. */
  home: string;
}

/**
 * Resolves a task's `user` to uid/gid and groups: a name (looked up with `getent passwd`, so NSS
 * sources such as LDAP work), a numeric uid, or `uid:gid`. Throws InvalidArgument naming `field`
 * when unknown.
 *
 * @example
 * ```ts
 * import { resolveUser } from "@nomadkit/server/executor";
 * const nobody = await resolveUser("nobody"); // { uid: 65534, gid: 65534, groups: [65534], ... }
 * ```
 */
export async function resolveUser(user: string, field = "user"): Promise<ResolvedUser> {
  const numeric = /^(\d+)(?::(\d+))?$/.exec(user);
  if (numeric?.[2] !== undefined) {
    const gid = id32(numeric[2], "gid", user, field);
    return { name: user, uid: id32(numeric[1]!, "uid", user, field), gid, groups: [gid], home: "/" };
  }
  // Before the lookup: getent takes a number for a uid and truncates it as well (4294967296 is root).
  if (numeric) id32(numeric[1]!, "uid", user, field);
  const line = await run("getent", ["passwd", user]).catch(() => undefined);
  if (line) {
    const [name, , uid, gid, , home] = line.split(":");
    if (name !== undefined && uid !== undefined && gid !== undefined) {
      const g = id32(gid, "gid", user, field);
      return { name, uid: id32(uid, "uid", user, field), gid: g, groups: await groupIds(name, g), home: home || "/" };
    }
  }
  if (numeric) {
    // A uid without a passwd entry: run with the same gid, as `runuser` would refuse but Nomad allows.
    const uid = id32(numeric[1]!, "uid", user, field);
    return { name: user, uid, gid: uid, groups: [uid], home: "/" };
  }
  throw new ConnectError(`${field}: unknown user ${JSON.stringify(user)}`, Code.InvalidArgument);
}

/** The largest id a process can take: 2^32-1 is (uid_t)-1, "leave unchanged", to setresuid(2). */
const MAX_ID = 2 ** 32 - 2;

/**
 * A uid or gid as the kernel takes it, else InvalidArgument naming `field` (Nomad: "unable to convert
 * userid to uint32"). Unchecked, setpriv truncated 4294967296 to 32 bits: the task ran as root.
 */
function id32(digits: string, what: "uid" | "gid", user: string, field: string): number {
  const n = /^\d+$/.test(digits) ? Number(digits) : Number.NaN;
  if (!(n <= MAX_ID)) throw new ConnectError(`${field}: ${JSON.stringify(user)}: ${what} ${digits} is not a valid id (0 to ${MAX_ID})`, Code.InvalidArgument);
  return n;
}

/** The user's group ids as getgrouplist(3) has them (Nomad: user.GroupIds()), primary group included. */
async function groupIds(name: string, gid: number): Promise<number[]> {
  const out = await run("id", ["-G", "--", name]).catch(() => undefined);
  const ids = (out ?? "").split(/\s+/).filter((s) => /^\d+$/.test(s)).map(Number).filter((n) => n <= MAX_ID);
  return ids.includes(gid) ? ids : [gid, ...ids];
}

/** First line of a command's output; undefined when it exits 2 (getent: not found). */
function run(file: string, args: string[]): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: 10_000 }, (err, stdout) => {
      if (err) return (err as { code?: unknown }).code === 2 ? resolve(undefined) : reject(err);
      resolve(stdout.split("\n")[0]?.trim() || undefined);
    });
  });
}

let cachedSetpriv: string | null | undefined;

/** util-linux's setpriv (essential on Debian), or null where it is missing. */
function setprivPath(): string | null {
  if (cachedSetpriv !== undefined) return cachedSetpriv;
  cachedSetpriv = null;
  for (const p of ["/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv", "/sbin/setpriv"]) {
    try {
      accessSync(p, constants.X_OK);
      cachedSetpriv = p;
      break;
    } catch {
      // next
    }
  }
  return cachedSetpriv;
}

/**
 * `file args` run as `user` with its supplementary groups: `setpriv --reuid U --regid G --groups
 * ... -- file args`, spawned as root. setpriv execs the command, so its pid is the task's, and
 * sets uid, gid and groups as Nomad's executor does (spawn's uid/gid would clear the groups).
 * Undefined where setpriv is missing or this process is not root (only root may set groups): then
 * spawn's uid/gid are the fallback, without the groups.
 *
 * @example
 * ```ts
 * import { resolveUser, userCommand } from "@nomadkit/server/executor";
 * const c = userCommand(await resolveUser("www-data"), "/usr/bin/id", []);
 * // { file: "/usr/bin/setpriv", args: ["--reuid=33", "--regid=33", "--groups=33", "--", "/usr/bin/id"] }
 * ```
 */
export function userCommand(
  user: ResolvedUser,
  file: string,
  args: readonly string[],
): {
  /** setpriv's path. */
  file: string;
  /** setpriv's arguments, the command's after `--`. */
  args: string[];
} | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const setpriv = setprivPath();
  if (setpriv === null) return undefined;
  const groups = user.groups?.length ? user.groups : [user.gid];
  return { file: setpriv, args: [`--reuid=${user.uid}`, `--regid=${user.gid}`, `--groups=${groups.join(",")}`, "--", file, ...args] };
}

/**
 * Throws InvalidArgument naming `field` when `user` may not execute `file` (a directory on its path
 * it cannot search, no execute permission). Asked as the user, so ACLs count: behind setpriv the
 * failure would otherwise only be the task's exit code 126, where spawn used to report EACCES.
 */
export async function assertExecutableBy(user: ResolvedUser, file: string, field: string): Promise<void> {
  const c = userCommand(user, "/bin/sh", ["-c", '[ -x "$1" ]', "sh", file]);
  if (c === undefined) return; // spawn with uid/gid reports EACCES itself
  const code = await new Promise<unknown>((resolve) => {
    execFile(c.file, c.args, { timeout: 10_000 }, (err) => resolve(err ? (err as { code?: unknown }).code : 0));
  });
  // Exit 1 is the test's "no"; anything else (setpriv failing, a timeout) is left to the launch.
  if (code === 1) {
    const who = `user ${JSON.stringify(user.name)} (uid ${user.uid})`;
    throw new ConnectError(`${field}: ${JSON.stringify(file)} is not executable by ${who}`, Code.InvalidArgument);
  }
}
