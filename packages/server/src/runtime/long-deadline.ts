/**
 * A call's deadline beyond what a Node timer takes, on connect's path (compressed or JSON
 * requests, or adapter options the direct path does not implement). connect arms one `setTimeout`
 * with the whole `grpc-timeout`, and Node fires a delay above 2^31-1 ms (~24.8 days) after 1 ms:
 * such a call was aborted as DeadlineExceeded at once. The direct path waits in steps
 * (`timer-delay.ts`); for connect the header is taken off before connect reads it, and the deadline
 * is kept here in steps instead.
 */
import type * as http2 from "node:http2";
import { parseGrpcTimeout } from "./grpc-timeout.js";
import { MAX_TIMER_DELAY_MS, timerDelayMs } from "./timer-delay.js";

/** http2.constants.NGHTTP2_CANCEL, without loading node:http2 here. */
const NGHTTP2_CANCEL = 8;

/**
 * If `req`'s grpc-timeout is longer than a Node timer takes (and within `maxTimeoutMs`, which
 * connect answers itself), removes the header and closes the stream with RST_STREAM CANCEL when the
 * deadline passes, as grpc-go's server does at a deadline (http2_server.go, operateHeaders): the
 * handler's signal then aborts (Canceled), and the client reports DeadlineExceeded by its own clock.
 * Handlers of such a call see no `timeoutMs()` (it is weeks away).
 *
 * @example
 * ```ts
 * holdLongDeadline(req, options.maxTimeoutMs);
 * connect(req, res);
 * ```
 */
export function holdLongDeadline(
  req: http2.Http2ServerRequest,
  maxTimeoutMs: number | undefined,
): void {
  const value = req.headers["grpc-timeout"];
  const stream = req.stream as http2.ServerHttp2Stream | undefined;
  if (value === undefined || stream === undefined) return;
  const ms = parseGrpcTimeout(String(value));
  if (
    typeof ms !== "number" ||
    ms <= MAX_TIMER_DELAY_MS ||
    ms > (maxTimeoutMs ?? Infinity)
  )
    return;
  delete req.headers["grpc-timeout"];
  const deadlineAt = Date.now() + ms;
  let timer: NodeJS.Timeout | undefined;
  const arm = (): void => {
    const left = deadlineAt - Date.now();
    if (left > 0) timer = setTimeout(arm, timerDelayMs(left));
    else if (!stream.destroyed) stream.close(NGHTTP2_CANCEL);
  };
  arm();
  stream.once("close", () => clearTimeout(timer));
}
