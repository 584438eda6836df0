/**
 * Streaming calls whose responses are handed on as wire frames instead of messages: for relays
 * (a driver forwarding exec output from its executor) that pass responses through unchanged. The
 * response body is split into gRPC messages without copying (each frame lists views of the received
 * HTTP/2 chunks, 5-byte prefix included) and nothing is decoded; status, trailers, cancellation and
 * failures behave like the generated clients' (ClientRuntime's error normalisation included).
 */
import type { DescMethodBiDiStreaming, DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import type { ClientRuntime } from "./client-runtime.js";
import { h2Call, pluginSessions, type RawFrame } from "./h2-call.js";

export type { RawFrame };

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
  const sessions = pluginSessions(runtime.transport);
  if (sessions === undefined) return undefined;
  return {
    [Symbol.asyncIterator]: () => {
      const gen = h2Call(sessions, method, requests, { signal: options.signal });
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
