/**
 * Which call a stream request is for, told to the session manager through the request's headers:
 * connect-node hands a session manager no signal and only closes a stream it was given, so a stream
 * the manager holds (until a new connection's HTTP/2 handshake is done) must learn from the call
 * itself that it is over. No connect-node imports: the direct call path (h2-call.ts), loaded by a
 * starting plugin, uses this, and connect-node's transports load only when a call needs them.
 */
import type * as http2 from "node:http2";

/** The request header carrying a call's mark; taken off before the stream is opened, never sent. */
const CALL_HEADER = "nomadkit-internal-call";
const callSignals = new Map<string, AbortSignal>();
let lastCall = 0;

/** The session managers that take the mark off ({@link takeCallMark}): only their requests are marked. */
export const markingManagers = new WeakSet<object>();

/**
 * Marks `headers` (a request's, before the session manager gets them) as those of a call that is
 * over when `signal` aborts (cancelled, past its deadline): a stream the manager holds for it then
 * stops waiting and is closed. Call the returned function once the stream is open or the call is over.
 *
 * @internal
 */
export function markCall(
  headers: http2.OutgoingHttpHeaders | Headers,
  signal: AbortSignal,
): () => void {
  const token = String(++lastCall);
  callSignals.set(token, signal);
  if (headers instanceof Headers) headers.set(CALL_HEADER, token);
  else headers[CALL_HEADER] = token;
  return () => callSignals.delete(token);
}

/**
 * The call's signal from `headers` ({@link markCall}), and the headers without the mark (a copy when
 * it was there).
 *
 * @internal
 */
export function takeCallMark(headers: http2.OutgoingHttpHeaders): {
  headers: http2.OutgoingHttpHeaders;
  signal?: AbortSignal;
} {
  const token = headers[CALL_HEADER];
  if (token === undefined) return { headers };
  const { [CALL_HEADER]: _, ...rest } = headers;
  const signal = callSignals.get(String(token));
  return signal === undefined ? { headers: rest } : { headers: rest, signal };
}
