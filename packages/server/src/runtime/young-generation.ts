/**
 * V8's young generation, tuned for processes that stream bulk data.
 *
 * - Its size. V8 doubles it (up to 16 MiB per semi-space) each time the bytes surviving scavenges
 *   since the last growth add up to its size, so any long busy stretch grows it, and a grown young
 *   generation is kept. Kept small, a driver plugin relaying exec output to a slow reader peaked
 *   about 20 MiB lower on the bench; but under unary load more of a call's short-lived objects get
 *   promoted, and InspectTask ran about 8 % slower. So exec sessions hold it while they stream
 *   ({@link holdYoungGenerationSize}) and it is free to grow otherwise; the executor (bulk output,
 *   few calls) and drivers that choose it fix it for good ({@link fixYoungGenerationSize}).
 *   `--semi-space-growth-factor` is read each time it grows, so setting it at run time takes
 *   effect, even to 1 (on the command line V8 raises it to at least 2).
 * - Scavenges while receiving bulk data ({@link scavengeEvery}). Node's HTTP/2 reads every socket
 *   read into a new buffer; V8 frees dead ones at the next scavenge, and forces one only when 32 MiB
 *   of them are pending. A relay allocates few JavaScript objects per byte, so that limit is what it
 *   hits: its memory swings by 32 MiB plus the allocator's fragmentation.
 */
import { createRequire } from "node:module";
import { runInNewContext } from "node:vm";

// Node compiles its built-in modules from a code cache made under V8's default flags, and V8
// rejects a code cache made under other flags: once any flag differs, every built-in loaded after
// compiles from source (the executor started ~15-20 ms slower). So before the first change, load
// the built-ins a nomadkit plugin loads anyway (serving HTTP/2, spawning, logging): they keep
// their cache. Flags set back to their defaults (`--no-expose-gc`) restore it for later ones.
const PLUGIN_BUILTINS = [
  "node:http2",
  "node:child_process",
  "node:os",
  "node:fs/promises",
  "node:timers/promises",
  "node:diagnostics_channel",
  "node:assert",
  "node:worker_threads",
  "node:perf_hooks",
  "node:cluster",
];

// node:v8 takes ~4 ms to load (it brings heap snapshot, histogram and perf modules with it), and a
// driver needs it only once it streams exec output: loaded on first use, not at plugin start-up.
let v8: typeof import("node:v8") | undefined;
function setFlagsFromString(flags: string): void {
  if (v8 === undefined) {
    // Any absolute path will do: built-in modules resolve the same from everywhere.
    const require = createRequire("/");
    for (const builtin of PLUGIN_BUILTINS) require(builtin);
    v8 = require("node:v8") as typeof import("node:v8");
  }
  v8.setFlagsFromString(flags);
}

let fixed = false;
let holds = 0;
let restoresOnExit = false;

/**
 * Set V8's semi-space growth factor. V8 stamps a code cache with the flags in effect when it is
 * made and rejects it under others, and a launcher that saves one as the process exits (`nomadkit
 * bundle`'s training run) needs the flags its start compiled under: so the first change also puts
 * the start's factor back on exit, ahead of every exit listener added before it.
 */
function setGrowthFactor(factor: number): void {
  setFlagsFromString(`--semi-space-growth-factor=${factor}`);
  if (restoresOnExit) return;
  restoresOnExit = true;
  process.prependOnceListener("exit", () => setFlagsFromString(`--semi-space-growth-factor=${startupGrowthFactor()}`));
}

/**
 * The growth factor in effect before any hold: V8's default 2, or what node was started with
 * (`--semi-space-growth-factor=N`; V8 raises values below 2 to 2 when it starts).
 */
function startupGrowthFactor(): number {
  let factor = 2;
  for (const arg of process.execArgv) {
    const m = /^--semi[-_]space[-_]growth[-_]factor=(\d+)$/.exec(arg);
    if (m !== null) factor = Math.max(2, Number(m[1]));
  }
  return factor;
}

/**
 * Keep V8's young generation at its current size for the rest of the process: lower peak memory
 * while streaming bulk data, somewhat slower unary calls (see BENCHMARKS.md). Call it first thing
 * in the plugin's entry file, before the driver's modules load (their start-up grows it too).
 * Idempotent; the nomadkit executor calls it.
 *
 * It changes a V8 flag, and V8 rejects code caches made under other flags. A bin that compiles its
 * bundle with a code cache checks it before this call; the flag is set back as the process exits,
 * so a cache saved then (as `nomadkit bundle`'s training run does) matches. Node's own
 * built-in modules are cached that way as well; the ones a plugin loads anyway (`node:http2`,
 * `node:child_process`, ...) are loaded before the flag changes, others loaded later compile
 * from source.
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
  if (fixed) return;
  fixed = true;
  setGrowthFactor(1);
}

/**
 * Keep V8's young generation from growing until the returned function is called. Holds nest: it
 * may grow again once every holder released. Every ExecTaskStreaming session holds it while it
 * runs. Releasing twice is harmless.
 *
 * @example
 * ```ts
 * const release = holdYoungGenerationSize();
 * try {
 *   await relayBulkOutput();
 * } finally {
 *   release();
 * }
 * ```
 */
export function holdYoungGenerationSize(): () => void {
  if (holds++ === 0 && !fixed) setGrowthFactor(1);
  let released = false;
  return () => {
    if (released) return;
    released = true;
    if (--holds === 0 && !fixed) setGrowthFactor(startupGrowthFactor());
  };
}

type Gc = (options: { type: "minor" }) => void;
let gc: Gc | null | undefined;

/**
 * V8's `gc` function, without exposing it: `--expose-gc` is set only while one new context is
 * made (V8 installs `gc` in contexts made under the flag), then cleared again. null if unavailable.
 */
function scavengeFunction(): Gc | null {
  if (gc !== undefined) return gc;
  const global = (globalThis as { gc?: unknown }).gc;
  if (typeof global === "function") return (gc = global as Gc);
  try {
    setFlagsFromString("--expose-gc");
    const fn: unknown = runInNewContext("gc");
    gc = typeof fn === "function" ? (fn as Gc) : null;
  } catch {
    gc = null;
  } finally {
    setFlagsFromString("--no-expose-gc");
  }
  return gc;
}

/**
 * A counter for data received in bulk over Node's HTTP/2 (whose read buffers V8 frees late, see
 * above): call it with each received byte count; after every `intervalBytes` it runs a scavenge
 * (typically ~0.2 ms: a young generation of dead buffers). Make the interval a little more
 * than what the receiver holds at once: buffers alive at a scavenge are moved, and promoted if
 * still alive at the next, after which only a full collection frees them. Without V8's `gc`
 * function it does nothing.
 *
 * @example
 * ```ts
 * const received = scavengeEvery(8 * 1024 * 1024);
 * for await (const frame of frames) {
 *   await send(frame);
 *   received(frame.byteLength);
 * }
 * ```
 */
export function scavengeEvery(intervalBytes: number): (bytes: number) => void {
  if (!(intervalBytes > 0)) throw new RangeError(`scavengeEvery: intervalBytes must be > 0, got ${intervalBytes}`);
  let pending = 0;
  return (bytes) => {
    pending += bytes;
    if (pending < intervalBytes) return;
    pending = 0;
    scavengeFunction()?.({ type: "minor" });
  };
}
