/**
 * The ExecTaskStreaming protocol engine, in Nomad's two forms:
 *
 * - high level ({@link ExecSession}): the driver sees a command, stdin/stdout/stderr streams, resize
 *   events and an abort signal, and returns the exit result; the engine speaks the protocol;
 * - raw ({@link ExecTaskStream}): the driver is handed the message stream as is (after `setup`),
 *   e.g. to forward it to an executor without translating messages.
 *
 * Protocol rules enforced here (docs/driver-guide.md §6): the first request must carry `setup` (else
 * InvalidArgument "first message must be setup"); empty requests are heartbeats and ignored; a
 * second `setup` is InvalidArgument; output is chunked; one close marker per stream after its data;
 * exactly one final `{exited: true, result}`; then OK.
 */
import { Readable, Writable } from "node:stream";
import { finished } from "node:stream/promises";
import { create, isMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  ExecTaskStreamingResponseSchema,
  type ExecTaskStreamingRequest,
  type ExecTaskStreamingRequest_Setup,
  type ExecTaskStreamingResponse,
  type ExitResultSchema,
} from "@nomadkit/protocol/driver";
import { signalNumber } from "../executor/signals.js";
import { OutboundQueue, type Consumed } from "./queue.js";
import { outputMessage } from "./wire.js";
import { RETAINS_CHUNKS, retainChunk } from "./read-buffers.js";
import { TerminalResizes } from "./resize.js";
import { checkProcessStrings } from "../runtime/process-strings.js";
import { holdYoungGenerationSize } from "../runtime/young-generation.js";

/**
 * One interactive exec, high-level form. Write the process output to `stdout`/`stderr` (pipe into
 * them: they apply backpressure from the client's HTTP/2 flow control), read `stdin`, follow
 * `resize`, and stop when `signal` aborts (the client went away). Resolve with the exit result once
 * the output is written; the SDK ends `stdout`/`stderr` (sending their close markers) if you did not.
 */
export interface ExecSession {
  /** Task to exec into (`setup.task_id`). */
  readonly taskId: string;
  /** Executable and arguments (`setup.command`), never empty. */
  readonly command: readonly string[];
  /** Whether a terminal was requested: run under a pty; all output then travels as stdout. */
  readonly tty: boolean;
  /** The client's input; ends when the client closes stdin. */
  readonly stdin: Readable;
  /** Process stdout. `end()` sends the stdout close marker. */
  readonly stdout: Writable;
  /** Process stderr (sent as stdout when `tty`). `end()` sends the stderr close marker. */
  readonly stderr: Writable;
  /** Terminal size requests (the latest is kept; see {@link TerminalResizes}). */
  readonly resize: TerminalResizes;
  /** Aborts when the call is cancelled or fails: kill the process. */
  readonly signal: AbortSignal;
}

/** How an exec'd process ended. */
export interface ExecResult {
  /** Exit status. Ignored when `signal` is set: a process killed by signal N reports 128+N. */
  exitCode: number;
  /** The signal that killed the process (number or name such as "SIGKILL"), if any. */
  signal?: number | string | null | undefined;
  /** The kernel OOM killer ended the process. */
  oomKilled?: boolean | undefined;
}

/**
 * One interactive exec, raw form: the request messages after `setup` (heartbeats included, nothing
 * translated) and a `send` for response messages. The driver owns the protocol from here: send
 * output, the close markers and the final `exited` message, then resolve.
 *
 * @example
 * ```ts
 * // Forward to an executor's ExecStreaming, message for message.
 * async execTaskStreamingRaw(stream) {
 *   for await (const res of executor.execStreaming(stream.withSetup(), { signal: stream.signal })) {
 *     await stream.send(res);
 *   }
 * }
 * ```
 */
export interface ExecTaskStream extends AsyncIterable<ExecTaskStreamingRequest> {
  /** The first message's `setup`. */
  readonly setup: ExecTaskStreamingRequest_Setup;
  /** `setup.task_id`. */
  readonly taskId: string;
  /** `setup.command`. */
  readonly command: readonly string[];
  /** `setup.tty`. */
  readonly tty: boolean;
  /** Aborts when the call is cancelled or fails. */
  readonly signal: AbortSignal;
  /**
   * Send one response. Resolves once the message has been handed to the HTTP/2 stream (so awaiting
   * it applies the client's flow control); rejects if the call has ended.
   */
  send(response: ExecTaskStreamingResponse | MessageInitShape<typeof ExecTaskStreamingResponseSchema>): Promise<void>;
  /** The whole request stream, the original setup message first, as a generator a gRPC client can send as is (for forwarding). */
  withSetup(): AsyncGenerator<ExecTaskStreamingRequest, void, undefined>;
}

/** What serves an exec session: either form; `raw` wins when both are given. */
export interface ExecStreamingHandler {
  /** High-level form. */
  exec?: ((session: ExecSession) => Promise<ExecResult>) | undefined;
  /** Raw form. */
  raw?: ((stream: ExecTaskStream) => Promise<void>) | undefined;
}

/** Options of {@link execStreaming}. */
export interface ExecStreamingOptions {
  /** The call's signal (connect's `context.signal`): aborting it aborts the session. */
  signal?: AbortSignal | undefined;
  /** Largest output payload per response message; bigger writes are split (no copy). Default 1 MiB. */
  maxChunkSize?: number | undefined;
  /**
   * highWaterMark of stdin/stdout/stderr in bytes. Default 64 KiB for stdin and `maxChunkSize` for
   * stdout/stderr, so output that piles up while a message is in flight leaves as one message.
   */
  highWaterMark?: number | undefined;
  /** Check `setup` before anything runs; throw (e.g. NotFound for an unknown task) to refuse. */
  checkSetup?: ((setup: ExecTaskStreamingRequest_Setup) => void | Promise<void>) | undefined;
}

/** Default {@link ExecStreamingOptions.maxChunkSize}. */
export const DEFAULT_EXEC_CHUNK_SIZE = 1024 * 1024;
const DEFAULT_HWM = 64 * 1024;

/**
 * Serve one `ExecTaskStreaming` call: consume `requests`, run `handler`, produce the responses.
 * Use it as the body of a connect bidi handler; `@nomadkit/server`'s driver adapter and the
 * executor both do.
 *
 * @example
 * ```ts
 * const handlers: Partial<DriverHandlers> = {
 *   execTaskStreaming: (requests, ctx) =>
 *     execStreaming(requests, { exec: (s) => runExecCommand({ command: s.command, tty: s.tty }, s) }, { signal: ctx.signal }),
 * };
 * ```
 */
export async function* execStreaming(
  requests: AsyncIterable<ExecTaskStreamingRequest>,
  handler: ExecStreamingHandler,
  options: ExecStreamingOptions = {},
): AsyncGenerator<ExecTaskStreamingResponse, void, undefined> {
  const it = requests[Symbol.asyncIterator]();
  const first = await it.next();
  if (first.done === true || first.value.setup === undefined) {
    throw new ConnectError("first message must be setup", Code.InvalidArgument);
  }
  const setup = first.value.setup;
  if (setup.command.length === 0 || setup.command[0] === "") {
    throw new ConnectError("setup.command must not be empty", Code.InvalidArgument);
  }
  checkProcessStrings(setup.command, (i) => `setup.command[${i}]`);
  await options.checkSetup?.(setup);

  const session = startSession(options.signal);
  try {
    if (handler.raw !== undefined) {
      yield* runRaw(it, first.value, setup, handler.raw, session.ac);
    } else if (handler.exec !== undefined) {
      yield* runHighLevel(it, setup, handler.exec, session.ac, options);
    } else {
      throw new ConnectError("exec is not supported by this driver", Code.Unimplemented);
    }
  } finally {
    session.end();
  }
}

/**
 * Serve a raw exec stream with a high-level handler: what {@link execStreaming} does with `exec`,
 * for a driver that decides per session (e.g. by `stream.tty`) which form to use.
 *
 * @example
 * ```ts
 * execTaskStreamingRaw: (stream) =>
 *   stream.tty ? forwardToSomewhere(stream) : serveExecSession(stream, (s) => runExecCommand({ command: s.command }, s)),
 * ```
 */
export async function serveExecSession(
  stream: ExecTaskStream,
  exec: (session: ExecSession) => Promise<ExecResult>,
  options: Omit<ExecStreamingOptions, "signal" | "checkSetup"> = {},
): Promise<void> {
  const session = startSession(stream.signal);
  try {
    for await (const response of runHighLevel(stream[Symbol.asyncIterator](), stream.setup, exec, session.ac, options)) {
      await stream.send(response);
    }
  } finally {
    session.end();
  }
}

/** A session's abort controller, following the call's signal, and its hold on the young generation. */
function startSession(outer: AbortSignal | undefined): { ac: AbortController; end: () => void } {
  const ac = new AbortController();
  const onOuterAbort = () => ac.abort(outer?.reason);
  if (outer?.aborted) onOuterAbort();
  else outer?.addEventListener("abort", onOuterAbort, { once: true });
  // Streaming output would grow it for good (see young-generation.ts).
  const releaseYoungGeneration = holdYoungGenerationSize();
  return {
    ac,
    end: () => {
      releaseYoungGeneration();
      outer?.removeEventListener("abort", onOuterAbort);
    },
  };
}

type OutItem =
  | { kind: "data"; field: "stdout" | "stderr"; parts: Uint8Array[]; size: number }
  | { kind: "close"; field: "stdout" | "stderr" }
  | { kind: "exited"; result: MessageInitShape<typeof ExitResultSchema> };

/**
 * A Writable whose writes complete only once the response carrying them has been consumed. The
 * messages hold (retainChunk) the bytes they carry until written, so chunks may come from pooled
 * read buffers.
 */
class OutputWritable extends Writable {
  readonly [RETAINS_CHUNKS] = true;

  constructor(
    private readonly queue: OutboundQueue<OutItem>,
    private readonly dataField: "stdout" | "stderr",
    private readonly closeField: "stdout" | "stderr",
    private readonly maxChunk: number,
    highWaterMark: number,
  ) {
    super({ highWaterMark, decodeStrings: true });
    // A write failing because the call ended must not become an unhandled 'error' event.
    this.on("error", () => {});
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.#push([chunk], callback);
  }

  // Writes that piled up while the previous message was in flight travel together: fewer, larger
  // messages (up to maxChunk), still without copying (each message lists the chunks it carries).
  override _writev(chunks: { chunk: Buffer }[], callback: (error?: Error | null) => void): void {
    this.#push(
      chunks.map((c) => c.chunk),
      callback,
    );
  }

  #push(chunks: Buffer[], callback: (error?: Error | null) => void): void {
    const max = this.maxChunk;
    let parts: Uint8Array[] = [];
    let size = 0;
    let last: OutItem | undefined;
    const flush = () => {
      if (size === 0) return;
      if (last !== undefined) this.queue.push(last);
      last = { kind: "data", field: this.dataField, parts, size };
      parts = [];
      size = 0;
    };
    for (const chunk of chunks) {
      const n = chunk.byteLength;
      let off = 0;
      // Views, not copies: a large write becomes several messages over the same memory.
      while (off < n) {
        const take = Math.min(n - off, max - size);
        const part = off === 0 && take === n ? chunk : chunk.subarray(off, off + take);
        retainChunk(part);
        parts.push(part);
        size += take;
        off += take;
        if (size === max) flush();
      }
    }
    flush();
    // The callback belongs to the last message: the writes complete once all of it was consumed.
    if (last === undefined) callback();
    else this.queue.push(last, callback as Consumed);
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.queue.push({ kind: "close", field: this.closeField }, callback as Consumed);
  }
}

/** End `w` (if the driver did not) and wait until its close marker has been consumed. */
async function finish(w: Writable): Promise<void> {
  if (!w.writableEnded) w.end();
  await finished(w);
}

/**
 * Nomad's exit result: a process killed by signal N reports exit code 128+N.
 *
 * @example
 * ```ts
 * toExitResult({ exitCode: 0, signal: "SIGKILL" }); // { exitCode: 137, signal: 9, oomKilled: false }
 * ```
 */
export function toExitResult(result: ExecResult): MessageInitShape<typeof ExitResultSchema> {
  let sig = 0;
  if (result.signal !== undefined && result.signal !== null && result.signal !== 0 && result.signal !== "") {
    try {
      sig = signalNumber(result.signal);
    } catch {
      sig = 0;
    }
  }
  const exitCode = sig > 0 ? 128 + sig : Number.isInteger(result.exitCode) ? result.exitCode : 0;
  return { exitCode, signal: sig, oomKilled: result.oomKilled === true };
}

async function* runHighLevel(
  it: AsyncIterator<ExecTaskStreamingRequest>,
  setup: ExecTaskStreamingRequest_Setup,
  exec: (session: ExecSession) => Promise<ExecResult>,
  ac: AbortController,
  options: ExecStreamingOptions,
): AsyncGenerator<ExecTaskStreamingResponse, void, undefined> {
  const maxChunk = Math.max(1, options.maxChunkSize ?? DEFAULT_EXEC_CHUNK_SIZE);
  const hwm = options.highWaterMark ?? DEFAULT_HWM;
  const out = new OutboundQueue<OutItem>();
  const onAbort = () => out.close(new Error("exec session aborted"));
  ac.signal.addEventListener("abort", onAbort, { once: true });

  let wantRead: (() => void) | undefined;
  const stdin = new Readable({
    highWaterMark: hwm,
    read() {
      const w = wantRead;
      wantRead = undefined;
      w?.();
    },
  });
  stdin.on("error", () => {});
  const outHwm = options.highWaterMark ?? maxChunk;
  const stdout = new OutputWritable(out, "stdout", "stdout", maxChunk, outHwm);
  const stderr = new OutputWritable(out, setup.tty ? "stdout" : "stderr", "stderr", maxChunk, outHwm);
  const resize = new TerminalResizes();
  let stdinEnded = false;
  const endStdin = () => {
    if (stdinEnded) return;
    stdinEnded = true;
    stdin.push(null);
  };

  let sessionDone = false;
  const failSession = (err: unknown) => {
    if (sessionDone) return;
    out.fail(err);
    if (!ac.signal.aborted) ac.abort(err);
  };

  // Input pump: one request at a time, in order; stdin backpressure pauses reading requests.
  void (async () => {
    while (!sessionDone) {
      const r = await it.next();
      if (r.done === true) {
        // The host never half-closes; if a client does, treat it as closing stdin.
        endStdin();
        return;
      }
      const m = r.value;
      if (m.setup !== undefined) {
        throw new ConnectError("setup may only be sent once, in the first message", Code.InvalidArgument);
      }
      if (m.ttySize !== undefined) resize.push({ height: m.ttySize.height, width: m.ttySize.width });
      if (m.stdin !== undefined) {
        if (m.stdin.data.byteLength > 0 && !stdinEnded) {
          if (!stdin.push(m.stdin.data)) await new Promise<void>((resolve) => (wantRead = resolve));
        }
        if (m.stdin.close) endStdin();
      }
      // A request with nothing set is a heartbeat.
    }
  })().catch(failSession);

  const session: ExecSession = {
    taskId: setup.taskId,
    command: setup.command,
    tty: setup.tty,
    stdin,
    stdout,
    stderr,
    resize,
    signal: ac.signal,
  };
  void (async () => {
    let result: ExecResult;
    try {
      result = await exec(session);
    } finally {
      resize.close();
    }
    await Promise.all([finish(stdout), finish(stderr)]);
    out.push({ kind: "exited", result: toExitResult(result) });
    out.end();
  })().catch(failSession);

  const materialize = (item: OutItem): ExecTaskStreamingResponse => {
    switch (item.kind) {
      case "data":
        // Carries its wire bytes: the output itself is never copied or re-encoded on the way out.
        return outputMessage(item.field, item.parts, item.size);
      case "close":
        return create(ExecTaskStreamingResponseSchema, { [item.field]: { close: true } });
      case "exited":
        return create(ExecTaskStreamingResponseSchema, { exited: true, result: item.result });
    }
  };

  let completed = false;
  try {
    yield* out.drain(materialize);
    completed = !ac.signal.aborted;
  } finally {
    sessionDone = true;
    ac.signal.removeEventListener("abort", onAbort);
    // Consumer gone or session failed: make the driver stop its process.
    if (!completed && !ac.signal.aborted) ac.abort(new ConnectError("exec stream ended", Code.Canceled));
    resize.close();
    if (!completed) {
      stdin.destroy();
      stdout.destroy();
      stderr.destroy();
    }
  }
  // Aborted while waiting for output: report the cancellation rather than a clean OK.
  if (!completed) throw ac.signal.reason ?? new ConnectError("exec session aborted", Code.Canceled);
}

async function* runRaw(
  it: AsyncIterator<ExecTaskStreamingRequest>,
  firstMessage: ExecTaskStreamingRequest,
  setup: ExecTaskStreamingRequest_Setup,
  raw: (stream: ExecTaskStream) => Promise<void>,
  ac: AbortController,
): AsyncGenerator<ExecTaskStreamingResponse, void, undefined> {
  const out = new OutboundQueue<ExecTaskStreamingResponse>();
  const onAbort = () => out.close(new Error("exec session aborted"));
  ac.signal.addEventListener("abort", onAbort, { once: true });
  let consumed = false;
  let inputDone = false;
  const rest = (): AsyncIterator<ExecTaskStreamingRequest> => {
    if (consumed) throw new Error("ExecTaskStream can be iterated only once");
    consumed = true;
    return {
      next: async () => (inputDone ? { done: true, value: undefined } : it.next()),
      // Leaving the loop must not cancel the call: the client never half-closes, and the response
      // side is still open.
      return: async () => {
        inputDone = true;
        return { done: true, value: undefined };
      },
    };
  };
  const stream: ExecTaskStream = {
    setup,
    taskId: setup.taskId,
    command: setup.command,
    tty: setup.tty,
    signal: ac.signal,
    send(response) {
      const msg = isMessage(response, ExecTaskStreamingResponseSchema)
        ? response
        : create(ExecTaskStreamingResponseSchema, response as MessageInitShape<typeof ExecTaskStreamingResponseSchema>);
      return new Promise<void>((resolve, reject) => out.push(msg, (err) => (err ? reject(err) : resolve())));
    },
    [Symbol.asyncIterator]: rest,
    withSetup() {
      // A generator object, because connect's client consumes request streams as one: it calls
      // `throw`, and `[Symbol.asyncIterator]()` again on abort.
      return (async function* () {
        yield firstMessage;
        yield* { [Symbol.asyncIterator]: rest };
      })();
    },
  };
  let sessionDone = false;
  void raw(stream).then(
    () => out.end(),
    (err: unknown) => {
      if (!sessionDone) out.fail(err);
    },
  );
  let completed = false;
  try {
    yield* out.drain((m) => m);
    completed = !ac.signal.aborted;
  } finally {
    sessionDone = true;
    ac.signal.removeEventListener("abort", onAbort);
    if (!completed && !ac.signal.aborted) ac.abort(new ConnectError("exec stream ended", Code.Canceled));
  }
  if (!completed) throw ac.signal.reason ?? new ConnectError("exec session aborted", Code.Canceled);
}
