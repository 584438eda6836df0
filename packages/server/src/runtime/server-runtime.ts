/**
 * The one server handler layer. Generated `registerX` helpers pass every method's handler through
 * exactly one of `unary`, `serverStream`, `clientStream` or `bidiStream`, which give all methods
 * the same semantics:
 *
 * - no handler                     -> Unimplemented naming the method
 * - thrown RecoverableError        -> FailedPrecondition + `structs.RecoverableError` detail (as Go)
 * - thrown ConnectError            -> passed through
 * - call cancelled (client gone, deadline; `ctx.signal` aborted) -> stream ended, logged at debug only
 * - anything else                  -> Unknown with the message, logged once at error level
 */
import type {
  DescMessage,
  DescMethod,
  DescMethodBiDiStreaming,
  DescMethodClientStreaming,
  DescMethodServerStreaming,
  DescMethodUnary,
  MessageInitShape,
  MessageShape,
} from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { RecoverableError, cancellationError, isCancellation } from "@nomadkit/client/runtime";
import { RecoverableErrorSchema } from "@nomadkit/protocol/structs";
import { noopLogger, type Logger } from "./logger.js";
import { GuardedStream } from "./guarded-stream.js";
import { sendableStatus } from "./status-message.js";
import { errorText } from "./error-text.js";

export type { HandlerContext };

/** A value or a promise of it; handlers may answer synchronously. */
export type MaybePromise<T> = T | Promise<T>;

/** Handler shapes, by method kind (what generated `XHandlers` interfaces are made of): one request, one response. */
export type UnaryHandler<I extends DescMessage, O extends DescMessage> = (
  request: MessageShape<I>,
  context: HandlerContext,
) => MaybePromise<MessageInitShape<O>>;
/** A server-streaming handler: one request, yields the responses (an async generator, typically). */
export type ServerStreamingHandler<I extends DescMessage, O extends DescMessage> = (
  request: MessageShape<I>,
  context: HandlerContext,
) => AsyncIterable<MessageInitShape<O>>;
/** A client-streaming handler: iterates the requests, returns one response. */
export type ClientStreamingHandler<I extends DescMessage, O extends DescMessage> = (
  requests: AsyncIterable<MessageShape<I>>,
  context: HandlerContext,
) => MaybePromise<MessageInitShape<O>>;
/** A bidirectional-streaming handler: iterates the requests while yielding responses. */
export type BidiStreamingHandler<I extends DescMessage, O extends DescMessage> = (
  requests: AsyncIterable<MessageShape<I>>,
  context: HandlerContext,
) => AsyncIterable<MessageInitShape<O>>;

/** Options for {@link ServerRuntime}. */
export interface ServerRuntimeOptions {
  /** Where failures are logged (pino-compatible). Default: drop everything. */
  logger?: Logger;
}

/** Errors already logged, so a rethrow through a second layer is not logged twice. */
const logged = new WeakSet<object>();

/**
 * Wraps handlers with nomadkit's server semantics. One instance per server is typical; pass it as
 * the last argument of every `registerX` so all services log to the same logger.
 *
 * @example
 * ```ts
 * const runtime = new ServerRuntime({ logger });
 * const handler = createPluginHandler((router) => {
 *   registerDriver(router, myDriver, runtime);
 *   registerBasePlugin(router, myBase, runtime);
 * });
 * ```
 */
export class ServerRuntime {
  /** Where failures are logged: unexpected errors at error, expected ones (cancellation, RecoverableError, ConnectError) at debug. */
  readonly logger: Logger;

  constructor(options: ServerRuntimeOptions = {}) {
    this.logger = options.logger ?? noopLogger;
  }

  /** Wrap a unary handler. */
  unary<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    handler: UnaryHandler<I, O> | undefined,
  ): (request: MessageShape<I>, context: HandlerContext) => Promise<MessageInitShape<O>> {
    return async (request, context) => {
      if (handler === undefined) throw unimplemented(method);
      try {
        return await handler(request, context);
      } catch (err) {
        throw this.toConnectError(err, method, context);
      }
    };
  }

  /** Wrap a server-streaming handler. */
  serverStream<I extends DescMessage, O extends DescMessage>(
    method: DescMethodServerStreaming<I, O>,
    handler: ServerStreamingHandler<I, O> | undefined,
  ): (request: MessageShape<I>, context: HandlerContext) => AsyncIterable<MessageInitShape<O>> {
    return (request, context) => {
      if (handler === undefined) return failing(unimplemented(method));
      return this.#guardStream(method, context, handler, request);
    };
  }

  /** Wrap a client-streaming handler. */
  clientStream<I extends DescMessage, O extends DescMessage>(
    method: DescMethodClientStreaming<I, O>,
    handler: ClientStreamingHandler<I, O> | undefined,
  ): (requests: AsyncIterable<MessageShape<I>>, context: HandlerContext) => Promise<MessageInitShape<O>> {
    return async (requests, context) => {
      if (handler === undefined) throw unimplemented(method);
      try {
        return await handler(requests, context);
      } catch (err) {
        throw this.toConnectError(err, method, context);
      }
    };
  }

  /** Wrap a bidi-streaming handler. */
  bidiStream<I extends DescMessage, O extends DescMessage>(
    method: DescMethodBiDiStreaming<I, O>,
    handler: BidiStreamingHandler<I, O> | undefined,
  ): (requests: AsyncIterable<MessageShape<I>>, context: HandlerContext) => AsyncIterable<MessageInitShape<O>> {
    return (requests, context) => {
      if (handler === undefined) return failing(unimplemented(method));
      return this.#guardStream(method, context, handler, requests);
    };
  }

  /**
   * Map what a handler threw to the status the caller gets, logging it per the rules in the module
   * comment. Exposed for hand-written handlers outside `registerX`.
   */
  toConnectError(err: unknown, method: DescMethod, context: HandlerContext): ConnectError {
    return sendableStatus(this.#toConnectError(err, method, context));
  }

  #toConnectError(err: unknown, method: DescMethod, context: HandlerContext): ConnectError {
    const rpc = `${method.parent.typeName}/${method.name}`;
    // Only the caller's own cancellation: an AbortError from a controller of the handler's (a
    // deadline of its own, say) is a failure, reported and logged like any other.
    if (context.signal.aborted) {
      // Nobody is listening any more; the reason (Canceled / DeadlineExceeded) is what connect reports.
      this.logger.debug({ rpc }, "call cancelled");
      if (err instanceof ConnectError && (err.code === Code.Canceled || err.code === Code.DeadlineExceeded)) {
        return err;
      }
      const reason: unknown = context.signal.reason;
      return reason instanceof ConnectError ? reason : cancellationError(err);
    }
    if (err instanceof RecoverableError) {
      this.logger.debug({ rpc, recoverable: err.recoverable, err: err.message }, "call failed (recoverable error)");
      return new ConnectError(err.message, Code.FailedPrecondition, undefined, [
        { desc: RecoverableErrorSchema, value: { recoverable: err.recoverable } },
      ], err);
    }
    if (err instanceof ConnectError) {
      this.logger.debug({ rpc, code: Code[err.code], err: err.rawMessage }, "call failed");
      return err;
    }
    const message = describeFailure(err);
    if (typeof err !== "object" || err === null || !logged.has(err)) {
      if (typeof err === "object" && err !== null) logged.add(err);
      this.logger.error({ rpc, err }, `${rpc} failed: ${message}`);
    }
    return new ConnectError(message, Code.Unknown, undefined, undefined, err);
  }

  #guardStream<I, O>(
    method: DescMethod,
    context: HandlerContext,
    handler: (input: I, context: HandlerContext) => AsyncIterable<O>,
    input: I,
  ): AsyncIterable<O> {
    return new GuardedStream(
      () => handler(input, context),
      context.signal,
      (err) => this.toConnectError(err, method, context),
    );
  }
}

/**
 * The runtime generated code uses when none is passed: it logs nothing.
 *
 * @example
 * ```ts
 * registerHealth(router, health); // same as registerHealth(router, health, defaultServerRuntime)
 * ```
 */
export const defaultServerRuntime = new ServerRuntime();

/**
 * Resolve the optional runtime argument of generated `registerX` helpers.
 *
 * @example
 * ```ts
 * const rt = serverRuntime(runtime); // runtime ?? defaultServerRuntime
 * ```
 */
export function serverRuntime(runtime?: ServerRuntime): ServerRuntime {
  return runtime ?? defaultServerRuntime;
}

function unimplemented(method: DescMethod): ConnectError {
  return new ConnectError(`${method.parent.typeName}.${method.name} is not implemented`, Code.Unimplemented);
}

async function* failing<T>(err: unknown): AsyncIterable<T> {
  throw err;
}

/** What a failure says; an abort's own message ("This operation was aborted") plus its reason. */
function describeFailure(err: unknown): string {
  if (!(err instanceof Error)) return errorText(err);
  const cause: unknown = err.cause;
  if (isCancellation(err) && cause !== undefined) return `${err.message}: ${errorText(cause)}`;
  return err.message;
}
