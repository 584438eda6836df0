/**
 * HTTP/2 sessions to plugins with flow-control windows sized for bulk streams. Node's defaults
 * (64 KiB per stream and per connection) let a plugin send only 64 KiB before waiting for our
 * WINDOW_UPDATE, which caps exec output at one round trip per 64 KiB. 1 MiB per stream keeps a
 * local socket full (a driver relaying its executor's exec output ran faster and with less CPU
 * than with 4 MiB) and bounds what a slow reader makes us hold.
 */
import type * as http2 from "node:http2";
import { constants as http2Constants } from "node:http2";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { Http2SessionManager, type Http2SessionOptions } from "@connectrpc/connect-node";
import { markCall, markingManagers, takeCallMark } from "./call-marks.js";
import { repairGrpcMessage } from "./grpc-message.js";
import { DEFAULT_CONNECT_TIMEOUT_MS, handshakeOf, timedConnections } from "./h2-handshake.js";
import { PLUGIN_CONNECTION_WINDOW, PLUGIN_SESSION_MEMORY_MIB, PLUGIN_STREAM_WINDOW } from "./windows.js";

const widened = new WeakSet<http2.Http2Session>();

function ignoreSessionError(): void {}

/** The interceptor that marks each call of a connect transport on a {@link PluginSessionManager} ({@link markCall}). */
export const markCalls: Interceptor = (next) => async (req) => {
  const release = markCall(req.header, req.signal);
  try {
    return await next(req);
  } finally {
    release();
  }
};

/** connect-node's keep-alive options, and how new connections are timed and named. */
export interface PluginSessionOptions extends Http2SessionOptions {
  /**
   * How long a new connection may take until the plugin's HTTP/2 SETTINGS arrive; calls waiting
   * for it then fail with Unavailable. Default {@link DEFAULT_CONNECT_TIMEOUT_MS}; ≤ 0: no limit.
   */
  connectTimeoutMs?: number;
  /** The plugin's address in errors, e.g. `unix:/tmp/plugin1/plugin.sock`; default the URL's origin. */
  target?: string;
}

/**
 * connect-node's session manager with {@link PLUGIN_STREAM_WINDOW} advertised at connect time and
 * the connection window raised to {@link PLUGIN_CONNECTION_WINDOW} on the first stream (the
 * manager does not expose its sessions otherwise). A stream is handed out only once its
 * connection's HTTP/2 handshake is done, as grpc-go uses a connection only once the server's
 * preface has arrived: calls on a connection that does not complete it within the connect timeout,
 * closes first or answers something else fail with Unavailable naming the plugin's socket (see
 * h2-handshake.ts).
 */
export class PluginSessionManager extends Http2SessionManager {
  readonly #target: string;
  readonly #connectTimeoutMs: number;

  constructor(
    url: URL | string,
    options: http2.ClientSessionOptions | http2.SecureClientSessionOptions = {},
    { connectTimeoutMs = DEFAULT_CONNECT_TIMEOUT_MS, target, ...pingOptions }: PluginSessionOptions = {},
  ) {
    const create = options.createConnection;
    const named = target ?? new URL(url).origin;
    super(url, pingOptions, {
      maxSessionMemory: PLUGIN_SESSION_MEMORY_MIB,
      ...options,
      ...(create !== undefined && { createConnection: timedConnections(create, named, connectTimeoutMs) }),
      settings: { initialWindowSize: PLUGIN_STREAM_WINDOW, ...options.settings },
    });
    this.#target = named;
    this.#connectTimeoutMs = connectTimeoutMs;
    markingManagers.add(this);
  }

  #aborted = false;

  /** Closes the sessions for good: a call made after (or in the same tick as) close() does not reconnect. */
  override abort(reason?: unknown): void {
    this.#aborted = true;
    super.abort(reason as never);
  }

  override async request(
    method: string,
    path: string,
    headers: http2.OutgoingHttpHeaders,
    options: Omit<http2.ClientSessionRequestOptions, "signal">,
  ): Promise<http2.ClientHttp2Stream> {
    if (this.#aborted) throw closedHere();
    const call = takeCallMark(headers);
    const giveUp = call.signal;
    const stream = await super.request(method, path, call.headers, options);
    const session = stream.session;
    const handshake = session === undefined ? undefined : handshakeOf(session, this.#target, this.#connectTimeoutMs);
    if (handshake !== undefined && !handshake.done) {
      // Nobody listens on the stream yet: its own failure (the connection's) must not be unhandled.
      stream.on("error", ignoreSessionError);
      try {
        // Until the call is over: its caller (connect-node, h2-call) cannot close a stream it was not given.
        await handshake.wait(giveUp);
      } catch (err) {
        if (!stream.destroyed) stream.close(http2Constants.NGHTTP2_CANCEL);
        throw this.#aborted ? closedHere() : err;
      } finally {
        stream.off("error", ignoreSessionError);
      }
    }
    // Aborted while the connection was being made: connect-node's manager would have made a new one.
    if (this.#aborted) {
      stream.close(http2Constants.NGHTTP2_CANCEL);
      stream.session?.destroy();
      throw closedHere();
    }
    endRequestsWithResponse(stream);
    // Ahead of every other listener: they all get this headers object.
    stream.prependListener("response", repairGrpcMessage);
    stream.prependListener("trailers", repairGrpcMessage);
    if (session !== undefined && !widened.has(session)) {
      widened.add(session);
      // connect-node destroys a session with an error when a GOAWAY comes with no stream open,
      // and removes its own listeners when the manager is aborted: a plugin that exits as the
      // host closes (kill()) would crash the host with an unhandled "error" event. Errors reach
      // callers through their streams and the manager's state either way.
      session.on("error", ignoreSessionError);
      try {
        session.setLocalWindowSize(PLUGIN_CONNECTION_WINDOW);
      } catch {
        // session already closing: nothing to widen
      }
    }
    return stream;
  }
}

/**
 * Ends the request side once the response is complete and read (a trailers-only answer, or the
 * body's end), as grpc-go's client does: the call is over then, whatever the caller still sends.
 * connect-node's request writer stops without ending the stream when it finds the response over
 * after a write (an exec whose command fails to start while the stdin close is on its way), which
 * left the stream half-open here and open in the plugin for the life of the connection. Not at the
 * trailers: the writer goes on writing until the caller has read everything, and a write after the
 * end fails the stream's response iterator, losing the unread output and the status. An
 * END_STREAM, not a reset: resets count towards the plugin's rapid-reset limit.
 */
function endRequestsWithResponse(stream: http2.ClientHttp2Stream): void {
  const end = () => {
    if (!stream.writableEnded && !stream.destroyed) stream.end();
  };
  stream.once("end", end);
  stream.once("response", (_headers, flags: number) => {
    if ((flags & http2Constants.NGHTTP2_FLAG_END_STREAM) !== 0) end();
  });
}

function closedHere(): ConnectError {
  return new ConnectError("the connection to the plugin was closed on this side", Code.Canceled);
}
