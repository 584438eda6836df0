/**
 * One gRPC call on a plugin connection's HTTP/2 session, written directly on `node:http2` instead
 * of going through connect's transport. Used for the connections `launchPlugin` and
 * `reattachPlugin` make: by `ClientRuntime` for every unary call (connect's generic stack — its
 * async-iterable pipeline, linked abort signals, an error object made as each call closes — cost
 * 2–3× the CPU of the call itself and ~0.5 ms of latency per call), and by `rawBidiStream` for
 * relays. Response validation, status and trailers use connect's own gRPC protocol functions, and
 * failures are the `ConnectError`s connect's transport gives, so callers see the same results on
 * either path (`ClientRuntime` normalises both alike).
 */
import type * as http2 from "node:http2";
import {
  create,
  fromBinary,
  isMessage,
  toBinary,
  type DescMessage,
  type DescMethod,
  type DescMethodUnary,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import { Code, ConnectError, type CallOptions, type Transport } from "@connectrpc/connect";
import { requestHeader, validateResponse, validateTrailer } from "@connectrpc/connect/protocol-grpc";
import type { Http2SessionManager } from "@connectrpc/connect-node";
import { cancellationError } from "../errors.js";
import { webHeaders } from "./headers.js";
import { markCall, markingManagers } from "./call-marks.js";

/** One gRPC message as it travelled: the 5-byte prefix and the protobuf bytes, over several parts. */
export interface RawFrame {
  /** The message's bytes in order, as views of the received chunks (the prefix may span parts). */
  readonly parts: readonly Uint8Array[];
  /** Sum of the parts' lengths (5 + message length). */
  readonly byteLength: number;
}

const sessionsOf = new WeakMap<Transport, Http2SessionManager>();

/** @internal Marks `transport` as a plugin connection whose calls may use `sessions` directly. */
export function registerPluginSessions(transport: Transport, sessions: Http2SessionManager): void {
  sessionsOf.set(transport, sessions);
}

/** The HTTP/2 sessions under `transport` when it is a plugin connection (`launchPlugin`, `reattachPlugin`). */
export function pluginSessions(transport: Transport): Http2SessionManager | undefined {
  return sessionsOf.get(transport);
}

/** What a call takes from connect's `CallOptions`. */
export interface H2CallOptions {
  /** The caller's cancellation. */
  signal?: AbortSignal | undefined;
  /** Deadline in ms, sent as `grpc-timeout` and enforced here; undefined or ≤ 0: none (as connect). */
  timeoutMs?: number | undefined;
  /** Extra request headers. */
  headers?: CallOptions["headers"];
}

/** The response's header and trailer, filled in as the call runs. */
export interface H2CallMetadata {
  header: Headers | undefined;
  trailer: Headers;
}

/** The longest delay a Node timer honours, in ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * `grpc-timeout` for `ms`: at most 8 digits, as the gRPC spec requires (connect writes milliseconds
 * whatever their number, which strict servers refuse past ~27 hours), in the finest unit that fits.
 */
function grpcTimeout(ms: number): string {
  const whole = Math.ceil(ms);
  if (whole <= 99_999_999) return `${whole}m`;
  for (const [unit, size] of [["S", 1000], ["M", 60_000], ["H", 3_600_000]] as const) {
    const n = Math.ceil(whole / size);
    if (n <= 99_999_999) return `${n}${unit}`;
  }
  return "99999999H";
}

/** Frames waiting for the consumer before the HTTP/2 stream is paused (flow control then reaches the server). */
const MAX_QUEUED_BYTES = 1024 * 1024;

function connectionClosed(): ConnectError {
  return new ConnectError("the connection closed before the plugin answered", Code.Unavailable);
}

function resetError(rstCode: number): ConnectError {
  const name = ["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL"][rstCode] ?? String(rstCode);
  const code = rstCode === 8 ? Code.Canceled : rstCode === 7 ? Code.Unavailable : Code.Internal;
  return new ConnectError(`http/2 stream closed with error code ${name} (0x${rstCode.toString(16)})`, code);
}

function envelope(schema: DescMessage, message: unknown): Buffer {
  const msg = isMessage(message, schema) ? message : create(schema, message as never);
  const bytes = toBinary(schema, msg);
  const out = Buffer.allocUnsafe(5 + bytes.byteLength);
  out[0] = 0;
  out.writeUInt32BE(bytes.byteLength, 1);
  out.set(bytes, 5);
  return out;
}

/**
 * A unary call like connect's gRPC transport makes it, on `sessions`: one request, exactly one
 * response message (connect's protocol errors otherwise), connect's deadline and cancellation.
 *
 * @example
 * ```ts
 * const sessions = pluginSessions(plugin.transport);
 * if (sessions) console.log((await h2Unary(sessions, BasePlugin.method.pluginInfo, {}, {})).message.name);
 * ```
 */
export async function h2Unary<I extends DescMessage, O extends DescMessage>(
  sessions: Http2SessionManager,
  method: DescMethodUnary<I, O>,
  request: MessageInitShape<I>,
  options: H2CallOptions,
): Promise<{ message: MessageShape<O>; header: Headers; trailer: Headers }> {
  const meta: H2CallMetadata = { header: undefined, trailer: new Headers() };
  let body: RawFrame | undefined;
  for await (const frame of h2Call(sessions, method, [request], options, meta)) {
    if (body !== undefined) throw new ConnectError("protocol error: received extra output message for unary method", Code.Unimplemented);
    body = frame;
  }
  if (body === undefined) {
    throw new ConnectError(
      "protocol error: missing output message for unary method",
      meta.trailer.has("grpc-status") ? Code.Unimplemented : Code.Unknown,
    );
  }
  const [first] = body.parts;
  const bytes = body.parts.length === 1 ? first!.subarray(5) : Buffer.concat(body.parts).subarray(5);
  let message: MessageShape<O>;
  try {
    message = fromBinary(method.output, bytes);
  } catch (err) {
    throw new ConnectError(`parse binary: ${err instanceof Error ? err.message : String(err)}`, Code.Internal);
  }
  return { message, header: meta.header ?? new Headers(), trailer: meta.trailer };
}

/**
 * Runs one call of `method` on `sessions` and yields each response message as a {@link RawFrame}.
 * `requests` are written as they come (an array all at once), then the request side ends. Fails
 * with connect's errors: the status from the trailer (or a trailers-only header), a reset stream,
 * the deadline, the caller's cancellation (as a cancellation error). `meta` receives the response
 * header and trailer.
 */
export async function* h2Call<I extends DescMessage>(
  sessions: Http2SessionManager,
  method: DescMethod & { readonly input: I },
  requests: AsyncIterable<MessageInitShape<I>> | readonly MessageInitShape<I>[],
  options: H2CallOptions,
  meta: H2CallMetadata = { header: undefined, trailer: new Headers() },
): AsyncGenerator<RawFrame, void, undefined> {
  const { signal } = options;
  if (signal?.aborted) throw cancellationError(signal.reason);
  const timeoutMs = options.timeoutMs !== undefined && options.timeoutMs > 0 ? options.timeoutMs : undefined;

  const queue: RawFrame[] = [];
  let queuedBytes = 0;
  let failure: { err: unknown } | undefined;
  let ended = false;
  let foundStatus = false;
  let stream: http2.ClientHttp2Stream | undefined;
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const sleep = () => new Promise<void>((resolve) => (wake = resolve));
  const fail = (err: unknown) => {
    failure ??= { err };
    notify();
  };
  // Read through a call: TypeScript would keep `failure` narrowed across the awaits below.
  const failed = (): { err: unknown } | undefined => failure;
  // Cancellation and the deadline also end a call whose connection is still being made.
  // Aborted with `cancel`: ends the sessions' wait for a new connection's handshake (markCall).
  const over = new AbortController();
  const cancel = (err: unknown) => {
    fail(err);
    over.abort(err);
    if (stream !== undefined && !stream.closed) stream.close(8 /* CANCEL */);
  };
  const onAbort = () => cancel(cancellationError(signal?.reason));
  signal?.addEventListener("abort", onAbort, { once: true });
  // Node's timers hold at most 2^31-1 ms (~24.8 days; a longer delay fires at once): a deadline
  // further away is not armed here, the plugin still gets it in grpc-timeout.
  const deadline =
    timeoutMs === undefined || timeoutMs > MAX_TIMER_MS
      ? undefined
      : setTimeout(() => cancel(new ConnectError("the operation timed out", Code.DeadlineExceeded)), timeoutMs);
  let stopRequests = false;

  try {
    const header: http2.OutgoingHttpHeaders = {};
    requestHeader(true, timeoutMs, options.headers).forEach((v, k) => (header[k] = v));
    if (timeoutMs !== undefined) header["grpc-timeout"] = grpcTimeout(timeoutMs);
    // Read by the manager before its first await: released once the request is made.
    const release = markingManagers.has(sessions) ? markCall(header, over.signal) : undefined;
    // Set from the callbacks below (a plain `let` would be narrowed to undefined after them).
    const opening: { result?: { stream: http2.ClientHttp2Stream } | { err: unknown } } = {};
    sessions.request("POST", `/${method.parent.typeName}/${method.name}`, header, {}).then(
      (s) => {
        if (failure !== undefined) s.close(8 /* CANCEL */);
        opening.result = { stream: s };
        notify();
      },
      (err: unknown) => {
        opening.result = { err: ConnectError.from(err, Code.Unavailable) };
        notify();
      },
    );
    release?.();
    while (opening.result === undefined && failure === undefined) await sleep();
    if (failure !== undefined) throw failure.err;
    const opened = opening.result!;
    if ("err" in opened) throw opened.err;
    const s = (stream = opened.stream);

    s.on("response", (h) => {
      try {
        const web = webHeaders(h);
        meta.header = web;
        const r = validateResponse(Number(h[":status"]), web);
        if (r.headerError !== undefined) return fail(r.headerError);
        foundStatus = r.foundStatus;
        const enc = web.get("grpc-encoding");
        if (enc !== null && enc.toLowerCase() !== "identity") fail(new ConnectError(`unsupported response encoding "${enc}"`, Code.Internal, web));
      } catch (err) {
        fail(err);
      }
    });
    s.on("trailers", (t) => (meta.trailer = webHeaders(t)));

    // The response body, split into messages as views of the received chunks.
    const prefix = Buffer.alloc(5);
    let prefixGot = 0;
    let remaining = 0;
    let size = 0;
    let parts: Uint8Array[] = [];
    const emit = () => {
      queue.push({ parts, byteLength: size });
      queuedBytes += size;
      parts = [];
      prefixGot = 0;
    };
    s.on("data", (chunk: Buffer) => {
      sessions.notifyResponseByteRead(s);
      if (failure !== undefined) return;
      let off = 0;
      const n = chunk.length;
      while (off < n) {
        if (prefixGot < 5) {
          const take = Math.min(5 - prefixGot, n - off);
          chunk.copy(prefix, prefixGot, off, off + take);
          parts.push(chunk.subarray(off, off + take));
          prefixGot += take;
          off += take;
          if (prefixGot < 5) break;
          if ((prefix[0]! & 0b1) === 0b1) return fail(new ConnectError("received compressed envelope, but do not know how to decompress", Code.Internal));
          remaining = prefix.readUInt32BE(1);
          size = 5 + remaining;
          if (remaining === 0) emit();
          continue;
        }
        const take = Math.min(remaining, n - off);
        parts.push(off === 0 && take === n ? chunk : chunk.subarray(off, off + take));
        remaining -= take;
        off += take;
        if (remaining === 0) emit();
      }
      if (queuedBytes >= MAX_QUEUED_BYTES && !s.isPaused()) s.pause();
      notify();
    });
    s.once("end", () => {
      // A connection that went away (the plugin died) ends its streams with CANCEL, not a status.
      if (s.rstCode !== undefined && s.rstCode !== 0) return fail(resetError(s.rstCode));
      // Or with no frame at all: HTTP/2 has no response without HEADERS, so this is the connection
      // closing under the call (a plugin that exits), which grpc-go reports as Unavailable too.
      if (meta.header === undefined) return fail(connectionClosed());
      if (prefixGot > 0) return fail(new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument));
      ended = true;
      notify();
    });
    s.once("close", () => {
      if (ended) return;
      if (s.rstCode !== undefined && s.rstCode !== 0) fail(resetError(s.rstCode));
      else if (meta.header === undefined) fail(connectionClosed());
      else fail(new ConnectError("http/2 stream closed before the response ended", Code.Internal));
    });
    s.on("error", (err) => fail(ConnectError.from(err, Code.Internal)));

    // Requests: written as the caller produces them; the request side ends when they do.
    if (Array.isArray(requests)) {
      for (const r of requests as readonly MessageInitShape<I>[]) s.write(envelope(method.input, r));
      s.end();
    } else {
      const it = (requests as AsyncIterable<MessageInitShape<I>>)[Symbol.asyncIterator]();
      const pump = (async () => {
        for (;;) {
          const r = await it.next();
          if (stopRequests || s.closed || s.destroyed || s.writableEnded) return;
          if (r.done === true) {
            s.end();
            return;
          }
          if (!s.write(envelope(method.input, r.value))) {
            await new Promise<void>((resolve) => {
              const done = () => {
                s.off("drain", done);
                s.off("close", done);
                resolve();
              };
              s.on("drain", done);
              s.on("close", done);
            });
          }
        }
      })();
      pump.catch((err: unknown) => cancel(err));
    }

    for (;;) {
      const frame = queue.shift();
      if (frame !== undefined) {
        queuedBytes -= frame.byteLength;
        if (queuedBytes < MAX_QUEUED_BYTES && s.isPaused() && failure === undefined) s.resume();
        yield frame;
        continue;
      }
      const f = failed();
      if (f !== undefined) throw f.err;
      if (ended) break;
      await sleep();
    }
    if (!foundStatus) validateTrailer(meta.trailer, meta.header ?? new Headers());
  } finally {
    signal?.removeEventListener("abort", onAbort);
    clearTimeout(deadline);
    stopRequests = true;
    if (stream !== undefined && !stream.closed) {
      // Response complete while our request side is open (exec never half-closes): end it cleanly.
      // A reset here would count towards the server's rapid-reset limit (Node: ~1000 per session).
      if (ended && failure === undefined) {
        if (!stream.writableEnded) stream.end();
      } else stream.close(8 /* CANCEL */);
    }
  }
}
