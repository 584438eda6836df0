import { execFile } from "node:child_process";
import { Code, ConnectError } from "@connectrpc/connect";

/** A resolved task user. */
export interface ResolvedUser {
  /** Login name from passwd; the `user` string as given when it was numeric. */
  name: string;
  /** User id the task runs as. */
  uid: number;
  /** Primary group id (for a numeric uid without a passwd entry: the uid). */
  gid: number;
  /** Home directory from passwd; `/` when unknown. */
  home: string;
}

/**
 * Resolves a task's `user` to uid/gid: a name (looked up with `getent passwd`, so NSS sources such
 * as LDAP work), a numeric uid, or `uid:gid`. Throws InvalidArgument naming `field` when unknown.
 *
 * @example
 * ```ts
 * import { resolveUser } from "@nomadkit/server/executor";
 * const nobody = await resolveUser("nobody"); // { uid: 65534, gid: 65534, ... }
 * ```
 */
export async function resolveUser(user: string, field = "user"): Promise<ResolvedUser> {
  const numeric = /^(\d+)(?::(\d+))?$/.exec(user);
  if (numeric?.[2] !== undefined) {
    return { name: user, uid: Number(numeric[1]), gid: Number(numeric[2]), home: "/" };
  }
  const line = await getent(user).catch(() => undefined);
  if (line) {
    const [name, , uid, gid, , home] = line.split(":");
    if (name !== undefined && uid !== undefined && gid !== undefined) {
      return { name, uid: Number(uid), gid: Number(gid), home: home || "/" };
    }
  }
  if (numeric) {
    // A uid without a passwd entry: run with the same gid, as `runuser` would refuse but Nomad allows.
    return { name: user, uid: Number(numeric[1]), gid: Number(numeric[1]), home: "/" };
  }
  throw new ConnectError(`${field}: unknown user ${JSON.stringify(user)}`, Code.InvalidArgument);
}

function getent(user: string): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    execFile("getent", ["passwd", user], { timeout: 10_000 }, (err, stdout) => {
      if (err) return (err as { code?: unknown }).code === 2 ? resolve(undefined) : reject(err);
      resolve(stdout.split("\n")[0]?.trim() || undefined);
    });
  });
}
