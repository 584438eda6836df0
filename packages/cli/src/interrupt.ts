/**
 * Ctrl-C, SIGTERM and SIGHUP while a command runs, and output nobody reads any more. Exiting at
 * once would leave things behind: a plugin built on @nomadkit/server ignores SIGINT (its host stops
 * it), and a task keeps running under its executor when its plugin goes. So the first signal aborts
 * {@link interrupted} (launches and calls in flight end), runs everything registered with
 * {@link onInterrupt} (plugins released as Nomad stops them, tasks destroyed, temporary directories
 * removed), then exits 128+N; a second signal (or the clean-up's bound) exits at once, running only
 * what was registered with {@link atExit}: synchronous last resorts (the plugin SIGKILLed, the task's
 * cgroup emptied, temporary directories removed). Commands that give SIGINT a meaning of
 * their own (stopping a task, ending a stream) add their own listener: while one is registered,
 * SIGINT is theirs.
 *
 * A plugin being launched that dies of one of those signals was almost always hit by the same
 * signal as we were (Ctrl-C signals the terminal's whole process group; service managers stop the
 * group), and which of the two deaths this process notices first is a race: {@link childInterrupted}
 * stops the command as if the signal had arrived (the shells' "wait and cooperative exit").
 *
 * When stdout or stderr is closed under the command (`nomadkit stats ... | head`), the write fails
 * with EPIPE: the command stops the same way, quietly, and exits 141 (128+SIGPIPE), as a Unix tool
 * killed by SIGPIPE does.
 */
import { constants } from "node:os";
import { PluginLaunchError } from "@nomadkit/client";

const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
type Handled = (typeof SIGNALS)[number];

/** Upper bound for the clean-up after a signal, before exiting anyway. */
const CLEANUP_LIMIT_MS = 30_000;

const controller = new AbortController();
const cleanups = new Set<() => unknown>();
let installed = false;
/** After the first signal: the clean-up (bounded) and the status to exit with. */
let exiting:
  | {
      done: Promise<unknown>;
      status: number;
      /** A signal expected to arrive once more, not a second one (see {@link childInterrupted}). */
      expected?: Handled;
    }
  | undefined;

/** Aborted by the first SIGINT (unless a command handles it), SIGTERM or SIGHUP, or closed output. */
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

const exitHooks = new Set<() => void>();
let exitListening = false;

/**
 * Runs `hook` (synchronously: nothing asynchronous runs at exit) if the process exits before the
 * returned function is called, after those registered later, as {@link onInterrupt}'s: for what the
 * process would leave behind when it exits without its clean-up (a second signal, the clean-up's
 * bound, a crash). An error it throws is reported on stderr, and the other hooks still run.
 *
 * @example
 * ```ts
 * const done = atExit(() => rmSync(dir, { recursive: true, force: true }));
 * try { await work(dir); } finally { rmSync(dir, { recursive: true, force: true }); done(); }
 * ```
 */
export function atExit(hook: () => void): () => void {
  if (!exitListening) {
    exitListening = true;
    process.on("exit", runExitHooks);
  }
  exitHooks.add(hook);
  return () => exitHooks.delete(hook);
}

function runExitHooks(): void {
  for (const hook of [...exitHooks].reverse()) {
    exitHooks.delete(hook);
    try {
      hook();
    } catch (err) {
      process.stderr.write(`nomadkit: ${(err as Error).message}\n`);
    }
  }
}

/** Aborts {@link interrupted}, runs the clean-ups and then exits with `status`. */
function stop(status: number, reason: string, message?: string): void {
  controller.abort(new Error(reason));
  if (message !== undefined) process.stderr.write(message);
  // Last registered first, like nested finally blocks: a task is destroyed before its plugin goes.
  const all = (async () => {
    for (const c of [...cleanups].reverse()) await Promise.resolve().then(c).catch(() => {});
  })();
  const limit = new Promise((r) => setTimeout(r, CLEANUP_LIMIT_MS).unref());
  const state = (exiting = { done: Promise.race([all, limit]), status });
  void state.done.then(() => process.exit(state.status));
}

/** Starts the clean-up and exit for `signal`, as if it had been received. */
export function interrupt(signal: Handled): void {
  if (exiting !== undefined) {
    if (exiting.expected === signal) {
      exiting.expected = undefined;
      return;
    }
    process.exit(exiting.status);
  }
  stop(
    128 + constants.signals[signal],
    `interrupted by ${signal}`,
    `nomadkit: ${signal}: stopping what was started (again to exit at once)\n`,
  );
}

function isHandled(signal: string | null | undefined): signal is Handled {
  return (SIGNALS as readonly (string | null | undefined)[]).includes(signal);
}

/**
 * A process the command started (a plugin being launched) was killed by `signal`. For SIGINT,
 * SIGTERM and SIGHUP this stops the command as if the signal had arrived here too, which it almost
 * always did or is about to (the same signal arriving afterwards is not taken for a second one), and
 * returns `true`: the failure the command sees is a consequence of the interruption.
 *
 * @example
 * ```ts
 * if (childInterrupted(exit.signal)) return; // exits 128+N once cleaned up
 * ```
 */
export function childInterrupted(signal: string | null | undefined): boolean {
  if (!isHandled(signal)) return false;
  if (exiting === undefined) {
    interrupt(signal);
    const state = exiting!;
    state.expected = signal;
    // Ours arrives within moments if it comes at all; later, a signal is a second one again.
    setTimeout(() => (state.expected = undefined), 1000).unref();
  }
  return true;
}

/**
 * A plugin launch failed with `err` (`launchPlugin`'s PluginLaunchError): when the plugin was killed
 * by SIGINT, SIGTERM or SIGHUP before it completed the go-plugin handshake, see
 * {@link childInterrupted}. Returns whether it was.
 */
export function launchInterrupted(err: unknown): boolean {
  if (err instanceof PluginLaunchError) {
    const first = !interrupted.aborted;
    if (!childInterrupted(err.exit?.signal)) return false;
    // Perhaps nobody pressed Ctrl-C and the plugin signalled itself: do not hide what it said.
    if (first) process.stderr.write(`nomadkit: ${err.message}\n`);
    return true;
  }
  // A conformance result carries only the message of the launch's error.
  const message = typeof err === "string" ? err : "";
  return childInterrupted(/ exited on signal (SIG[A-Z0-9]+) before completing the go-plugin handshake/.exec(message)?.[1]);
}

/**
 * Our stdout or stderr failed (EPIPE: the reader went away): nothing more can be shown, so stop
 * quietly (no message; stderr may be the same pipe) and exit 141 (128+SIGPIPE), or 1 for another
 * error.
 */
function outputFailed(err: NodeJS.ErrnoException): void {
  if (exiting !== undefined) return;
  stop(
    err.code === "EPIPE" ? 128 + constants.signals.SIGPIPE : 1,
    `output closed (${err.code ?? err.message})`,
  );
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
  // Output written last may still fail (EPIPE is reported asynchronously): let it, so a lost
  // report exits 141, not 0.
  if (exiting === undefined) await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
  if (exiting !== undefined) {
    await exiting.done;
    process.exit(exiting.status);
  }
  process.exit(code);
}

/** Resolves once what was written to `stream` has been handed on (or failed), and a tick later. */
function flushed(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => {
    const after = () => setImmediate(resolve);
    if (stream.destroyed || stream.writableEnded) return after();
    stream.write("", after);
  });
}

/**
 * Installs the handlers (once per process; `main` does it): of SIGINT, SIGTERM and SIGHUP, and of
 * write errors on stdout and stderr (EPIPE when the reader of a pipe went away), which would
 * otherwise crash the process with an unhandled error and leave the plugin and task behind.
 */
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
  for (const stream of [process.stdout, process.stderr]) stream.on("error", outputFailed);
}
