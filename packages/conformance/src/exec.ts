import type { MessageInitShape } from "@bufbuild/protobuf";
import type { DriverClient } from "@nomadkit/client";
import type { ExecTaskStreamingRequestSchema } from "@nomadkit/protocol/driver";
import { anySignal } from "@nomadkit/client/runtime";

/** A request of ExecTaskStreaming in init form. */
export type ExecRequest = MessageInitShape<typeof ExecTaskStreamingRequestSchema>;

/** What one ExecTaskStreaming call produced, and every rule of the exec protocol it broke (docs/driver-guide.md §6). */
export interface ExecOutcome {
  /** Everything received on stdout, in order. */
  stdout: Buffer;
  /** Everything received on stderr, in order. */
  stderr: Buffer;
  /** Exit code of the (first) exited message. */
  exitCode: number | undefined;
  /** Number of `exited: true` messages (must be 1). */
  exitedCount: number;
  /** Number of `stdout {close: true}` markers (must be 1). */
  stdoutCloses: number;
  /** Number of `stderr {close: true}` markers (1 without a tty). */
  stderrCloses: number;
  /** Protocol violations seen in the response stream. */
  violations: string[];
  /**
   * The error the stream ended with, if any. When `timeoutMs` passed first, an error with code
   * DeadlineExceeded (4) that says so: a stream the plugin never ended is not the caller's cancellation.
   */
  error: unknown;
}

/** A stream that outlived its `timeoutMs`: DeadlineExceeded, as a call's own deadline is in `@nomadkit/client`. */
class ExecTimeoutError extends Error {
  readonly code = 4;
  constructor(timeoutMs: number, cause: unknown) {
    super(`Driver.ExecTaskStreaming: not over within ${timeoutMs} ms (the call's timeout)`, { cause });
    this.name = "ExecTimeoutError";
  }
}

/**
 * Runs one ExecTaskStreaming call the way Nomad's client does: sends `requests` in order, then
 * keeps its request side open (the host never half-closes) until the plugin ends the call.
 * Checks the response rules on the way: close markers at most once and no data after them,
 * exactly one exited message carrying a result, nothing after it.
 *
 * @example
 * ```ts
 * const o = await runExecStream(plugin.driver, [{ setup: { taskId, command: ["echo", "hi"] } }], { timeoutMs: 30_000 });
 * // o.stdout.toString() === "hi\n", o.exitCode === 0, o.violations.length === 0
 * ```
 */
export async function runExecStream(
  driver: DriverClient,
  requests: readonly ExecRequest[],
  options: { timeoutMs: number; signal?: AbortSignal | undefined },
): Promise<ExecOutcome> {
  let release!: () => void;
  const finished = new Promise<void>((r) => (release = r));
  async function* input(): AsyncGenerator<ExecRequest> {
    for (const r of requests) yield r;
    await finished;
  }
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  const o: ExecOutcome = {
    stdout: Buffer.alloc(0),
    stderr: Buffer.alloc(0),
    exitCode: undefined,
    exitedCount: 0,
    stdoutCloses: 0,
    stderrCloses: 0,
    violations: [],
    error: undefined,
  };
  const violate = (v: string) => {
    if (!o.violations.includes(v)) o.violations.push(v);
  };
  const timeout = AbortSignal.timeout(options.timeoutMs);
  const signals = [timeout];
  if (options.signal) signals.push(options.signal);
  try {
    for await (const m of driver.execTaskStreaming(input(), { signal: anySignal(signals) })) {
      if (o.exitedCount > 0) violate("a message was sent after the exited message");
      if (m.stdout) {
        if (m.stdout.data.length > 0) {
          if (o.stdoutCloses > 0) violate("stdout data after stdout close");
          out.push(Buffer.from(m.stdout.data));
        }
        if (m.stdout.close) o.stdoutCloses++;
      }
      if (m.stderr) {
        if (m.stderr.data.length > 0) {
          if (o.stderrCloses > 0) violate("stderr data after stderr close");
          err.push(Buffer.from(m.stderr.data));
        }
        if (m.stderr.close) o.stderrCloses++;
      }
      if (m.exited) {
        o.exitedCount++;
        if (o.exitedCount === 1) {
          if (!m.result) violate("the exited message has no result");
          o.exitCode = m.result?.exitCode ?? 0;
        }
      } else if (m.result) {
        violate("a result was sent without exited: true");
      }
    }
  } catch (e) {
    // The client reports any abort as the caller's cancellation; the timeout is this function's own.
    o.error = timeout.aborted && options.signal?.aborted !== true ? new ExecTimeoutError(options.timeoutMs, e) : e;
  } finally {
    release();
  }
  o.stdout = Buffer.concat(out);
  o.stderr = Buffer.concat(err);
  if (o.exitedCount > 1) violate(`${o.exitedCount} exited messages (exactly one allowed)`);
  if (o.stdoutCloses > 1) violate(`stdout close sent ${o.stdoutCloses} times`);
  if (o.stderrCloses > 1) violate(`stderr close sent ${o.stderrCloses} times`);
  return o;
}
