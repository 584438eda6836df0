/** HTTP/2 header conversion shared by both sides' hand-written HTTP/2 paths. */
import type * as http2 from "node:http2";

/**
 * Node's HTTP/2 headers (or trailers) as WHATWG `Headers`, without pseudo-headers (`:status`,
 * `:path`, ...); repeated headers are appended in order. Used by `rawBidiStream` for response
 * headers and trailers, and by the plugin server's direct path for request headers.
 *
 * @example
 * ```ts
 * stream.on("response", (h) => console.log(webHeaders(h).get("content-type")));
 * ```
 */
export function webHeaders(node: http2.IncomingHttpHeaders): Headers {
  const out = new Headers();
  for (const k in node) {
    if (k.charCodeAt(0) === 58 /* ":" */) continue;
    const v = node[k];
    if (v === undefined) continue;
    if (typeof v === "string") out.append(k, v);
    else for (const e of v) out.append(k, e);
  }
  return out;
}
