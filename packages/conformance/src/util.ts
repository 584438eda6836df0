import { readFileSync } from "node:fs";
import { PluginShutdownError, isCancellation } from "@nomadkit/client";

/** gRPC status codes the checks look at. */
export const Code = {
  Canceled: 1,
  InvalidArgument: 3,
  DeadlineExceeded: 4,
  NotFound: 5,
  FailedPrecondition: 9,
  Unimplemented: 12,
  Unavailable: 14,
} as const;

/** Thrown by a check to mark itself skipped. */
export class SkipCheck extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SkipCheck";
  }
}

/** A failed expectation. */
export class CheckFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CheckFailure";
  }
}

/**
 * Output written to a task's FIFO after its EOF, which Nomad's logmon never collects: what a check
 * waited for will not come, so the check fails with this at once (its message names the FIFOs).
 */
export class LostOutput extends CheckFailure {
  constructor(
    readonly fifos: readonly string[],
    message: string,
  ) {
    super(message);
    this.name = "LostOutput";
  }
}

/** Fails the current check with `message` unless `cond` holds. */
export function expect(cond: unknown, message: string): asserts cond {
  if (!cond) throw new CheckFailure(message);
}

/** The gRPC code of an error from the client, if it has one. */
export function codeOf(err: unknown): number | undefined {
  const c = (err as { code?: unknown } | null)?.code;
  return typeof c === "number" ? c : undefined;
}

/** True for an Unimplemented status. */
export function isUnimplemented(err: unknown): boolean {
  return codeOf(err) === Code.Unimplemented;
}

/** True when the error only says that the plugin went away or the caller gave up. */
export function isGone(err: unknown): boolean {
  return err instanceof PluginShutdownError || isCancellation(err);
}

/** A short description of an error for the report. */
export function describe(err: unknown): string {
  if (err instanceof Error) {
    const msg = err.message.replace(/\s+/g, " ").trim();
    return msg || err.name;
  }
  return String(err);
}

/** Quotes bytes for a message, making control characters visible. */
export function show(data: Uint8Array | string, max = 120): string {
  const s = typeof data === "string" ? data : Buffer.from(data).toString("utf8");
  const q = JSON.stringify(s.length > max ? s.slice(0, max) + "…" : s);
  return q;
}

/**
 * Polls `cond` until it is true, failing with `what` after `timeoutMs`. Used to wait for an
 * observable effect (a file grows, a process is gone), never as a fixed delay.
 */
export async function waitUntil(cond: () => boolean | Promise<boolean>, what: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let delay = 10;
  for (;;) {
    if (await cond()) return;
    if (signal?.aborted) throw new CheckFailure(`aborted while waiting for ${what}`);
    if (Date.now() > deadline) throw new CheckFailure(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 200);
  }
}

/** True when a process with this pid exists (zombies included). */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** True when `pid` is gone or a zombie (exited, not yet reaped by its parent). */
export function processGone(pid: number): boolean {
  if (!processExists(pid)) return true;
  try {
    // /proc/<pid>/stat: "pid (comm) S ..."; the state follows the last ')'.
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) === "Z";
  } catch {
    return true;
  }
}

// What the suite reads about a process, and its processes, from /proc (Linux): the client's.
export { procInfo, processDescendants as descendants, type ProcInfo } from "@nomadkit/client";

/** True when `/proc` describes processes (Linux). */
export const hasProc = (() => {
  try {
    return readFileSync("/proc/self/stat", "utf8") !== "";
  } catch {
    return false;
  }
})();

/** SIGKILLs `pid`, and first its process group when it leads one. Never throws. */
export function killProcess(pid: number, leadsGroup: boolean): void {
  if (leadsGroup) {
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      // no such group
    }
  }
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // gone
  }
}

/** Milliseconds as a short human string. */
export function formatMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)}s`;
}

/** A semantic version (semver.org 2.0.0), with an optional leading `v`. */
export const SEMVER =
  /^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$/;
