/**
 * Connecting to a plugin's unix socket by path. A path longer than a unix socket address holds
 * (sun_path: 108 bytes on Linux, 104 on macOS and the BSDs) is not refused by Node: libuv cuts it to
 * sun_path's size, so the connection goes to the socket named by its first 108 bytes (another
 * plugin's, or none: ENOENT for a path nobody asked for). Go (Nomad's go-plugin host) refuses such a
 * path before connecting ("dial unix <path>: connect: invalid argument"); so does this.
 */
import * as net from "node:net";
import { constants } from "node:os";

/**
 * The longest unix socket path Go can dial, which is therefore the longest a go-plugin plugin can
 * listen on: sun_path less its terminating NUL (107 bytes on Linux, 103 elsewhere).
 *
 * @example
 * ```ts
 * if (Buffer.byteLength(path) > MAX_UNIX_SOCKET_PATH) console.error(`${path} is too long for a unix socket`);
 * ```
 */
export const MAX_UNIX_SOCKET_PATH = process.platform === "linux" ? 107 : 103;

/**
 * Throws the error connect(2) gives a path that does not fit a unix socket address (EINVAL, with
 * the path as its `address`, as Node's own connect errors have it) when `path` is longer than
 * {@link MAX_UNIX_SOCKET_PATH}; the call's normalisation makes it an Unavailable naming the path.
 */
export function checkUnixSocketPath(path: string): void {
  const bytes = Buffer.byteLength(path);
  if (bytes <= MAX_UNIX_SOCKET_PATH) return;
  throw Object.assign(new Error(`connect EINVAL ${path}`), {
    code: "EINVAL",
    errno: -constants.errno.EINVAL,
    syscall: "connect",
    address: path,
  });
}

/** `net.connect(path)`, refusing a path too long for a unix socket address ({@link checkUnixSocketPath}). */
export function connectUnixSocket(path: string): net.Socket {
  checkUnixSocketPath(path);
  return net.connect(path);
}
