/**
 * The direct gRPC path of the plugin server: the common request (HTTP/2, `application/grpc` or
 * `application/grpc+proto`, no request compression) is served straight on the HTTP/2 stream instead
 * of through connect's generic pipeline of async iterables, with the same observable behaviour:
 * the same handler functions (so the server runtime's error mapping, logging and cancellation), the
 * same HandlerContext (connect's `createHandlerContext`, deadlines from `grpc-timeout`), the same
 * headers and trailers (connect's `setTrailerStatus`, but `grpc-message` encoded as the gRPC spec
 * says, which connect's own path does not), the same protocol errors, and one message
 * written per handler output with the next one pulled only after the previous was written (flow
 * control permitting). Messages carrying a {@link WireFrame} are written as their parts, without
 * encoding or copying. Anything else (gRPC-Web, JSON, compressed requests, interceptors) goes to
 * connect.
 */
import type * as http2 from "node:http2";
import { create, fromBinary, toBinary, type DescMessage, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextValues, type ContextValues, type HandlerContext } from "@connectrpc/connect";
import { contentTypeRegExp, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { webHeaders } from "@nomadkit/client/runtime";
import { encodeBinary } from "./binary-encoder.js";
import { answerMalformedTimeout, parseGrpcTimeout } from "./grpc-timeout.js";
import { grpcMessageValue, sendableStatus } from "./status-message.js";
import { timerDelayMs } from "./timer-delay.js";
import { wireFrameOf, writeEnvelopePrefix } from "./wire-frame.js";

type AnyImpl = (input: unknown, context: unknown) => unknown;

interface Route {
  method: DescMethod;
  impl: AnyImpl;
}

/** Options of the direct path (a subset of connect-node's adapter options). */
export interface DirectPathOptions {
  shutdownSignal?: AbortSignal | undefined;
  contextValues?: ((req: http2.Http2ServerRequest) => ContextValues) | undefined;
  maxTimeoutMs?: number | undefined;
  /** Largest request message accepted (connect's `readMaxBytes`); default unlimited. */
  readMaxBytes?: number | undefined;
}

const PROTO_CONTENT_TYPE = "application/grpc+proto";
/** Request messages buffered before the HTTP/2 stream is paused (flow control then reaches the client). */
const MAX_QUEUED_REQUESTS = 32;
/** Output messages up to this size are copied behind their prefix (one write); bigger ones are not. */
const COPY_LIMIT = 16 * 1024;
/** http2.constants.NGHTTP2_INTERNAL_ERROR, without loading node:http2 here. */
const NGHTTP2_INTERNAL_ERROR = 2;

function h2ResetError(rstCode: number): ConnectError | undefined {
  const names: Record<number, [string, Code]> = {
    1: ["PROTOCOL_ERROR", Code.Internal],
    2: ["INTERNAL_ERROR", Code.Internal],
    3: ["FLOW_CONTROL_ERROR", Code.Internal],
    4: ["SETTINGS_TIMEOUT", Code.Internal],
    6: ["FRAME_SIZE_ERROR", Code.Internal],
    7: ["REFUSED_STREAM", Code.Unavailable],
    8: ["CANCEL", Code.Canceled],
    9: ["COMPRESSION_ERROR", Code.Internal],
    10: ["CONNECT_ERROR", Code.Internal],
    11: ["ENHANCE_YOUR_CALM", Code.ResourceExhausted],
    12: ["INADEQUATE_SECURITY", Code.PermissionDenied],
    13: ["HTTP_1_1_REQUIRED", Code.PermissionDenied],
  };
  const n = names[rstCode];
  return n && new ConnectError(`http/2 stream closed with error code ${n[0]} (0x${rstCode.toString(16)})`, n[1]);
}

function nodeHeaders(h: Headers): http2.OutgoingHttpHeaders {
  const o: http2.OutgoingHttpHeaders = {};
  h.forEach((value, key) => {
    const prev = o[key];
    if (prev === undefined) o[key] = value;
    else o[key] = Array.isArray(prev) ? [...prev, value] : [String(prev), value];
  });
  return o;
}

/**
 * The request messages of one call, parsed from the HTTP/2 stream as the handler asks for them.
 * The stream is paused while too many are waiting.
 */
class RequestMessages<T> implements AsyncIterableIterator<T> {
  readonly #stream: http2.ServerHttp2Stream;
  readonly #schema: DescMessage;
  readonly #queue: Uint8Array[] = [];
  #pending: Buffer | undefined;
  #ended = false;
  #error: unknown;
  #wake: (() => void) | undefined;
  #paused = false;
  readonly #readMaxBytes: number;

  constructor(stream: http2.ServerHttp2Stream, schema: DescMessage, readMaxBytes: number) {
    this.#stream = stream;
    this.#schema = schema;
    this.#readMaxBytes = readMaxBytes;
    // A stream handed over by the launcher's fast path (prelude.ts) may have ended already.
    if (stream.readableEnded) {
      this.#ended = true;
      return;
    }
    stream.on("data", (chunk: Buffer) => this.#onData(chunk));
    stream.once("end", () => {
      if (this.#pending !== undefined && this.#pending.length > 0) {
        this.#fail(new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument));
      }
      this.#ended = true;
      this.#notify();
    });
  }

  /** The call ended before the request side did (client reset, handler done). */
  close(reason: unknown | (() => unknown)): void {
    if (!this.#ended && this.#error === undefined) this.#fail(typeof reason === "function" ? (reason as () => unknown)() : reason);
    this.#queue.length = 0;
    // The rest of the request is read and dropped: Node destroys a paused stream only once its
    // unread data has been consumed, so it (and this call) would otherwise stay for ever.
    if (this.#paused) {
      this.#paused = false;
      this.#stream.resume();
    }
  }

  #fail(err: unknown): void {
    if (this.#error === undefined) this.#error = { err };
    this.#notify();
  }

  #notify(): void {
    const w = this.#wake;
    this.#wake = undefined;
    w?.();
  }

  #onData(chunk: Buffer): void {
    // After a failure the rest of the request is read and dropped.
    if (this.#error !== undefined) return;
    let buf = this.#pending === undefined || this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk]);
    while (buf.length >= 5) {
      const len = buf.readUInt32BE(1);
      if (len > this.#readMaxBytes) {
        this.#pending = undefined;
        this.#fail(new ConnectError(`message size ${len} is larger than configured readMaxBytes ${this.#readMaxBytes}`, Code.ResourceExhausted));
        return;
      }
      if (buf.length < 5 + len) break;
      if ((buf[0]! & 0b1) === 0b1) {
        this.#fail(new ConnectError("received compressed envelope, but do not know how to decompress", Code.Internal));
        return;
      }
      this.#queue.push(buf.subarray(5, 5 + len));
      buf = buf.subarray(5 + len);
    }
    this.#pending = buf;
    if (this.#queue.length >= MAX_QUEUED_REQUESTS && !this.#paused) {
      this.#paused = true;
      this.#stream.pause();
    }
    this.#notify();
  }

  async next(): Promise<IteratorResult<T>> {
    for (;;) {
      const bytes = this.#queue.shift();
      if (bytes !== undefined) {
        if (this.#paused && this.#queue.length < MAX_QUEUED_REQUESTS / 2) {
          this.#paused = false;
          this.#stream.resume();
        }
        let value: T;
        try {
          value = fromBinary(this.#schema, bytes) as T;
        } catch (e) {
          throw new ConnectError(`parse binary: ${e instanceof Error ? e.message : String(e)}`, Code.Internal);
        }
        return { done: false, value };
      }
      if (this.#error !== undefined) throw (this.#error as { err: unknown }).err;
      if (this.#ended) return { done: true, value: undefined };
      await new Promise<void>((resolve) => (this.#wake = resolve));
    }
  }

  async return(): Promise<IteratorResult<T>> {
    return { done: true, value: undefined };
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}

/** Reason the request side gets once the call is over (one shared instance: nothing reads it). */
let callEndedError: ConnectError | undefined;
// Created on first use: a ConnectError at module load would pull in undici's Headers at start-up.
const callEnded = (): ConnectError => (callEndedError ??= new ConnectError("call ended", Code.Canceled));

const RESPONSE_HEADERS: http2.OutgoingHttpHeaders = { "content-type": PROTO_CONTENT_TYPE };
const OK_TRAILERS: http2.OutgoingHttpHeaders = { "grpc-status": "0" };

/**
 * An ordinary object with `headers`' own properties. Node's header object is a null-prototype
 * dictionary; copied key by key, calls with the same headers share one compact shape. Spread
 * takes V8's slow path for a dictionary: 1.4 µs against 0.33 µs for eight headers, and in a
 * unary-call profile the context's constructor went from ~3 µs per call to ~0.7.
 */
function compactCopy(headers: http2.IncomingHttpHeaders): http2.IncomingHttpHeaders {
  const copy: http2.IncomingHttpHeaders = {};
  const keys = Object.keys(headers);
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    // Assigning "__proto__" would set the prototype instead (a client may send such a header).
    if (k === "__proto__") Object.defineProperty(copy, k, { value: headers[k], enumerable: true, writable: true, configurable: true });
    else copy[k] = headers[k];
  }
  return copy;
}

/**
 * The HandlerContext of a direct call: what connect's `createHandlerContext` gives, built on
 * demand. Headers objects exist only if a handler looks at them, and the signal only if someone
 * asks for it (the deadline, the client going away, plugin shutdown and the end of the call then
 * abort it exactly as connect's linked signal does); a plain unary call allocates neither. Each wait
 * on the handler races the call's release ({@link untilReleased}), and a call with a `grpc-timeout`
 * arms the deadline's timer while it waits.
 */
class DirectContext implements HandlerContext {
  readonly method: DescMethod;
  readonly service: DescService;
  readonly requestMethod = "POST";
  readonly protocolName = "grpc";
  ended = false;
  /**
   * The request's headers, what `requestHeader` and `url` are made of on first use: a copy, since
   * Node's header object (null prototype) is a dictionary about three times the size, and every
   * open stream would keep it.
   */
  readonly #headers: http2.IncomingHttpHeaders;
  readonly #encrypted: boolean;
  readonly #deadlineAt: number | undefined;
  readonly #shutdown: AbortSignal | undefined;
  #requestHeader: Headers | undefined;
  #responseHeader: Headers | undefined;
  #responseTrailer: Headers | undefined;
  #controller: AbortController | undefined;
  /** The deadline's timer, armed by the first of the signal and {@link watch}. */
  #timer: NodeJS.Timeout | undefined;
  #onShutdown: (() => void) | undefined;
  /** Set when the call was released before its end: the client went away or the deadline passed. */
  #over: { reason: unknown } | undefined;
  /** What {@link watch} waits on now; rejected with the reason should the call be released. */
  #watcher: Race<unknown> | undefined;
  #endReason: unknown;
  #values: ContextValues | undefined;

  constructor(
    method: DescMethod,
    headers: http2.IncomingHttpHeaders,
    encrypted: boolean,
    timeoutMs: number | undefined,
    shutdown: AbortSignal | undefined,
    values: ContextValues | undefined,
  ) {
    this.method = method;
    this.service = method.parent;
    this.#headers = compactCopy(headers);
    this.#encrypted = encrypted;
    this.#deadlineAt = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    this.#shutdown = shutdown;
    this.#values = values;
  }

  /** Made on first use: few handlers read context values, and every open stream would hold them. */
  get values(): ContextValues {
    return (this.#values ??= createContextValues());
  }

  readonly timeoutMs = (): number | undefined => (this.#deadlineAt === undefined ? undefined : this.#deadlineAt - Date.now());

  /** As connect-node makes it (a normalised URL: no default port). */
  get url(): string {
    return new URL(this.#headers[":path"] ?? "", `${this.#encrypted ? "https" : "http"}://${this.#headers[":authority"] ?? "localhost"}`).toString();
  }

  get requestHeader(): Headers {
    return (this.#requestHeader ??= webHeaders(this.#headers));
  }

  get responseHeader(): Headers {
    return (this.#responseHeader ??= new Headers({ "content-type": PROTO_CONTENT_TYPE }));
  }

  get responseTrailer(): Headers {
    return (this.#responseTrailer ??= new Headers({ "grpc-status": "0" }));
  }

  get signal(): AbortSignal {
    return (this.#controller ??= this.#link()).signal;
  }

  #link(): AbortController {
    const ac = (this.#controller = new AbortController());
    if (this.ended) {
      ac.abort(this.#endReason);
      return ac;
    }
    if (this.#over !== undefined) {
      ac.abort(this.#over.reason);
      return ac;
    }
    const shutdown = this.#shutdown;
    if (shutdown?.aborted) {
      ac.abort(shutdown.reason);
      return ac;
    }
    if (shutdown !== undefined) {
      // Only the signal: the deadline's timer also ends a call whose handler ignores it.
      this.#onShutdown = () => {
        this.#onShutdown = undefined;
        const c = this.#controller;
        if (c !== undefined && !c.signal.aborted) c.abort(shutdown.reason);
      };
      shutdown.addEventListener("abort", this.#onShutdown, { once: true });
    }
    this.#armDeadline();
    return ac;
  }

  /** Arm the deadline's timer, once. A deadline beyond what a Node timer takes is waited for in steps. */
  #armDeadline(): void {
    if (this.#timer !== undefined || this.#deadlineAt === undefined || this.ended || this.#over !== undefined) return;
    const left = this.#deadlineAt - Date.now();
    if (left <= 0) this.#release(new ConnectError("the operation timed out", Code.DeadlineExceeded));
    else
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.#armDeadline();
      }, timerDelayMs(left));
  }

  #abort(reason: unknown): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#onShutdown !== undefined) this.#shutdown?.removeEventListener("abort", this.#onShutdown);
    this.#onShutdown = undefined;
    const ac = this.#controller;
    if (ac !== undefined && !ac.signal.aborted) ac.abort(reason);
  }

  /** The client went away or the deadline passed: whatever the handler does, the call is over. */
  #release(reason: unknown): void {
    if (this.ended || this.#over !== undefined) return;
    this.#over = { reason };
    this.#abort(reason);
    const w = this.#watcher;
    this.#watcher = undefined;
    w?.reject(reason);
  }

  /**
   * Have `race` rejected with the reason should the call be released before it settles (at once if
   * it was already); the deadline's timer runs from now on.
   */
  watch(race: Race<unknown>): void {
    if (this.#over !== undefined) {
      race.reject(this.#over.reason);
      return;
    }
    this.#watcher = race;
    this.#armDeadline();
  }

  /** The client reset the stream or the connection closed. */
  requestClosed(reason: unknown): void {
    this.#release(reason);
  }

  /** The call is over (connect aborts the context's signal then too). */
  end(reason: unknown): void {
    this.ended = true;
    this.#endReason = reason;
    this.#watcher = undefined;
    this.#abort(reason);
  }

  nodeResponseHeaders(): http2.OutgoingHttpHeaders {
    return this.#responseHeader === undefined ? RESPONSE_HEADERS : nodeHeaders(this.#responseHeader);
  }

  nodeTrailers(): http2.OutgoingHttpHeaders {
    return this.#responseTrailer === undefined ? OK_TRAILERS : nodeHeaders(this.#responseTrailer);
  }
}

/**
 * One wait of a call on its handler (or its request), settled by whichever comes first: the
 * awaited value, or the call being released. Once settled it drops its resolvers, so a handler
 * that settles late (or never) keeps nothing of the call alive.
 */
class Race<T> {
  #settle: [(value: T) => void, (reason: unknown) => void] | undefined;

  constructor(resolve: (value: T) => void, reject: (reason: unknown) => void) {
    this.#settle = [resolve, reject];
  }

  readonly resolve = (value: T): void => {
    const s = this.#settle;
    this.#settle = undefined;
    s?.[0](value);
  };

  readonly reject = (reason: unknown): void => {
    const s = this.#settle;
    this.#settle = undefined;
    s?.[1](reason);
  };
}

/**
 * `value`, unless the call is released first (the client reset the stream, the deadline passed):
 * then the release's reason. A handler may ignore its signal; grpc-go closes the stream at once
 * all the same and drops the handler's later answer, and so does this (at a deadline this answers
 * DeadlineExceeded, as connect does, where grpc-go resets the stream with CANCEL). A late rejection is
 * handled here (nothing unhandled). Values that are not promises are returned as they are.
 */
function untilReleased<T>(value: T | PromiseLike<T>, context: DirectContext): T | Promise<T> {
  if (typeof (value as { then?: unknown } | null | undefined)?.then !== "function") return value as T;
  let race!: Race<T>;
  const promise = new Promise<T>((resolve, reject) => (race = new Race(resolve, reject)));
  context.watch(race as Race<unknown>);
  (value as PromiseLike<T>).then(race.resolve, race.reject);
  return promise;
}

/** Connect's check that a unary or server-streaming call got exactly one request. */
async function single<T>(it: AsyncIterator<T>, kind: string): Promise<T> {
  const first = await it.next();
  if (first.done === true) throw new ConnectError(`protocol error: missing input message for ${kind} method`, Code.Unimplemented);
  const second = await it.next();
  if (second.done !== true) throw new ConnectError(`protocol error: received extra input message for ${kind} method`, Code.Unimplemented);
  return first.value;
}

/** Write protobuf bytes as one gRPC message; small ones copied behind their prefix, big ones not. */
function writeEncoded(stream: http2.ServerHttp2Stream, bytes: Uint8Array): boolean {
  if (bytes.byteLength <= COPY_LIMIT) {
    const buf = Buffer.allocUnsafe(5 + bytes.byteLength);
    writeEnvelopePrefix(buf, 0, bytes.byteLength);
    buf.set(bytes, 5);
    return stream.write(buf);
  }
  const prefix = Buffer.allocUnsafe(5);
  writeEnvelopePrefix(prefix, 0, bytes.byteLength);
  stream.cork();
  stream.write(prefix);
  const ok = stream.write(bytes);
  stream.uncork();
  return ok;
}

/** Resolves when `stream` can take more data, or when it closed (then false). */
function writable(stream: http2.ServerHttp2Stream): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (ok: boolean) => () => {
      stream.off("drain", onDrain);
      stream.off("close", onClose);
      stream.off("error", onClose);
      resolve(ok);
    };
    const onDrain = done(true);
    const onClose = done(false);
    stream.on("drain", onDrain);
    stream.on("close", onClose);
    stream.on("error", onClose);
  });
}

function ignoreError(): void {}

class StreamClosedError extends ConnectError {
  constructor() {
    super("http/2 stream closed while writing the response", Code.Canceled);
  }
}

/** Routes for the direct path, collected while the plugin's services are registered. */
export class DirectPath {
  readonly #routes = new Map<string, Route>();
  readonly #served = new WeakSet<http2.ServerHttp2Stream>();
  readonly #options: DirectPathOptions;

  constructor(options: DirectPathOptions = {}) {
    this.#options = options;
  }

  /**
   * Remember `implementation`'s methods for the direct path (what `ConnectRouter.service` gets).
   * Methods registered with per-service options (interceptors, limits, ...) are left to connect.
   */
  addService(service: DescService, implementation: object, options: object | undefined): void {
    if (options !== undefined && Object.keys(options).length > 0) return;
    for (const method of service.methods) {
      const fn = (implementation as Record<string, unknown>)[method.localName];
      if (typeof fn === "function") this.#routes.set(`/${service.typeName}/${method.name}`, { method, impl: fn.bind(implementation) as AnyImpl });
    }
  }

  /** Remember one method's implementation (what `ConnectRouter.rpc` gets). */
  addMethod(method: DescMethod, impl: unknown, options: object | undefined): void {
    if (options !== undefined && Object.keys(options).length > 0) return;
    if (typeof impl === "function") this.#routes.set(`/${method.parent.typeName}/${method.name}`, { method, impl: impl as AnyImpl });
  }

  /**
   * Serve the call on `stream` if the direct path handles it; false leaves it to connect. The
   * plugin server calls this for every new stream, before Node builds its compatibility
   * request/response objects (which the direct path does not need); `compat` is given when it
   * comes from {@link handle}, and then answers through the response object, which owns the
   * stream's trailers. A stream is served once, whichever entry sees it first.
   */
  handleStream(
    stream: http2.ServerHttp2Stream,
    h: http2.IncomingHttpHeaders,
    compat?: { req: http2.Http2ServerRequest; res: http2.Http2ServerResponse },
  ): boolean {
    const req = compat?.req;
    if (this.#served.has(stream)) return true;
    // Answered Internal before routing, as grpc-go does (connect: InvalidArgument).
    if (h["grpc-timeout"] !== undefined && answerMalformedTimeout(stream, h, compat?.res)) {
      this.#served.add(stream);
      return true;
    }
    if (h[":method"] !== "POST") return false;
    const path = h[":path"];
    const route = path === undefined ? undefined : this.#routes.get(path);
    if (route === undefined) return false;
    const contextValues = this.#options.contextValues;
    // connect's contextValues hook takes the compatibility request: only the request entry has one.
    if (contextValues !== undefined && req === undefined) return false;
    const type = h["content-type"];
    if (type === undefined) return false;
    const m = contentTypeRegExp.exec(type);
    if (m === null || m[1] === "json") return false;
    const enc = h["grpc-encoding"];
    if (enc !== undefined && enc !== "identity") return false;
    let timeoutMs: number | undefined;
    const t = h["grpc-timeout"];
    if (t !== undefined) {
      const ms = parseGrpcTimeout(String(t));
      // Over the adapter's maxTimeoutMs: connect answers that, as configured.
      if (typeof ms !== "number" || ms > (this.#options.maxTimeoutMs ?? Number.MAX_SAFE_INTEGER)) return false;
      timeoutMs = ms;
    }
    this.#served.add(stream);
    // Made here, not in #serve: the headers would stay in that suspended frame for the whole call.
    const context = new DirectContext(
      route.method,
      h,
      stream.session?.encrypted === true,
      timeoutMs,
      this.#options.shutdownSignal,
      req === undefined ? undefined : contextValues?.(req),
    );
    // Whatever fails while answering ends the stream (the caller gets Internal): a rejection left
    // unhandled would end the plugin process.
    this.#serve(route, stream, context, compat?.res).catch(() => {
      if (!stream.destroyed) stream.close(NGHTTP2_INTERNAL_ERROR);
    });
    return true;
  }

  /** Serve `req` if it is a call the direct path handles; false leaves it to connect. */
  handle(req: http2.Http2ServerRequest, res: http2.Http2ServerResponse): boolean {
    const stream = (req as { stream?: http2.ServerHttp2Stream }).stream;
    return stream !== undefined && this.handleStream(stream, req.headers, { req, res });
  }

  async #serve(
    route: Route,
    stream: http2.ServerHttp2Stream,
    context: DirectContext,
    res: http2.Http2ServerResponse | undefined,
  ): Promise<void> {
    const { method, impl } = route;
    const requests = new RequestMessages<unknown>(stream, method.input, this.#options.readMaxBytes ?? 0xffffffff);
    // Stream errors (a reset, the session failing) end in "close" below; without a listener an
    // "error" event would be thrown (Node's compatibility objects, when present, listen too).
    stream.on("error", ignoreError);
    stream.once("close", () => {
      if (context.ended) return;
      // The client reset the stream or the connection went away: like connect, with the HTTP/2 code.
      const reason = h2ResetError(stream.rstCode ?? 0);
      const aborted = reason ?? new ConnectError("request aborted", Code.Canceled);
      // Formatted now: an unformatted stack keeps every frame's receiver, this stream among them,
      // for as long as a handler keeps the reason (its signal's, or its context's).
      void aborted.stack;
      context.requestClosed(reason);
      requests.close(aborted);
    });
    const output = method.output;

    let headersSent = false;
    const sendHeaders = () => {
      if (headersSent) return;
      headersSent = true;
      if (res !== undefined) {
        res.writeHead(200, context.nodeResponseHeaders());
        return;
      }
      if (stream.destroyed || stream.closed) return;
      // Trailers are read when Node asks for them, after the handler's end set the status.
      stream.respond({ ":status": 200, ...context.nodeResponseHeaders() }, { waitForTrailers: true });
      stream.once("wantTrailers", () => {
        if (!stream.destroyed) stream.sendTrailers(context.nodeTrailers());
      });
    };
    /** Write one message; resolves when the next may be written. */
    const write = async (message: unknown): Promise<void> => {
      sendHeaders();
      if (stream.destroyed || stream.closed) throw new StreamClosedError();
      const frame = wireFrameOf(message);
      let ok: boolean;
      if (frame !== undefined) {
        const parts = frame.parts;
        const written = frame.written;
        // The last part's callback comes once all of the message has been written to the socket.
        const onWritten = written === undefined ? undefined : (err?: Error | null) => err ? undefined : written();
        if (parts.length === 1) ok = stream.write(parts[0], onWritten);
        else {
          stream.cork();
          ok = true;
          for (let i = 0; i < parts.length; i++) ok = stream.write(parts[i], i === parts.length - 1 ? onWritten : undefined);
          stream.uncork();
        }
      } else {
        // The fast encoder takes the handler's init shape as it is and writes behind room for the
        // prefix; what it declines is created and goes to toBinary.
        let framed: Uint8Array | undefined;
        let bytes: Uint8Array | undefined;
        try {
          framed = encodeBinary(output, message, 5);
          if (framed === undefined) bytes = toBinary(output, create(output, message as never));
        } catch (e) {
          // As connect reports it: the host learns which field could not be encoded.
          throw new ConnectError(`serialize binary: ${e instanceof Error ? e.message : String(e)}`, Code.Internal);
        }
        if (framed !== undefined) {
          writeEnvelopePrefix(framed, 0, framed.length - 5);
          ok = stream.write(framed);
        } else ok = writeEncoded(stream, bytes!);
      }
      if (!ok && !(await writable(stream))) throw new StreamClosedError();
    };

    let error: unknown;
    let iter: AsyncIterator<unknown> | undefined;
    try {
      switch (method.methodKind) {
        case "unary": {
          const input = await untilReleased(single(requests, "unary"), context);
          await write(await untilReleased(impl(input, context), context));
          break;
        }
        case "client_streaming":
          await write(await untilReleased(impl(requests, context), context));
          break;
        case "server_streaming":
        case "bidi_streaming": {
          const input = method.methodKind === "server_streaming" ? await untilReleased(single(requests, "server-streaming"), context) : requests;
          iter = (impl(input, context) as AsyncIterable<unknown>)[Symbol.asyncIterator]();
          let r: IteratorResult<unknown> | undefined;
          for (;;) {
            r = await untilReleased(iter.next(), context);
            if (r.done === true) break;
            await write(r.value);
            // While this call waits for the next message, its frame would otherwise keep the last
            // one (a TaskStats sample: ~4 KiB per open stream) alive.
            r = undefined;
          }
          iter = undefined;
          break;
        }
      }
    } catch (e) {
      error = e;
    } finally {
      // Writing failed or the call ended early: end the handler's stream (its finally blocks run).
      if (iter?.return !== undefined) iter.return().then(undefined, () => {});
    }
    context.end(error);
    requests.close(callEnded);
    if (stream.destroyed || stream.closed) return;
    if (error !== undefined) {
      // Handlers registered without the server runtime reach here with their own messages too.
      const status =
        error instanceof ConnectError ? sendableStatus(error) : new ConnectError("internal error", Code.Internal, undefined, undefined, error);
      setTrailerStatus(context.responseTrailer, status);
      // Encoded as the spec says rather than as connect does (see grpcMessageValue).
      context.responseTrailer.set("grpc-message", grpcMessageValue(status.rawMessage));
    }
    sendHeaders();
    if (res !== undefined) {
      res.addTrailers(context.nodeTrailers());
      res.end();
    } else stream.end();
  }
}
