import type { Logger } from "../log/index.js";

/** Which of the plugin's own streams a chunk came from (values match `plugin.StdioData.Channel`). */
export const STDOUT = 1;
export const STDERR = 2;

/** One chunk the plugin wrote to its stdout or stderr. */
export interface StdioChunk {
  channel: typeof STDOUT | typeof STDERR;
  data: Uint8Array;
}

type WriteFn = typeof process.stdout.write;

// Until a host opens GRPCStdio, and per GRPCStdio stream its host does not read, keep at most this
// much (the newest) so early output is not lost and memory stays bounded.
const BACKLOG_LIMIT = 1 << 20;

/**
 * Takes over `process.stdout` and `process.stderr` so that after the handshake nothing but the
 * handshake line ever reaches file descriptor 1:
 * - stdout writes (console.log, ...) become log lines on stderr (`@module` `<name>.stdout`) and
 *   STDOUT chunks on GRPCStdio;
 * - stderr writes (console.error, ...) still reach stderr, where the host logs them, and are also
 *   STDERR chunks on GRPCStdio.
 * The logger itself writes to fd 2 directly, so log lines are not echoed into GRPCStdio.
 */
export class StdioCapture {
  private readonly subscribers = new Set<(c: StdioChunk | null) => void>();
  private backlog: StdioChunk[] = [];
  private backlogBytes = 0;
  private partialLine = "";
  private originalStdout?: WriteFn;
  private originalStderr?: WriteFn;
  private stderrGone = false;
  private stdoutLog: Logger;

  constructor(logger: Logger) {
    this.stdoutLog = logger.named("stdout");
  }

  /** Log captured stdout lines with `logger` from now on. */
  useLogger(logger: Logger): void {
    this.flushPartial();
    this.stdoutLog = logger.named("stdout");
  }

  install(): void {
    if (this.originalStdout) return;
    const stdout = process.stdout;
    const stderr = process.stderr;
    this.originalStdout = stdout.write;
    this.originalStderr = stderr.write;
    const origErr = this.originalStderr;
    // The host gone (an agent restarting) makes writes to fd 2 fail with EPIPE, an 'error' event
    // that would end the process: the plugin lives on for the host that reattaches, so later
    // stderr writes only reach GRPCStdio.
    stderr.on("error", () => (this.stderrGone = true));
    stdout.write = ((
      chunk: unknown,
      encoding?: unknown,
      cb?: unknown,
    ): boolean => {
      const buf = toBuffer(chunk, encoding);
      this.logStdout(buf);
      this.push({ channel: STDOUT, data: buf });
      callLater(encoding, cb);
      return true;
    }) as WriteFn;
    stderr.write = ((
      chunk: unknown,
      encoding?: unknown,
      cb?: unknown,
    ): boolean => {
      const buf = toBuffer(chunk, encoding);
      this.push({ channel: STDERR, data: buf });
      if (this.stderrGone || stderr.destroyed) {
        callLater(encoding, cb);
        return true;
      }
      return (
        origErr as (c: unknown, e?: unknown, cb?: unknown) => boolean
      ).call(stderr, chunk, encoding, cb);
    }) as WriteFn;
  }

  /** Restores the original writers and flushes a pending partial stdout line to the log. */
  uninstall(): void {
    this.flushPartial();
    if (this.originalStdout) process.stdout.write = this.originalStdout;
    if (this.originalStderr) process.stderr.write = this.originalStderr;
    this.originalStdout = this.originalStderr = undefined;
  }

  /** Ends all GRPCStdio subscriptions. */
  close(): void {
    this.flushPartial();
    for (const s of this.subscribers) s(null);
    this.subscribers.clear();
  }

  private logStdout(buf: Buffer): void {
    const text = this.partialLine + buf.toString("utf8");
    const lines = text.split("\n");
    this.partialLine = lines.pop() ?? "";
    for (const line of lines) this.stdoutLog.info(line.replace(/\r$/, ""));
    if (this.partialLine.length > 64 * 1024) this.flushPartial();
  }

  private flushPartial(): void {
    if (this.partialLine) this.stdoutLog.info(this.partialLine);
    this.partialLine = "";
  }

  private push(chunk: StdioChunk): void {
    if (chunk.data.length === 0) return;
    if (this.subscribers.size === 0) {
      this.backlog.push(chunk);
      this.backlogBytes += chunk.data.length;
      while (this.backlogBytes > BACKLOG_LIMIT && this.backlog.length > 1) {
        this.backlogBytes -= this.backlog.shift()!.data.length;
      }
      return;
    }
    for (const s of this.subscribers) s(chunk);
  }

  /**
   * Yields every chunk written from now on (the first subscriber also gets what was written before
   * anyone listened) until `signal` aborts or {@link close} is called.
   */
  async *subscribe(signal: AbortSignal): AsyncGenerator<StdioChunk> {
    const queue: (StdioChunk | null)[] = [];
    let queuedBytes = 0;
    let wake: (() => void) | undefined;
    const deliver = (c: StdioChunk | null) => {
      queue.push(c);
      if (c !== null) {
        queuedBytes += c.data.length;
        // A host that opened the stream but does not read it (HTTP/2 flow control holds our writes)
        // keeps the newest BACKLOG_LIMIT bytes, as when nobody listens.
        while (queuedBytes > BACKLOG_LIMIT && queue.length > 1 && queue[0] !== null) queuedBytes -= queue.shift()!.data.length;
      }
      wake?.();
    };
    if (this.backlog.length > 0) {
      queue.push(...this.backlog);
      queuedBytes = this.backlogBytes;
      this.backlog = [];
      this.backlogBytes = 0;
    }
    this.subscribers.add(deliver);
    const onAbort = () => deliver(null);
    signal.addEventListener("abort", onAbort);
    try {
      for (;;) {
        if (signal.aborted) return;
        const next = queue.shift();
        if (next === null) return;
        if (next) {
          queuedBytes -= next.data.length;
          yield next;
          continue;
        }
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
    } finally {
      this.subscribers.delete(deliver);
      signal.removeEventListener("abort", onAbort);
    }
  }
}

function toBuffer(chunk: unknown, encoding: unknown): Buffer {
  if (typeof chunk === "string") {
    return Buffer.from(
      chunk,
      typeof encoding === "string" ? (encoding as BufferEncoding) : "utf8",
    );
  }
  if (chunk instanceof Uint8Array) return Buffer.from(chunk); // copy: callers may reuse their buffer
  return Buffer.from(String(chunk));
}

function callLater(encoding: unknown, cb: unknown): void {
  const fn = typeof encoding === "function" ? encoding : cb;
  if (typeof fn === "function") process.nextTick(fn as () => void);
}
