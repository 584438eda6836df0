import type { TaskStats } from "@nomadkit/protocol/driver";
import { PluginShutdownError } from "@nomadkit/client/runtime";
import type { ExecutorHandle } from "./launch.js";
import { isProcessAlive } from "./pids.js";

/**
 * A sample as the executor's Stats stream sends it: a `TaskStats` message, `total_ticks` included.
 * A driver's `taskStats` handler returns it unchanged.
 *
 * @example
 * ```ts
 * const sample: ExecutorStatsSample | undefined = await feed.next(ctx);
 * console.log(sample?.aggResourceUsage?.cpu?.percent);
 * ```
 */
export type ExecutorStatsSample = TaskStats;

/**
 * What {@link ExecutorStatsFeed.next} needs of a `taskStats` call: a driver's `TaskStatsContext`
 * is one, so `next(ctx)` is the whole handler.
 *
 * @example
 * ```ts
 * const call: ExecutorStatsCall = { intervalMs: 1000, signal: ac.signal };
 * const sample = await feed.next(call);
 * ```
 */
export interface ExecutorStatsCall {
  /** The TaskStats stream's `collection_interval` in milliseconds: the executor samples at it. */
  readonly intervalMs: number;
  /** The same for every call of one TaskStats stream (what tells the streams apart); aborts when it ends. */
  readonly signal: AbortSignal;
}

/**
 * A task's resource usage from its executor, for a driver's `taskStats` handler: the stats
 * counterpart of {@link forwardExecStream}. Make one per task, next to its {@link ExecutorHandle}.
 *
 * The executor measures CPU percent between two of its samples at one interval (its first of a task
 * reports 0 %, as Nomad's does; it keeps them across its Stats streams, so a stream opened again,
 * after a plugin restart say, does not start at 0 %). Rather than an executor stream per call, the
 * feed keeps one executor Stats stream per `collection_interval` in use (the executor averages CPU over it, as
 * Nomad's drivers pass their interval to `executor.Stats`), shared by all the task's TaskStats
 * streams with that interval: each of them gets every sample (the newest it has not had yet, or it
 * waits for the next). An executor stream is closed once the signals of all the calls reading it
 * have aborted, so an interval nobody asks for any more is not sampled on.
 *
 * `next` resolves with `undefined` (the TaskStats stream ends cleanly, as a Go driver's does when
 * its executor is gone) once the feed is closed: by {@link ExecutorStatsFeed.close} (call it when
 * the task has exited or you let go of the executor) or by the executor process going away. An
 * executor stream that fails while the executor lives rejects the calls reading it with its error;
 * their next call opens a new one.
 *
 * @example
 * ```ts
 * import { ExecutorStatsFeed, launchExecutor } from "@nomadkit/server/executor";
 * // at start:
 * const exe = await launchExecutor();
 * const stats = new ExecutorStatsFeed(exe);
 * // the task exited (or the executor is gone: Wait rejects then): its streams end
 * exe.client.wait({}).then(() => stats.close(), () => stats.close());
 * // in the driver definition:
 * taskStats: (taskId, ctx) => tasks.get(taskId)!.stats.next(ctx),
 * ```
 */
export class ExecutorStatsFeed {
  readonly #executor: ExecutorHandle;
  readonly #streams = new Map<number, IntervalStream>();
  #closed = false;
  readonly #onExecutorExit = () => this.close();

  /** @param executor the task's executor (launched or reattached); the feed never closes it. */
  constructor(executor: ExecutorHandle) {
    this.#executor = executor;
    if (executor.exited.aborted) this.#closed = true;
    else executor.exited.addEventListener("abort", this.#onExecutorExit, { once: true });
  }

  /**
   * True once closed: by {@link ExecutorStatsFeed.close}, or because the executor process is gone.
   *
   * @example
   * ```ts
   * if (stats.closed) return undefined; // the task's TaskStats streams have ended
   * ```
   */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * The next sample for the TaskStats stream of `call.signal`, from the executor Stats stream with
   * `call.intervalMs`; `undefined` once the feed is closed. Rejects with `call.signal.reason` when
   * it aborts while waiting, and with the executor's error when its stream fails.
   *
   * @example
   * ```ts
   * taskStats: (taskId, ctx) => tasks.get(taskId)!.stats.next(ctx),
   * ```
   */
  next(call: ExecutorStatsCall): Promise<ExecutorStatsSample | undefined> {
    const { intervalMs, signal } = call;
    if (typeof intervalMs !== "number" || !Number.isFinite(intervalMs) || intervalMs <= 0) {
      return Promise.reject(new TypeError(`ExecutorStatsFeed.next: intervalMs must be a positive number of milliseconds, got ${String(intervalMs)}`));
    }
    if (this.#closed) return Promise.resolve(undefined);
    if (signal.aborted) return Promise.reject(signal.reason);
    let stream = this.#streams.get(intervalMs);
    if (stream === undefined) {
      stream = new IntervalStream(this.#executor, intervalMs, {
        idle: (s) => {
          if (this.#streams.get(intervalMs) === s) this.#streams.delete(intervalMs);
        },
        gone: () => this.close(),
      });
      this.#streams.set(intervalMs, stream);
    }
    return stream.next(signal);
  }

  /**
   * Closes the executor streams and ends every waiting and later call with `undefined`. The
   * executor itself is left alone. Idempotent.
   *
   * @example
   * ```ts
   * stats.close(); // the task exited, or the driver detaches from its executor
   * ```
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#executor.exited.removeEventListener("abort", this.#onExecutorExit);
    const streams = [...this.#streams.values()];
    this.#streams.clear();
    for (const s of streams) s.close();
  }
}

/** A call reading an interval's stream. */
interface Reader {
  /** Number of the last sample it got. */
  seen: number;
  /** How many executor streams had ended on their own when it last heard of one. */
  endings: number;
  /** Its abort listener, removed when the stream closes first. */
  onAbort: () => void;
}

/** One executor Stats stream, opened with one interval, and the calls reading it. */
class IntervalStream {
  #latest: TaskStats | undefined;
  /** The latest sample came from an executor stream that has ended since: not for new readers. */
  #latestStale = false;
  /** Number of the latest sample; 0 before the first. */
  #seq = 0;
  /** Executor streams that ended on their own (not closed by us), and how the last one did. */
  #endings = 0;
  #ending: { error?: unknown } = {};
  readonly #readers = new Map<AbortSignal, Reader>();
  /** Aborts the running executor stream; undefined while none runs. */
  #running: AbortController | undefined;
  #waiters = new Set<() => void>();
  #closed = false;

  constructor(
    private readonly executor: ExecutorHandle,
    private readonly intervalMs: number,
    private readonly on: { idle: (s: IntervalStream) => void; gone: () => void },
  ) {}

  async next(signal: AbortSignal): Promise<TaskStats | undefined> {
    const reader = this.#join(signal);
    for (;;) {
      // Its own abort released the stream (and woke it): the abort is the answer.
      if (signal.aborted) throw signal.reason;
      if (this.#closed) return undefined;
      if (this.#latest !== undefined && reader.seen < this.#seq) {
        reader.seen = this.#seq;
        return this.#latest;
      }
      if (reader.endings < this.#endings) {
        reader.endings = this.#endings;
        if ("error" in this.#ending) throw this.#ending.error;
        return undefined; // the executor ended the stream: so does this call's
      }
      this.#start();
      await this.#wait(signal);
    }
  }

  close(): void {
    this.#closed = true;
    for (const [signal, r] of this.#readers) signal.removeEventListener("abort", r.onAbort);
    this.#readers.clear();
    this.#running?.abort();
    this.#wake();
  }

  #join(signal: AbortSignal): Reader {
    let reader = this.#readers.get(signal);
    if (reader !== undefined) return reader;
    const onAbort = () => {
      this.#readers.delete(signal);
      if (this.#readers.size > 0 || this.#closed) return;
      // Nobody reads this interval any more: stop sampling on it.
      this.on.idle(this);
      this.close();
    };
    // A new call gets the latest sample at once; an ending before it joined is not its own.
    reader = { seen: this.#latestStale ? this.#seq : 0, endings: this.#endings, onAbort };
    this.#readers.set(signal, reader);
    signal.addEventListener("abort", onAbort, { once: true });
    return reader;
  }

  #start(): void {
    if (this.#running !== undefined || this.#closed) return;
    const ac = (this.#running = new AbortController());
    void (async () => {
      let ending: { error?: unknown } | undefined;
      try {
        const req = { interval: BigInt(Math.round(this.intervalMs * 1e6)) };
        for await (const r of this.executor.client.stats(req, { signal: ac.signal })) {
          if (r.stats === undefined) continue;
          this.#latest = r.stats;
          this.#latestStale = false;
          this.#seq++;
          this.#wake();
        }
        if (!ac.signal.aborted) ending = {};
      } catch (error) {
        if (!ac.signal.aborted) ending = { error };
      } finally {
        if (this.#running === ac) this.#running = undefined;
      }
      if (ending !== undefined) {
        const ex = this.executor;
        // The executor is gone (killed, or exited after its task): every stream of the task ends
        // cleanly, as a Go driver's does when its executor client's Stats channel closes.
        if (ex.exited.aborted || ending.error instanceof PluginShutdownError || !isProcessAlive(ex.pid)) return this.on.gone();
        this.#endings++;
        this.#ending = ending;
        this.#latestStale = true;
      }
      this.#wake();
    })();
  }

  #wait(signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const wake = () => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = () => {
        this.#waiters.delete(wake);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      this.#waiters.add(wake);
    });
  }

  #wake(): void {
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const w of waiters) w();
  }
}
