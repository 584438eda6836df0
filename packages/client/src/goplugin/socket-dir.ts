/**
 * Leftovers of a plugin that died hard: a plugin removes its unix socket (and nomadkit plugins the
 * `plugin-XXXXXX` directory holding it) as it exits, which a SIGKILLed one cannot do, and go-plugin
 * hosts leave them behind. The host removes them once it has seen the plugin's exit.
 */
import { lstatSync, readdirSync, rmdirSync, unlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, isAbsolute, resolve } from "node:path";

/**
 * Removes the socket a dead plugin listened on and the directory it made for it. Conservative, as a
 * host cannot know for sure who made them: only a directory owned by this user, that changed since
 * `since` (ms since the epoch, the launch: the socket was created in it then; 0 when unknown), and
 * that holds nothing but that socket; never the temp dir, `/`, or a directory in `keep` (a
 * configured `PLUGIN_UNIX_SOCKET_DIR`, where a Go plugin puts its socket directly). True when
 * removed.
 *
 * @example
 * ```ts
 * import { removePluginSocketDir } from "@nomadkit/client";
 * await plugin.exited;
 * removePluginSocketDir(plugin.address, launchedAt); // no-op when the plugin cleaned up itself
 * ```
 */
export function removePluginSocketDir(socket: string, since: number, keep: readonly (string | undefined)[] = []): boolean {
  if (!isAbsolute(socket)) return false;
  const dir = dirname(socket);
  if (dir === dirname(dir) || [tmpdir(), ...keep].some((k) => k && resolve(k) === dir)) return false;
  try {
    const st = lstatSync(dir);
    if (!st.isDirectory()) return false;
    if (process.getuid && st.uid !== process.getuid()) return false;
    // Timestamps are coarse on some file systems: a second of slack.
    if (st.mtimeMs < since - 1000) return false;
    const entries = readdirSync(dir);
    if (entries.some((e) => e !== basename(socket))) return false;
    if (entries.length === 1) {
      if (!lstatSync(socket).isSocket()) return false;
      unlinkSync(socket);
    }
    rmdirSync(dir);
    return true;
  } catch {
    return false;
  }
}
