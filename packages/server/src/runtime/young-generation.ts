/**
 * V8 doubles its young generation (up to 16 MiB per semi-space) whenever many objects survive a
 * scavenge. A process streaming exec output keeps the grown generation, and scavenging it less often
 * lets dead read buffers (external memory) pile up in between. Kept at its initial size (1 MiB
 * semi-spaces), a driver plugin relaying exec output to a slow reader peaked about 20 MiB lower on
 * the bench; but more of a unary call's short-lived objects then get promoted, and InspectTask ran
 * about 8 % slower. The executor process (bulk output, few calls) always makes this trade; a driver
 * plugin may choose it.
 *
 * `--semi-space-growth-factor` is read when the heap grows, not only when it is set up, so setting
 * it at run time takes effect (as a command-line flag it does not).
 */
import { setFlagsFromString } from "node:v8";

let applied = false;

/**
 * Keep V8's young generation at its current size for the rest of the process: lower peak memory
 * while streaming bulk data, somewhat slower unary calls (see BENCHMARKS.md). Call it first thing
 * in the plugin's entry file, before the driver's modules load (their start-up grows it too).
 * Idempotent; the nomadkit executor calls it.
 *
 * @example
 * ```ts
 * // bin/my-driver.js
 * import { fixYoungGenerationSize } from "@nomadkit/server/runtime";
 * fixYoungGenerationSize();
 * const { main } = await import("../dist/main.js");
 * ```
 */
export function fixYoungGenerationSize(): void {
  if (applied) return;
  applied = true;
  setFlagsFromString("--semi-space-growth-factor=1");
}
