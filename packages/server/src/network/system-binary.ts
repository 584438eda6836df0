import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";

/** Where distributions install iproute2 and util-linux, whatever the PATH says. */
const SYSTEM_DIRS = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"];

/**
 * Absolute path of an administration tool (`ip`, `nsenter`): the first executable `name` on this
 * process's PATH, then in the system directories. The PATH a plugin inherits may lack the sbin
 * directories (a root shell from plain `su` on Debian keeps the user's); Nomad, which uses netlink
 * and setns itself, would not notice. Undefined when there is none.
 */
export function findSystemBinary(name: string): string | undefined {
  for (const d of (process.env.PATH ?? "")
    .split(delimiter)
    .concat(SYSTEM_DIRS)) {
    if (!d) continue;
    const p = join(d, name);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // next
    }
  }
  return undefined;
}
