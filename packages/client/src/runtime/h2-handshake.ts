/**
 * The HTTP/2 handshake of a connection to a plugin, bounded in time as grpc-go bounds it. grpc-go
 * (Nomad's client) counts a connection as ready only once the server's preface (its SETTINGS frame)
 * has arrived, and gives up on one that is not ready within its connect timeout (minConnectTimeout,
 * 20 s): the RPCs waiting for it fail with Unavailable ("failed to receive server preface within
 * timeout", "connection closed before server preface received"). Node's HTTP/2 session counts as
 * connected once the socket is, and nothing bounds the wait for the server's SETTINGS: a plugin
 * whose socket accepts (the kernel does that for a hung process) but which never answers held calls
 * without a deadline forever, and one that closed at once or answered something else than HTTP/2
 * failed them as Canceled or Internal, naming nothing.
 */
import type * as http2 from "node:http2";
import type { Duplex } from "node:stream";
import { Code, ConnectError } from "@connectrpc/connect";

/**
 * How long a new connection to a plugin may take to complete its HTTP/2 handshake (the plugin's
 * SETTINGS frame) before the calls waiting for it fail with Unavailable: grpc-go's minimum connect
 * timeout.
 *
 * @example
 * ```ts
 * const plugin = await launchPlugin("./my-driver", [], { connectTimeoutMs: DEFAULT_CONNECT_TIMEOUT_MS / 4 });
 * ```
 */
export const DEFAULT_CONNECT_TIMEOUT_MS = 20_000;

/** The longest delay a Node timer honours, in ms (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Where a connection's handshake is kept on its socket (read back through the session's socket proxy). */
const onSocket = Symbol("nomadkit.h2Handshake");
const bySession = new WeakMap<http2.Http2Session, Handshake>();

/** One connection's handshake: done once the plugin's SETTINGS arrive, failed if anything else comes first. */
export class Handshake {
  #done = false;
  #failure: ConnectError | undefined;
  readonly #waiters = new Set<{
    resolve: () => void;
    reject: (err: ConnectError) => void;
  }>();
  readonly #timer: NodeJS.Timeout | undefined;
  readonly #target: string;

  /**
   * `target` names the plugin's socket in errors ("unix:/tmp/p/plugin.sock"); `destroy` ends the
   * connection when `timeoutMs` passes first (≤ 0 or beyond a timer's range: no limit).
   */
  constructor(
    target: string,
    timeoutMs: number,
    destroy: (err: ConnectError) => void,
  ) {
    this.#target = target;
    if (timeoutMs > 0 && timeoutMs <= MAX_TIMER_MS) {
      this.#timer = setTimeout(() => {
        const err = this.#fail(
          `no HTTP/2 handshake within ${timeoutMs} ms (the connection was accepted, but the plugin did not answer)`,
        );
        if (err !== undefined) destroy(err);
      }, timeoutMs);
      // A connection nobody waits on must not hold the process (the calls that wait hold it).
      this.#timer.unref();
    }
  }

  /** True once the plugin's SETTINGS frame has arrived. */
  get done(): boolean {
    return this.#done;
  }

  /**
   * Resolves when the handshake is done; rejects with Unavailable naming the socket when it failed,
   * or with `giveUp`'s reason once it is aborted (the waiter is dropped: a caller that left must not
   * be held until the handshake ends, which with no connect timeout is never).
   */
  wait(giveUp?: AbortSignal): Promise<void> {
    if (this.#done) return Promise.resolve();
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    if (giveUp?.aborted) return Promise.reject(giveUp.reason);
    return new Promise((resolve, reject) => {
      const onGiveUp = () => {
        this.#waiters.delete(waiter);
        reject(giveUp!.reason);
      };
      const waiter = {
        resolve: () => {
          giveUp?.removeEventListener("abort", onGiveUp);
          resolve();
        },
        reject: (err: ConnectError) => {
          giveUp?.removeEventListener("abort", onGiveUp);
          reject(err);
        },
      };
      this.#waiters.add(waiter);
      giveUp?.addEventListener("abort", onGiveUp, { once: true });
    });
  }

  /** Follows `session`'s frames and end. */
  watch(session: http2.Http2Session): void {
    // Our SETTINGS acknowledged: the plugin speaks HTTP/2, and sent its own SETTINGS first.
    if (!session.pendingSettingsAck) return this.#ready();
    if (session.closed || session.destroyed) {
      this.#fail("it closed the connection before the HTTP/2 handshake");
      return;
    }
    const ready = () => this.#ready();
    session.once("remoteSettings", ready);
    session.once("localSettings", ready);
    session.once("error", (err: NodeJS.ErrnoException) => {
      this.#fail(
        err.code === "ERR_HTTP2_ERROR"
          ? `it does not answer in HTTP/2 (${err.message})`
          : err.code === "ECONNRESET" || err.code === "EPIPE"
            ? "it closed the connection before the HTTP/2 handshake"
            : `the connection failed before the HTTP/2 handshake: ${err.message}`,
        err,
      );
    });
    session.once("close", () =>
      this.#fail("it closed the connection before the HTTP/2 handshake"),
    );
  }

  #ready(): void {
    if (this.#done || this.#failure !== undefined) return;
    this.#done = true;
    clearTimeout(this.#timer);
    for (const w of this.#waiters) w.resolve();
    this.#waiters.clear();
  }

  /** Fails the handshake (the first reason wins); undefined when it was already over. */
  #fail(why: string, cause?: unknown): ConnectError | undefined {
    if (this.#done || this.#failure !== undefined) return undefined;
    clearTimeout(this.#timer);
    const err = new ConnectError(
      `cannot connect to the plugin at ${this.#target}: ${why}`,
      Code.Unavailable,
      undefined,
      undefined,
      cause,
    );
    this.#failure = err;
    for (const w of this.#waiters) w.reject(err);
    this.#waiters.clear();
    return err;
  }
}

/**
 * Wraps `createConnection` so each connection it makes has its handshake timed from the moment its
 * socket is made: a connection still connecting when the time is up (a TLS handshake nobody
 * answers) is destroyed too, which fails the session before it was ever ready.
 */
export function timedConnections<A extends unknown[]>(
  createConnection: (...args: A) => Duplex,
  target: string,
  timeoutMs: number,
): (...args: A) => Duplex {
  return (...args: A) => {
    const socket = createConnection(...args);
    (socket as Duplex & { [onSocket]?: Handshake })[onSocket] = new Handshake(
      target,
      timeoutMs,
      (err) => socket.destroy(err),
    );
    return socket;
  };
}

/**
 * The handshake of `session`, followed from now on: the one its socket was made with
 * ({@link timedConnections}), else one timed from now.
 */
export function handshakeOf(
  session: http2.Http2Session,
  target: string,
  timeoutMs: number,
): Handshake {
  let hs = bySession.get(session);
  if (hs !== undefined) return hs;
  try {
    hs = (session.socket as unknown as { [onSocket]?: Handshake })[onSocket];
  } catch {
    // the socket is already gone: the watch below sees the session closed
  }
  hs ??= new Handshake(target, timeoutMs, (err) => session.destroy(err));
  bySession.set(session, hs);
  hs.watch(session);
  return hs;
}
