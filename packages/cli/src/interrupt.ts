/**
 * Ctrl-C, SIGTERM and SIGHUP while a command runs. Exiting at once would leave things behind: a
 * plugin built on @nomadkit/server ignores SIGINT (its host stops it), and a task keeps running
 * under its executor when its plugin goes. So the first signal aborts {@link interrupted} (launches
 * and calls in flight end), runs everything registered with {@link onInterrupt} (plugins released
 * as Nomad stops them, tasks destroyed, temporary directories removed), then exits 128+N; a second
 * signal exits at once. Commands that give SIGINT a meaning of their own (stopping a task, ending
 * a stream) add their own listener: while one is registered, SIGINT is theirs.
 */
import { constants } from "node:os";

const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
type Handled = (typeof SIGNALS)[number];

/** Upper bound for the clean-up after a signal, before exiting anyway. */
const CLEANUP_LIMIT_MS = 30_000;

const controller = new AbortController();
const cleanups = new Set<() => unknown>();
let installed = false;
/** After the first signal: the clean-up (bounded) and the status to exit with. */
let exiting: { done: Promise<unknown>; status: number } | undefined;

/** Aborted by the first SIGINT (unless a command handles it), SIGTERM or SIGHUP. */
export const interrupted: AbortSignal = controller.signal;

/**
 * Runs `cleanup` (awaited, errors ignored) if the command is interrupted, after those registered
 * later; call the returned function once it is no longer needed.
 *
 * @example
 * ```ts
 * const done = onInterrupt(() => plugin.kill());
 * try { await work(); } finally { done(); }
 * ```
 */
export function onInterrupt(cleanup: () => unknown): () => void {
  cleanups.add(cleanup);
  return () => cleanups.delete(cleanup);
}

/** Starts the clean-up and exit for `signal`, as if it had been received. */
export function interrupt(signal: Handled): void {
  if (exiting !== undefined) process.exit(exiting.status);
  controller.abort(new Error(`interrupted by ${signal}`));
  process.stderr.write(`nomadkit: ${signal}: stopping what was started (again to exit at once)\n`);
  // Last registered first, like nested finally blocks: a task is destroyed before its plugin goes.
  const all = (async () => {
    for (const c of [...cleanups].reverse()) await Promise.resolve().then(c).catch(() => {});
  })();
  const limit = new Promise((r) => setTimeout(r, CLEANUP_LIMIT_MS).unref());
  exiting = { done: Promise.race([all, limit]), status: 128 + constants.signals[signal] };
  void exiting.done.then(() => process.exit(exiting!.status));
}

/**
 * Exits with `code`, or, after a signal, once the clean-up is done with 128+N (a command that ends
 * because it was interrupted does not decide the status).
 *
 * @example
 * ```ts
 * await exitWith(await main(process.argv));
 * ```
 */
export async function exitWith(code: number): Promise<never> {
  if (exiting !== undefined) {
    await exiting.done;
    process.exit(exiting.status);
  }
  process.exit(code);
}

/** Installs the handlers (once per process; `main` does it). */
export function installInterruptHandlers(): void {
  if (installed) return;
  installed = true;
  for (const signal of SIGNALS) {
    process.on(signal, () => {
      // A command's own SIGINT listener (besides this one) decides what Ctrl-C means.
      if (signal === "SIGINT" && process.listenerCount("SIGINT") > 1 && !controller.signal.aborted) return;
      interrupt(signal);
    });
  }
}
