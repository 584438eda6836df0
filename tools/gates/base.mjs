// The commit a change is judged against, shared by check:lint and check:breaking: the PR base
// (GITHUB_BASE_REF in GitHub Actions; then it must be in the history) or, outside a PR, origin/main
// when git history has it.
import { capture } from "./exec.mjs";

/**
 * Finds the merge base of HEAD with the PR base (or origin/main outside a PR).
 * Returns `{ ref, base }` (base null when there is nothing to compare with) and, in a PR whose base
 * is not in this clone's history, an `error` to fail with: a shallow checkout must not silently skip
 * the comparison.
 * @example
 *   const { ref, base, error } = findBase();
 *   if (error) failures.push(error);
 *   else if (base) console.log(`comparing with ${ref} (${base})`);
 */
export function findBase() {
  const prBase = process.env.GITHUB_BASE_REF;
  const ref = prBase ? `origin/${prBase}` : "origin/main";
  const base =
    (capture("git", ["rev-parse", "--verify", "--quiet", `${ref}^{commit}`]) &&
      capture("git", ["merge-base", "HEAD", ref])) ||
    null;
  const error =
    !base && prBase
      ? `the PR base ${ref} (GITHUB_BASE_REF) is not in this clone's history; check out with fetch-depth: 0`
      : null;
  return { ref, base, error };
}

/** The base's buf.yaml when the working tree's differs from it, else null. */
export function changedBufConfig(base) {
  return (
    (capture("git", ["diff", "--name-only", base, "--", "buf.yaml"]) &&
      capture("git", ["show", `${base}:buf.yaml`])) ||
    null
  );
}
