import {
  chmodSync,
  chownSync,
  mkdtempSync,
  readFileSync,
  rmSync,
} from "node:fs";
import type { Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PluginEnvironmentError, portRange } from "./env.js";

/** Where a plugin listens. */
export interface ListenResult {
  network: "unix" | "tcp";
  /** Socket path, or `127.0.0.1:port`. */
  address: string;
  /** The private directory holding the socket (unix only); removed on exit. */
  socketDir?: string;
}

/**
 * The longest unix socket path Go (go-plugin's host: Nomad) can dial: sun_path (108 bytes on Linux,
 * 104 on macOS and the BSDs) less the terminating NUL, as Go's syscall package refuses a path that
 * fills it ("invalid argument"). Node binds and connects longer paths silently cut to sun_path's
 * size (a 120-byte path listens on its first 108 bytes), which would advertise a socket that is not
 * there.
 */
const MAX_UNIX_PATH = process.platform === "linux" ? 107 : 103;

function listenOn(
  server: Server,
  options: { path: string } | { host: string; port: number },
): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => {
      server.off("listening", onListening);
      reject(err);
    };
    const onListening = () => {
      server.off("error", onError);
      resolve();
    };
    server.once("error", onError);
    server.once("listening", onListening);
    server.listen({ ...options, exclusive: true });
  });
}

/** Resolves a group name or numeric gid (`PLUGIN_UNIX_SOCKET_GROUP`) to a gid. */
export function resolveGroup(group: string): number {
  if (/^\d+$/.test(group)) return Number(group);
  let content = "";
  try {
    content = readFileSync("/etc/group", "utf8");
  } catch {
    // fall through to the error below
  }
  for (const line of content.split("\n")) {
    const [name, , gid] = line.split(":");
    if (name === group && gid !== undefined && /^\d+$/.test(gid))
      return Number(gid);
  }
  throw new PluginEnvironmentError(
    `PLUGIN_UNIX_SOCKET_GROUP=${JSON.stringify(group)}: no such group`,
  );
}

/**
 * Listens on `plugin.sock` in a fresh directory under `PLUGIN_UNIX_SOCKET_DIR` (else the OS temp
 * dir). The directory is 0700 and the socket 0600; with `PLUGIN_UNIX_SOCKET_GROUP` both are given
 * to that group and opened to it (directory 0750, socket 0660) so the group's host can connect.
 */
export async function listenUnix(
  server: Server,
  env: NodeJS.ProcessEnv,
): Promise<ListenResult> {
  const base = env.PLUGIN_UNIX_SOCKET_DIR || tmpdir();
  const group = env.PLUGIN_UNIX_SOCKET_GROUP;
  const gid = group ? resolveGroup(group) : undefined;
  let dir: string;
  try {
    dir = mkdtempSync(join(base, "plugin-")); // mode 0700
  } catch (err) {
    throw new PluginEnvironmentError(
      `cannot create the plugin socket directory in ${env.PLUGIN_UNIX_SOCKET_DIR ? "PLUGIN_UNIX_SOCKET_DIR=" : ""}${base}: ${(err as Error).message}`,
    );
  }
  const path = join(dir, "plugin.sock");
  try {
    const bytes = Buffer.byteLength(path);
    if (bytes > MAX_UNIX_PATH) {
      throw new PluginEnvironmentError(
        `unix socket path ${path} is ${bytes} bytes long, over the ${MAX_UNIX_PATH} bytes a unix socket address holds: set PLUGIN_UNIX_SOCKET_DIR or TMPDIR to a shorter directory`,
      );
    }
    chmodSync(dir, 0o700);
    await listenOn(server, { path });
    chmodSync(path, 0o600);
    if (gid !== undefined) {
      chownSync(dir, -1, gid);
      chownSync(path, -1, gid);
      chmodSync(dir, 0o750);
      chmodSync(path, 0o660);
    }
  } catch (err) {
    server.close();
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return { network: "unix", address: path, socketDir: dir };
}

/** Listens on 127.0.0.1 at the first free port of `PLUGIN_MIN_PORT..PLUGIN_MAX_PORT` (any port for 0/0). */
export async function listenTcp(
  server: Server,
  env: NodeJS.ProcessEnv,
): Promise<ListenResult> {
  const { min, max } = portRange(env);
  let lastError: Error | undefined;
  for (let port = min; port <= max; port++) {
    try {
      await listenOn(server, { host: "127.0.0.1", port });
      const addr = server.address();
      if (addr && typeof addr === "object")
        return { network: "tcp", address: `127.0.0.1:${addr.port}` };
    } catch (err) {
      lastError = err as Error;
    }
  }
  throw new PluginEnvironmentError(
    `cannot bind a TCP listener on 127.0.0.1 within PLUGIN_MIN_PORT..PLUGIN_MAX_PORT (${min}..${max})` +
      (lastError ? `: ${lastError.message}` : ""),
  );
}
