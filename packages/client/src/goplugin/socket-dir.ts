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
 * that holds nothing but that socket; never the temp dir, `/`, a directory in `keep` (a
 * configured `PLUGIN_UNIX_SOCKET_DIR`), or the directory of a go-plugin socket (`plugin<digits>`,
 * which a Go plugin puts straight into its temp dir). True when removed.
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
  // A Go plugin (hashicorp/go-plugin, any version) makes no directory: it listens on
  // plugin<random digits> straight in its $TMPDIR or PLUGIN_UNIX_SOCKET_DIR, which it shares with
  // whatever else lives there. A reattaching host knows neither the plugin's environment nor its
  // start time, so it removed that directory once the plugin had exited and left it empty.
  if (/^plugin\d+$/.test(basename(socket))) return false;
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
