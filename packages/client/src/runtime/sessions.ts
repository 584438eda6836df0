/**
 * HTTP/2 sessions to plugins with flow-control windows sized for bulk streams. Node's defaults
 * (64 KiB per stream and per connection) let a plugin send only 64 KiB before waiting for our
 * WINDOW_UPDATE, which caps exec output at one round trip per 64 KiB. 1 MiB per stream keeps a
 * local socket full (a driver relaying its executor's exec output ran faster and with less CPU
 * than with 4 MiB) and bounds what a slow reader makes us hold.
 */
import type * as http2 from "node:http2";
import { Http2SessionManager } from "@connectrpc/connect-node";
import { PLUGIN_CONNECTION_WINDOW, PLUGIN_STREAM_WINDOW } from "./windows.js";

const widened = new WeakSet<http2.Http2Session>();

function ignoreSessionError(): void {}

/**
 * connect-node's session manager with {@link PLUGIN_STREAM_WINDOW} advertised at connect time and
 * the connection window raised to {@link PLUGIN_CONNECTION_WINDOW} on the first stream (the
 * manager does not expose its sessions otherwise).
 */
export class PluginSessionManager extends Http2SessionManager {
  constructor(url: URL | string, options: http2.ClientSessionOptions | http2.SecureClientSessionOptions = {}) {
    super(url, {}, { ...options, settings: { initialWindowSize: PLUGIN_STREAM_WINDOW, ...options.settings } });
  }

  override async request(
    method: string,
    path: string,
    headers: http2.OutgoingHttpHeaders,
    options: Omit<http2.ClientSessionRequestOptions, "signal">,
  ): Promise<http2.ClientHttp2Stream> {
    const stream = await super.request(method, path, headers, options);
    const session = stream.session;
    if (session !== undefined && !widened.has(session)) {
      widened.add(session);
      // connect-node destroys a session with an error when a GOAWAY comes with no stream open,
      // and removes its own listeners when the manager is aborted: a plugin that exits as the
      // host closes (kill()) would crash the host with an unhandled "error" event. Errors reach
      // callers through their streams and the manager's state either way.
      session.on("error", ignoreSessionError);
      try {
        session.setLocalWindowSize(PLUGIN_CONNECTION_WINDOW);
      } catch {
        // session already closing: nothing to widen
      }
    }
    return stream;
  }
}
