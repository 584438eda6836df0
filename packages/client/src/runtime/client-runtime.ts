/**
 * The one client call layer. Every generated client method calls exactly one of `unary`,
 * `serverStream`, `clientStream` or `bidiStream`, which run the call on a connect `Transport` and
 * normalise every failure the same way (Nomad's `HandleReqCtxGrpcErr`, applied to all methods):
 *
 * 1. caller cancelled (its AbortSignal fired, or the connection was closed on this side)
 *                                                    -> cancellation error (`isCancellation(err)`)
 * 2. FailedPrecondition with a RecoverableError detail -> `RecoverableError`
 * 3. transport failure and the plugin's exit signal fires within the grace period
 *                                                    -> `PluginShutdownError` (cause: the original)
 *    (the wait ends at the call's own timeout, as Nomad's ends with the request's context: then
 *    DeadlineExceeded, cause: the original)
 * 4. anything else                                   -> the original error
 */
import type {
  DescMessage,
  DescMethodBiDiStreaming,
  DescMethodClientStreaming,
  DescMethodServerStreaming,
  DescMethodUnary,
  MessageInitShape,
  MessageShape,
} from "@bufbuild/protobuf";
import { Code, ConnectError, type CallOptions, type Transport } from "@connectrpc/connect";
import { PluginShutdownError, cancellationError, isCancellation } from "../errors.js";
import { ExitWatch, type PluginExitSignal } from "./exit-watch.js";
import { h2Unary, pluginSessions } from "./h2-call.js";
import { dialFailure, isTransportFailure, recoverableFrom, refusedStream } from "./normalize.js";

export type { CallOptions };

/**
 * How long Nomad waits for a plugin to be known dead after a failed call.
 *
 * @example
 * ```ts
 * new ClientRuntime(transport, { pluginExited, shutdownGraceMs: DEFAULT_SHUTDOWN_GRACE_MS * 2 });
 * ```
 */
export const DEFAULT_SHUTDOWN_GRACE_MS = 3000;

/**
 * Options shared by every call of a client.
 *
 * @example
 * ```ts
 * const exited = new AbortController();
 * child.on("exit", () => exited.abort());
 * const opts: ClientOptions = { pluginExited: exited.signal, callOptions: { timeoutMs: 30_000 } };
 * ```
 */
export interface ClientOptions {
  /**
   * Fires when the plugin process is gone (e.g. an AbortSignal aborted on the child's `exit`, or a
   * promise that settles then). Without it, transport failures are returned unchanged.
   */
  pluginExited?: PluginExitSignal;
  /** How long a transport failure waits for `pluginExited` before giving up (default 3000 ms). */
  shutdownGraceMs?: number;
  /** Defaults merged under each call's options (per-call values win; headers are not merged). */
  callOptions?: CallOptions;
  /**
   * Fires when this side closes the connection itself: calls that fail afterwards are
   * cancellations at once, without waiting `shutdownGraceMs` for a plugin exit that is not coming.
   */
  connectionClosed?: AbortSignal;
}

/**
 * Runs calls on a transport with nomadkit's error semantics. Share one per plugin connection;
 * generated clients accept either a `Transport` or a `ClientRuntime`.
 *
 * @example
 * ```ts
 * const rt = new ClientRuntime(transport, { pluginExited: exitSignal });
 * const driver = new DriverClient(rt);
 * const base = new BasePluginClient(rt);
 * ```
 */
export class ClientRuntime {
  /** The Connect transport every call goes over (calls through it directly skip this error handling). */
  readonly transport: Transport;
  readonly #exit: ExitWatch | undefined;
  readonly #graceMs: number;
  readonly #defaults: CallOptions | undefined;
  readonly #closed: AbortSignal | undefined;

  constructor(transport: Transport, options: ClientOptions = {}) {
    this.transport = transport;
    this.#exit = options.pluginExited === undefined ? undefined : new ExitWatch(options.pluginExited);
    this.#graceMs = options.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS;
    this.#defaults = options.callOptions;
    this.#closed = options.connectionClosed;
  }

  /** Call a unary method. */
  async unary<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    request: MessageInitShape<I>,
    options?: CallOptions,
  ): Promise<MessageShape<O>> {
    const opts = this.#merge(options);
    const deadline = deadlineOf(method, opts.timeoutMs);
    try {
      // On a plugin connection, directly on its HTTP/2 session (h2-call.ts); connect otherwise.
      const sessions = pluginSessions(this.transport);
      const res =
        sessions !== undefined
          ? await h2Unary(sessions, method, request, opts)
          : await this.transport.unary(method, opts.signal, opts.timeoutMs, opts.headers, request, opts.contextValues);
      opts.onHeader?.(res.header);
      opts.onTrailer?.(res.trailer);
      return res.message;
    } catch (err) {
      throw await this.#normalize(namedTimeout(err, method, opts.timeoutMs), opts.signal, deadline);
    }
  }

  /** Call a server-streaming method; failures surface from the iterator. */
  serverStream<I extends DescMessage, O extends DescMessage>(
    method: DescMethodServerStreaming<I, O>,
    request: MessageInitShape<I>,
    options?: CallOptions,
  ): AsyncIterable<MessageShape<O>> {
    return this.#stream(method, once(request), options);
  }

  /** Call a client-streaming method. */
  async clientStream<I extends DescMessage, O extends DescMessage>(
    method: DescMethodClientStreaming<I, O>,
    requests: AsyncIterable<MessageInitShape<I>>,
    options?: CallOptions,
  ): Promise<MessageShape<O>> {
    let last: MessageShape<O> | undefined;
    let count = 0;
    for await (const m of this.#stream(method, requests, options)) {
      last = m;
      count++;
    }
    if (last === undefined || count !== 1) {
      throw new ConnectError(
        `protocol error: expected exactly one response message, got ${count}`,
        Code.Unimplemented,
      );
    }
    return last;
  }

  /** Call a bidi-streaming method; failures surface from the iterator. */
  bidiStream<I extends DescMessage, O extends DescMessage>(
    method: DescMethodBiDiStreaming<I, O>,
    requests: AsyncIterable<MessageInitShape<I>>,
    options?: CallOptions,
  ): AsyncIterable<MessageShape<O>> {
    return this.#stream(method, requests, options);
  }

  /**
   * Map a failed call's error to what callers see (see the module comment). Exposed for code that
   * talks to a plugin outside the generated clients.
   */
  normalizeError(err: unknown, callerSignal?: AbortSignal): Promise<unknown> {
    return this.#normalize(err, callerSignal, undefined);
  }

  async #normalize(err: unknown, callerSignal: AbortSignal | undefined, deadline: CallDeadline | undefined): Promise<unknown> {
    if (isCancellation(err)) return err;
    if (callerSignal?.aborted) return cancellationError(err);
    if (this.#closed?.aborted) return closedHere(err);
    if (!(err instanceof ConnectError)) return err;
    // Both are Unavailable, as grpc-go reports them, so they wait for the plugin's exit as Nomad does.
    const ce = refusedStream(err) ?? dialFailure(err) ?? err;
    err = ce;
    const rec = recoverableFrom(ce);
    if (rec !== undefined) return rec;
    if (this.#exit !== undefined && isTransportFailure(ce)) {
      // The call's timeout ends the wait too: Nomad's ends when the request's context is done.
      const left = deadline === undefined ? Infinity : Math.max(0, deadline.at - Date.now());
      // close() during the wait ends it too, as close() before it would have (see above).
      switch (await this.#exit.wait(Math.min(this.#graceMs, left), callerSignal, this.#closed)) {
        case "exited":
          return new PluginShutdownError({ cause: err });
        case "cancelled":
          return callerSignal?.aborted ? cancellationError(err) : closedHere(err);
        case "timeout":
          if (deadline !== undefined && left < this.#graceMs) return callTimeout(deadline.method, deadline.timeoutMs, err);
          break;
      }
    }
    return err;
  }

  #merge(options: CallOptions | undefined): CallOptions {
    return this.#defaults === undefined ? (options ?? {}) : { ...this.#defaults, ...options };
  }

  #stream<I extends DescMessage, O extends DescMessage>(
    method:
      | DescMethodServerStreaming<I, O>
      | DescMethodClientStreaming<I, O>
      | DescMethodBiDiStreaming<I, O>,
    requests: AsyncIterable<MessageInitShape<I>>,
    options: CallOptions | undefined,
  ): AsyncIterable<MessageShape<O>> {
    const opts = this.#merge(options);
    // The call starts when iteration starts, like connect's own clients.
    const run = async function* (rt: ClientRuntime): AsyncGenerator<MessageShape<O>> {
      const deadline = deadlineOf(method, opts.timeoutMs);
      // A caller that has already given up opens no call, as unary calls refuse: connect would
      // still open the stream, and the plugin would start its handler (an exec session) for nobody.
      if (opts.signal?.aborted) throw cancellationError(opts.signal.reason);
      // A caller that stops iterating early (break, return, a throw in its loop) cancels the call,
      // so the plugin's handler ends too; connect's response iterable alone leaves it running.
      const call = new AbortController();
      const outer = opts.signal;
      const onAbort = () => call.abort(outer?.reason);
      if (outer?.aborted) onAbort();
      else outer?.addEventListener("abort", onAbort, { once: true });
      let finished = false;
      // Once the status has arrived the call is over, whatever the request side still has to send
      // (grpc-go's client ends the stream then too): the requests end there. Left alone, requests
      // that never end (an exec session's stdin that stays open, as Nomad never half-closes) kept
      // the HTTP/2 stream, and all the server holds for it, open for the life of the connection.
      const over = new AbortController();
      try {
        const res = await rt.transport.stream(
          method,
          call.signal,
          opts.timeoutMs,
          opts.headers,
          // A server stream's one request ends by itself: only caller-fed requests need the end.
          method.methodKind === "server_streaming" ? requests : endedBy(requests, over.signal),
          opts.contextValues,
        );
        opts.onHeader?.(res.header);
        yield* res.message;
        opts.onTrailer?.(res.trailer);
        finished = true;
      } catch (err) {
        finished = true;
        throw await rt.#normalize(namedTimeout(err, method, opts.timeoutMs), outer, deadline);
      } finally {
        outer?.removeEventListener("abort", onAbort);
        if (!finished) call.abort(new ConnectError("the caller stopped reading the stream", Code.Canceled));
        over.abort();
      }
    };
    return { [Symbol.asyncIterator]: () => run(this) };
  }
}

/**
 * The runtime generated clients use: `transport` itself if it already is a `ClientRuntime`,
 * otherwise a new one with `options`.
 *
 * @example
 * ```ts
 * const rt = clientRuntime(transport, { pluginExited }); // clientRuntime(rt) === rt
 * ```
 */
export function clientRuntime(transport: Transport | ClientRuntime, options?: ClientOptions): ClientRuntime {
  return transport instanceof ClientRuntime ? transport : new ClientRuntime(transport, options);
}

/** The cancellation of a call whose connection this side closed (`connectionClosed`). */
function closedHere(cause: unknown): ConnectError {
  return cancellationError(cause, "the connection to the plugin was closed on this side");
}

type MethodName = { name: string; parent: { name: string } };

/** A call's own deadline: when it passes (`Date.now()` ms), for which method and timeout. */
interface CallDeadline {
  at: number;
  method: MethodName;
  timeoutMs: number;
}

/** The deadline of a call starting now; none without a timeout (undefined or ≤ 0, as connect). */
function deadlineOf(method: MethodName, timeoutMs: number | undefined): CallDeadline | undefined {
  return timeoutMs !== undefined && timeoutMs > 0 ? { at: Date.now() + timeoutMs, method, timeoutMs } : undefined;
}

/** DeadlineExceeded for the call's own timeout, naming the method and the time. */
function callTimeout(method: MethodName, timeoutMs: number, cause: unknown, metadata?: Headers): ConnectError {
  return new ConnectError(`${method.parent.name}.${method.name}: no answer within ${timeoutMs} ms (the call's timeout)`, Code.DeadlineExceeded, metadata, undefined, cause);
}

/**
 * The call's own deadline, said with the method and the time ("the operation timed out" alone does
 * not say which call of many, nor that a timeout option set it). A plugin's DeadlineExceeded is kept.
 */
function namedTimeout(err: unknown, method: MethodName, timeoutMs: number | undefined): unknown {
  if (!(err instanceof ConnectError) || err.code !== Code.DeadlineExceeded || timeoutMs === undefined) return err;
  if (err.rawMessage !== "the operation timed out") return err;
  return callTimeout(method, timeoutMs, err, err.metadata);
}

/**
 * `source`, ending when `end` aborts even while a `next()` is pending. An async generator's own
 * `return()` waits for what it awaits, so it cannot end one blocked on input that never comes.
 * Only the pending `next()` listens for the end: racing each one against a promise that stays
 * pending for the whole call kept every message sent (an exec session's stdin) until it ended.
 */
function endedBy<T>(source: AsyncIterable<T>, end: AbortSignal): AsyncIterable<T> {
  const done = (value?: unknown): IteratorResult<T> => ({ done: true, value: value as T });
  return {
    [Symbol.asyncIterator](): AsyncIterator<T> {
      const it = source[Symbol.asyncIterator]();
      let settlePending: ((r: IteratorResult<T>) => void) | undefined;
      const onEnd = () => {
        settlePending?.(done());
        settlePending = undefined;
        // Let the source clean up once it can; nobody waits for it.
        void Promise.resolve(it.return?.()).catch(() => {});
      };
      end.addEventListener("abort", onEnd, { once: true });
      return {
        next: () => {
          if (end.aborted) return Promise.resolve(done());
          return new Promise<IteratorResult<T>>((resolve, reject) => {
            settlePending = resolve;
            it.next().then(
              (r) => {
                settlePending = undefined;
                resolve(r);
              },
              (err: unknown) => {
                settlePending = undefined;
                reject(err);
              },
            );
          });
        },
        return: (value?: unknown) => {
          end.removeEventListener("abort", onEnd);
          void Promise.resolve(it.return?.(value)).catch(() => {});
          return Promise.resolve(done(value));
        },
        // As a generator that does not catch it; the source gets it without anyone waiting.
        throw: (err?: unknown) => {
          end.removeEventListener("abort", onEnd);
          void Promise.resolve(it.throw !== undefined ? it.throw(err) : it.return?.()).catch(() => {});
          return Promise.reject(err);
        },
      };
    },
  };
}

async function* once<T>(value: T): AsyncIterable<T> {
  yield value;
}
