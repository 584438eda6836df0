/**
 * Where a bundle is written until it is complete: a staging directory inside `--out` (the same
 * filesystem, so its files can be renamed into place; and below `--out`, so the plugin's runs there
 * resolve packages left outside the bundle from the same node_modules as it will). The files of an
 * earlier bundle in `--out` stay as they were until every file of the new one is made and checked;
 * then they are replaced by renames in one synchronous step (no signal handler runs in between). A
 * failed or interrupted bundle removes only what the run made: the staging directory, and `--out`
 * itself (with the parents it made) when the run made it. A directory the user had is never
 * removed, nor anything in it the bundle does not own; the staging directories of the same
 * plugin's earlier runs that were killed outright are removed when the next one starts.
 */
import {
  copyFileSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  renameSync,
  rmSync,
} from "node:fs";
import { join } from "node:path";

/** A bundle being written: see {@link stageOutput}. */
export interface StagedOutput {
  /** The staging directory: write every file of the bundle here, under its final name. */
  dir: string;
  /**
   * Moves `files` (names in {@link dir}) into `--out`, replacing those there, `last` after the
   * others, then removes the names in `owned` that the new bundle does not have (an earlier bundle's
   * files) and the staging directory. If a rename fails, the files already replaced are put back
   * as they were and the error is thrown.
   */
  commit(
    files: readonly string[],
    owned: readonly string[],
    last: string,
  ): void;
  /** Removes what the run made (see the module comment); can be called more than once. */
  discard(): void;
}

/**
 * Makes the staging directory for a bundle into `outDir`, which exists; `made` is the first
 * directory the run created for it (`makeDirectory`'s answer), undefined when `outDir` was there.
 * `name` (the plugin's) names the staging directory, a hidden one Nomad's plugin loader skips.
 *
 * @example
 * ```ts
 * const staged = stageOutput(outDir, made, "my-driver");
 * writeFileSync(join(staged.dir, "my-driver.cjs"), code);
 * staged.commit(["my-driver.cjs"], ["my-driver.cjs", "my-driver.mjs"], "my-driver.cjs");
 * ```
 */
export function stageOutput(
  outDir: string,
  made: string | undefined,
  name: string,
): StagedOutput {
  const prefix = `.${name}.bundle-`;
  // What a bundle killed outright (SIGKILL, a second signal) left: its staging directories.
  for (const entry of readdirSync(outDir, { withFileTypes: true }))
    if (entry.isDirectory() && entry.name.startsWith(prefix))
      rmSync(join(outDir, entry.name), { recursive: true, force: true });
  const dir = mkdtempSync(join(outDir, prefix));
  const discard = (): void => {
    rmSync(made ?? dir, { recursive: true, force: true });
  };
  const commit = (
    files: readonly string[],
    owned: readonly string[],
    last: string,
  ): void => {
    const order = [
      ...files.filter((f) => f !== last),
      ...(files.includes(last) ? [last] : []),
    ];
    // The files being replaced, kept (hard links: no copy, same inode) until the new ones are in.
    const previous = join(dir, ".previous");
    mkdirSync(previous);
    const kept = new Set<string>();
    for (const f of order) {
      const target = join(outDir, f);
      try {
        if (lstatSync(target).isDirectory()) continue; // rename says why below
      } catch {
        continue; // nothing there
      }
      try {
        linkSync(target, join(previous, f));
      } catch {
        copyFileSync(target, join(previous, f)); // a filesystem without hard links
      }
      kept.add(f);
    }
    const moved: string[] = [];
    try {
      for (const f of order) {
        renameSync(join(dir, f), join(outDir, f));
        moved.push(f);
      }
    } catch (err) {
      for (const f of moved.reverse()) {
        try {
          if (kept.has(f)) renameSync(join(previous, f), join(outDir, f));
          else rmSync(join(outDir, f), { force: true });
        } catch {
          // best effort: the error below is what the user sees
        }
      }
      throw err;
    }
    for (const f of owned) {
      if (files.includes(f)) continue;
      try {
        // Files only: a directory of that name is not one the bundle wrote.
        if (lstatSync(join(outDir, f)).isFile()) rmSync(join(outDir, f));
      } catch {
        // not there
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  return { dir, commit, discard };
}
