/**
 * What a failed (or interrupted) bundle leaves behind is removed: the output directory when the
 * run made it (with the parents it made), else only the entries the run added to it. A directory
 * the user had is never removed, nor anything that was in it.
 */
import { readdirSync, rmSync } from "node:fs";
import { join } from "node:path";

/**
 * Records `outDir` as it is now; `made` is the first directory the run created for it
 * (`makeDirectory`'s answer), undefined when `outDir` was there. The returned function removes
 * what the run added since, and can be called more than once.
 */
export function partialOutput(
  outDir: string,
  made: string | undefined,
): () => void {
  if (made !== undefined)
    return () => rmSync(made, { recursive: true, force: true });
  let before: Set<string>;
  try {
    before = new Set(readdirSync(outDir));
  } catch {
    return () => {}; // unreadable: the run fails on it before writing anything
  }
  return () => {
    let now: string[];
    try {
      now = readdirSync(outDir);
    } catch {
      return;
    }
    for (const f of now)
      if (!before.has(f))
        rmSync(join(outDir, f), { recursive: true, force: true });
  };
}
