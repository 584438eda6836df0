/**
 * Streaming calls whose responses are handed on as wire frames instead of messages: for relays
 * (a driver forwarding exec output from its executor) that pass responses through unchanged. The
 * response body is split into gRPC messages without copying (each frame lists views of the received
 * HTTP/2 chunks, 5-byte prefix included) and nothing is decoded; status, trailers, cancellation and
 * failures behave like the generated clients' (ClientRuntime's error normalisation included).
 */
import type * as http2 from "node:http2";
import { create, toBinary, type DescMethodBiDiStreaming, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { requestHeader, validateResponse, validateTrailer } from "@connectrpc/connect/protocol-grpc";
import type { Http2SessionManager } from "@connectrpc/connect-node";
import { cancellationError } from "../errors.js";
import type { ClientRuntime } from "./client-runtime.js";
import { webHeaders } from "./headers.js";

/** One gRPC message as it travelled: the 5-byte prefix and the protobuf bytes, over several parts. */
export interface RawFrame {
  /** The message's bytes in order, as views of the received chunks (the prefix may span parts). */
  readonly parts: readonly Uint8Array[];
  /** Sum of the parts' lengths (5 + message length). */
  readonly byteLength: number;
}

const sessionsOf = new WeakMap<Transport, Http2SessionManager>();

/** @internal Lets {@link rawBidiStream} open streams on a plugin connection's HTTP/2 sessions. */
export function registerRawSessions(transport: Transport, sessions: Http2SessionManager): void {
  sessionsOf.set(transport, sessions);
}

/** Frames waiting for the consumer before the HTTP/2 stream is paused (flow control then reaches the server). */
const MAX_QUEUED_BYTES = 1024 * 1024;

function resetError(rstCode: number): ConnectError {
  const name = ["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL"][rstCode] ?? String(rstCode);
  const code = rstCode === 8 ? Code.Canceled : rstCode === 7 ? Code.Unavailable : Code.Internal;
  return new ConnectError(`http/2 stream closed with error code ${name} (0x${rstCode.toString(16)})`, code);
}

function envelope(schema: DescMessage, message: unknown): Buffer {
  const bytes = toBinary(schema, create(schema, message as never));
  const out = Buffer.allocUnsafe(5 + bytes.byteLength);
  out[0] = 0;
  out.writeUInt32BE(bytes.byteLength, 1);
  out.set(bytes, 5);
  return out;
}

/**
 * A bidi call like `ClientRuntime.bidiStream`, yielding each response as a {@link RawFrame}.
 * Undefined when `runtime` does not run on a plugin connection made by `launchPlugin` /
 * `reattachPlugin` (use the generated client then).
 *
 * @example
 * ```ts
 * const frames = rawBidiStream(executor.plugin.runtime, Executor.method.execStreaming, requests, { signal });
 * if (frames) for await (const f of frames) forward(f.parts);
 * ```
 */
export function rawBidiStream<I extends DescMessage, O extends DescMessage>(
  runtime: ClientRuntime,
  method: DescMethodBiDiStreaming<I, O>,
  requests: AsyncIterable<MessageInitShape<I>>,
  options: { signal?: AbortSignal | undefined } = {},
): AsyncIterable<RawFrame> | undefined {
  const sessions = sessionsOf.get(runtime.transport);
  if (sessions === undefined) return undefined;
  return {
    [Symbol.asyncIterator]: () => {
      const gen = run(sessions, method, requests, options.signal);
      return {
        next: () =>
          gen.next().catch(async (err: unknown) => {
            throw await runtime.normalizeError(err, options.signal);
          }),
        return: (v?: unknown) => gen.return(v as undefined),
      };
    },
  };
}

async function* run<I extends DescMessage, O extends DescMessage>(
  sessions: Http2SessionManager,
  method: DescMethodBiDiStreaming<I, O>,
  requests: AsyncIterable<MessageInitShape<I>>,
  signal: AbortSignal | undefined,
): AsyncGenerator<RawFrame, void, undefined> {
  if (signal?.aborted) throw cancellationError(signal.reason);
  const header: http2.OutgoingHttpHeaders = {};
  requestHeader(true, undefined, undefined).forEach((v, k) => (header[k] = v));
  let stream: http2.ClientHttp2Stream;
  try {
    stream = await sessions.request("POST", `/${method.parent.typeName}/${method.name}`, header, {});
  } catch (err) {
    throw ConnectError.from(err, Code.Unavailable);
  }

  const queue: RawFrame[] = [];
  let queuedBytes = 0;
  let failure: { err: unknown } | undefined;
  let ended = false;
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const fail = (err: unknown) => {
    failure ??= { err };
    notify();
  };
  let responseHeader: Headers | undefined;
  let foundStatus = false;
  let trailer = new Headers();

  stream.on("response", (h) => {
    try {
      const web = webHeaders(h);
      responseHeader = web;
      const r = validateResponse(Number(h[":status"]), web);
      if (r.headerError !== undefined) return fail(r.headerError);
      foundStatus = r.foundStatus;
      const enc = web.get("grpc-encoding");
      if (enc !== null && enc.toLowerCase() !== "identity") fail(new ConnectError(`unsupported response encoding "${enc}"`, Code.Internal, web));
    } catch (err) {
      fail(err);
    }
  });
  stream.on("trailers", (t) => (trailer = webHeaders(t)));

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
  stream.on("data", (chunk: Buffer) => {
    sessions.notifyResponseByteRead(stream);
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
    if (queuedBytes >= MAX_QUEUED_BYTES && !stream.isPaused()) stream.pause();
    notify();
  });
  stream.once("end", () => {
    if (prefixGot > 0) return fail(new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument));
    ended = true;
    notify();
  });
  stream.once("close", () => {
    if (!ended) fail(stream.rstCode !== undefined && stream.rstCode !== 0 ? resetError(stream.rstCode) : new ConnectError("http/2 stream closed before the response ended", Code.Internal));
  });
  stream.on("error", (err) => fail(ConnectError.from(err, Code.Internal)));
  const onAbort = () => {
    fail(cancellationError(signal?.reason));
    if (!stream.closed) stream.close(8 /* CANCEL */);
  };
  signal?.addEventListener("abort", onAbort, { once: true });

  // Requests: written as the caller produces them; the request side ends when they do.
  let stopRequests = false;
  const it = requests[Symbol.asyncIterator]();
  const pump = (async () => {
    for (;;) {
      const r = await it.next();
      if (stopRequests || stream.closed || stream.destroyed || stream.writableEnded) return;
      if (r.done === true) {
        stream.end();
        return;
      }
      if (!stream.write(envelope(method.input, r.value))) {
        await new Promise<void>((resolve) => {
          const done = () => {
            stream.off("drain", done);
            stream.off("close", done);
            resolve();
          };
          stream.on("drain", done);
          stream.on("close", done);
        });
      }
    }
  })();
  pump.catch((err: unknown) => {
    fail(err);
    if (!stream.closed) stream.close(8 /* CANCEL */);
  });

  try {
    for (;;) {
      const frame = queue.shift();
      if (frame !== undefined) {
        queuedBytes -= frame.byteLength;
        if (queuedBytes < MAX_QUEUED_BYTES && stream.isPaused() && failure === undefined) stream.resume();
        yield frame;
        continue;
      }
      if (failure !== undefined) throw failure.err;
      if (ended) break;
      await new Promise<void>((resolve) => (wake = resolve));
    }
    if (!foundStatus) validateTrailer(trailer, responseHeader ?? new Headers());
  } finally {
    signal?.removeEventListener("abort", onAbort);
    stopRequests = true;
    if (!stream.closed) {
      // Response complete while our request side is open (exec never half-closes): end it cleanly.
      // A reset here would count towards the server's rapid-reset limit (Node: ~1000 per session).
      if (ended && failure === undefined) {
        if (!stream.writableEnded) stream.end();
      } else stream.close(8 /* CANCEL */);
    }
  }
}
