/**
 * HTTP/2 flow-control windows of streams to plugins. Kept apart from the session manager that
 * applies them (sessions.ts) so code that only needs the numbers — a plugin sizing its relay —
 * does not load connect-node's transports at start-up.
 */

/** Receive window of each stream (HTTP/2 SETTINGS_INITIAL_WINDOW_SIZE). */
export const PLUGIN_STREAM_WINDOW = 1024 * 1024;
/** Receive window of the whole connection. */
export const PLUGIN_CONNECTION_WINDOW = 16 * 1024 * 1024;
/**
 * HTTP/2 session memory (MiB) of connections to plugins, as servePlugin gives its side. Node's
 * default of 10 counts queued outgoing data: a request of ~8 MiB or more failed with Internal
 * NGHTTP2_ENHANCE_YOUR_CALM instead of reaching the plugin (which answers ResourceExhausted for
 * one over its limit).
 */
export const PLUGIN_SESSION_MEMORY_MIB = 128;
