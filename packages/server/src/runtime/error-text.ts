/**
 * What a thrown value says, for a status message, a log line or a fingerprint. Anything can be
 * thrown: `String()` itself throws for some values (an object without a prototype, a `toString`
 * that throws), and a description that throws turns a handled failure into a crash.
 */
import { inspect } from "node:util";

/**
 * An Error's message; any other value as `String()` gives it, or as `util.inspect` describes it
 * when `String()` throws.
 *
 * @example
 * ```ts
 * errorText(new Error("disk full")); // "disk full"
 * errorText(Object.create(null)); // "[Object: null prototype] {}"
 * ```
 */
export function errorText(err: unknown): string {
  if (err instanceof Error) return err.message;
  try {
    return String(err);
  } catch {
    return inspect(err, { depth: 1, breakLength: Infinity });
  }
}
