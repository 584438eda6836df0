/**
 * The fast path of a bundled plugin's launcher for Nomad's load launches. While an agent starts,
 * Nomad launches every plugin once only to ask PluginInfo and ConfigSchema (after go-plugin's
 * health check), then kills it. Those answers are fixed for a build, so `nomadkit bundle` records
 * them from a real run of the plugin, with the plugin's transport options; the launcher then
 * serves the go-plugin transport itself ({@link startPrelude}), answers exactly those requests
 * from the recording, and loads the plugin's own code only for the first other call, handing the
 * transport (its socket, connection and held streams) over to the plugin's `servePlugin`. A load
 * launch never loads protobuf-es, connect or the driver.
 *
 * Nothing here decodes or encodes protobuf: a request is answered only if its bytes are exactly the
 * recorded request's, and the answer is the recorded response, byte for byte.
 * @module
 */
import type * as http2 from "node:http2";
import { createLineLogger } from "../log/lines.js";
import type { HandshakeConfig } from "./env.js";
import { TRANSPORT_BUILD, ignoreError, leaveTransport, openTransport, type PluginTransport, type StreamListener, type TransportOptions } from "./transport.js";

/** go-plugin's controller call that ends the process after its answer. */
const SHUTDOWN = "/plugin.GRPCController/Shutdown";
/** Streams the host opens on every connection and leaves open: held, without loading the plugin. */
const HELD = new Set(["/plugin.GRPCStdio/StreamStdio", "/plugin.GRPCBroker/StartStream"]);

/** One recorded call: an exact request and the plugin's complete OK response (`@nomadkit/cli` writes them: its bundle/code-cache.ts). */
export interface RecordedCall {
  /** `:path`, e.g. `/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo`. */
  path: string;
  /** The request body as sent (gRPC envelope included), base64. */
  request: string;
  /** Response headers, without pseudo-headers and `date`. */
  headers: Record<string, string>;
  /** The response body (gRPC envelopes), base64. */
  body: string;
  /** Response trailers. */
  trailers: Record<string, string>;
}

/**
 * What `nomadkit bundle` records for the fast path (the `.load.json` file next to the bundle). It
 * ties the three files together: the launcher uses the fast path only when the bundle ends with
 * this build stamp and the fast path has this SHA-256.
 */
export interface LoadRecording {
  /**
   * Format version: 3 (2 tied the bundle by its SHA-256, 1 had no `preludeSha256` or `build`: a
   * launcher refuses a recording of another version).
   */
  version: 3;
  /** SHA-256 (hex) of the fast path (`<name>-load.cjs`) bundled with it; the launcher checks it. */
  preludeSha256: string;
  /**
   * The build stamp ({@link TRANSPORT_BUILD}) of the bundle the calls were recorded from and of the
   * fast path: the launcher checks the one the bundle ends with, {@link startPrelude} its own.
   */
  build: string;
  /** The bundle's size in bytes, which the launcher checks too (an edit in place keeps the stamp). */
  bundleSize: number;
  /** The transport options the plugin's servePlugin was called with. */
  transport: RecordedTransportOptions;
  /** The recorded calls, answered byte for byte. */
  calls: RecordedCall[];
}

/** servePlugin's transport options as recorded (JSON). */
export interface RecordedTransportOptions {
  handshake?: HandshakeConfig;
  protocolVersions?: number[];
  network?: "unix" | "tcp";
  exitOnHostDisconnect?: boolean | number;
  maxSessionMemoryMiB?: number;
}

/**
 * Where servePlugin reports its transport options while a recording is made (`nomadkit bundle`'s
 * run of the plugin): a function the launcher puts there. `undefined` means the options cannot be
 * replayed (an `env` of its own, `exitProcess: false`): no recording then.
 */
export const TRANSPORT_RECORDER = Symbol.for("@nomadkit/server.transportRecorder");

/** The options to record for `options`, or `undefined` when a launcher cannot replay them. */
export function recordableTransportOptions(options: TransportOptions): RecordedTransportOptions | undefined {
  if (options.env !== undefined || options.exitProcess === false) return undefined;
  const out: RecordedTransportOptions = {};
  if (options.handshake !== undefined) out.handshake = { cookieKey: options.handshake.cookieKey, cookieValue: options.handshake.cookieValue };
  if (options.protocolVersions !== undefined) out.protocolVersions = [...options.protocolVersions];
  if (options.network !== undefined) out.network = options.network;
  if (options.exitOnHostDisconnect !== undefined) out.exitOnHostDisconnect = options.exitOnHostDisconnect;
  if (options.maxSessionMemoryMiB !== undefined) out.maxSessionMemoryMiB = options.maxSessionMemoryMiB;
  return out;
}

/** Report `options` to the recorder of a recording run, if there is one. */
export function reportTransportOptions(options: TransportOptions): void {
  const recorder = (globalThis as { [TRANSPORT_RECORDER]?: (o: RecordedTransportOptions | undefined) => void })[TRANSPORT_RECORDER];
  if (typeof recorder === "function") recorder(recordableTransportOptions(options));
}

const GRPC_CONTENT_TYPE = /^application\/grpc(\+proto)?$/;

/**
 * How long the plugin's code may take, once loaded, to call servePlugin: go-plugin's default
 * StartTimeout (1 minute; Nomad's plugin loader keeps it), within which a plugin started without
 * the fast path must write its handshake or be killed.
 */
const ADOPT_TIMEOUT_MS = 60_000;

/** Options of {@link startPrelude}. */
export interface PreludeOptions {
  /** How long the plugin's code may take to call servePlugin once loaded, in ms; default 60000. */
  adoptTimeoutMs?: number;
}

/**
 * Serves the go-plugin transport with `recording`'s options and answers its recorded calls;
 * `loadPlugin` runs the plugin's own code (whose `servePlugin` adopts this transport) on the
 * first call the recording cannot answer. go-plugin's Shutdown is answered and ends the process
 * as servePlugin's does. A recording of another build (an older launcher checks only the bundle's
 * hash) is not served: `loadPlugin` runs at once, and the plugin serves every call itself.
 * `loadPlugin` throws (or returns a promise that rejects) when the plugin's code fails to load:
 * the calls handed over are then answered Unavailable with the error, and the process exits 1, as
 * it does when that code never calls servePlugin, or not within `options.adoptTimeoutMs` (go-plugin's
 * start timeout by default: Nomad's SetConfig, the usual first such call, has no deadline).
 *
 * @example
 * ```ts
 * // in a launcher, with a recording made from exactly this bundle:
 * await startPrelude(recording, () => require("./my-driver.cjs"));
 * ```
 */
export async function startPrelude(
  recording: LoadRecording,
  loadPlugin: () => unknown,
  options: PreludeOptions = {},
): Promise<PluginTransport | undefined> {
  if (recording.build !== TRANSPORT_BUILD) {
    await loadPlugin();
    return undefined;
  }
  const transport = openTransport(recording.transport, createLineLogger);
  await transport.listen();
  const calls = new Map(recording.calls.map((c) => [c.path, { ...c, requestBytes: Buffer.from(c.request, "base64"), bodyBytes: Buffer.from(c.body, "base64") }]));
  let loaded = false;
  const load = () => {
    if (loaded) return;
    loaded = true;
    // Recorded where nomadkit bundle ran: the plugin checks them against its own answers here.
    transport.recordedAnswers = [...calls.values()]
      .filter((c) => c.path !== SHUTDOWN)
      .map((c) => ({ path: c.path, request: c.requestBytes, body: c.bodyBytes }));
    leaveTransport(transport);
    transport.logger.debug("loading the plugin for a call the load recording does not answer");
    // The calls handed over wait for the plugin's servePlugin: should it never come, they are
    // answered with why, and the process exits (go-plugin then sees the plugin gone).
    const failed = (err: unknown) =>
      void transport.abandon(`the plugin failed to load: ${err instanceof Error ? err.message : String(err)}`, err);
    transport.awaitAdoption(
      () =>
        void transport.abandon(
          "the plugin's code ended without calling servePlugin (or waits on nothing that could make it call it): it serves no call",
        ),
    );
    watchLoadErrors(transport, failed);
    const adoptTimeoutMs = options.adoptTimeoutMs ?? ADOPT_TIMEOUT_MS;
    // Unref'd: waiting on it alone is waiting on nothing (see awaitAdoption).
    const timer = setTimeout(
      () =>
        void transport.abandon(
          `the plugin's code did not call servePlugin within ${adoptTimeoutMs} ms of loading (go-plugin's start timeout): it serves no call`,
        ),
      adoptTimeoutMs,
    ).unref();
    transport.onAdopted(() => clearTimeout(timer));
    try {
      const loading = loadPlugin();
      if (loading instanceof Promise) loading.catch(failed);
    } catch (err) {
      failed(err);
    }
  };
  const handOver: StreamListener = (...args) => {
    transport.pass(prelude, ...args);
    load();
  };
  const prelude: StreamListener = (stream, headers, flags, rawHeaders) => {
    // Read here before anyone answers it: a reset must not crash the process (see the transport's hold).
    stream.on("error", ignoreError);
    const path = headers[":path"] ?? "";
    if (HELD.has(path)) return transport.hold(stream, headers, flags, rawHeaders);
    // Once the plugin is loading, it answers every new call, Shutdown too: answered here, the
    // transport would shut down before the plugin could set its shutdown hook.
    if (loaded) return handOver(stream, headers, flags, rawHeaders);
    const call = calls.get(path);
    const type = headers["content-type"];
    const encoding = headers["grpc-encoding"];
    if (
      call === undefined ||
      headers[":method"] !== "POST" ||
      type === undefined ||
      !GRPC_CONTENT_TYPE.test(type) ||
      (encoding !== undefined && encoding !== "identity")
    ) {
      return handOver(stream, headers, flags, rawHeaders);
    }
    // Read without consuming the stream's end: a request that is not exactly the recorded one
    // goes back with unshift, and the plugin reads the call as if nobody had. A match is answered
    // once the request side has ended (a unary request ends with its message), so a second
    // message still goes to the plugin, which refuses it.
    const expected = call.requestBytes;
    const chunks: Buffer[] = [];
    let size = 0;
    let deciding = true;
    const giveBack = () => {
      deciding = false;
      stream.off("readable", onReadable);
      if (size > 0 && !stream.readableEnded) stream.unshift(Buffer.concat(chunks, size));
      handOver(stream, headers, flags, rawHeaders);
    };
    const decide = (ended: boolean) => {
      const got = Buffer.concat(chunks, size);
      if (size > expected.length || !got.equals(expected.subarray(0, size))) return giveBack();
      if (!ended) return;
      // Loading began while this request was read: the plugin answers it (see above).
      if (size < expected.length || loaded) return giveBack();
      deciding = false;
      stream.off("readable", onReadable);
      stream.resume();
      answer(stream, call);
      if (path === SHUTDOWN) setImmediate(() => void transport.shutdown("GRPCController.Shutdown"));
    };
    const onReadable = () => {
      let chunk: Buffer | null;
      while ((chunk = stream.read() as Buffer | null) !== null) {
        chunks.push(chunk);
        size += chunk.length;
      }
      // The end comes as a last "readable" with nothing left to read, before "end" is emitted.
      decide(stream.readableEnded || isReadEnded(stream));
    };
    stream.on("readable", onReadable);
    // Should "end" ever be emitted before the end was seen above, decide then (a request given
    // back that late has lost its bytes: the plugin sees an empty one).
    stream.once("end", () => {
      if (deciding) decide(true);
    });
  };
  transport.serve(prelude);
  return transport;
}

/**
 * Until the plugin adopts `transport`, an error its code leaves uncaught or a promise it leaves
 * rejected fails the load (`failed`), as it would end a plain Node.js process, unless the plugin
 * handles those itself (a listener of its own).
 */
function watchLoadErrors(transport: PluginTransport, failed: (err: unknown) => void): void {
  const onError = (err: unknown, event: "uncaughtException" | "unhandledRejection") => {
    if (process.listenerCount(event) > 1) return;
    failed(err);
  };
  const onException = (err: unknown) => onError(err, "uncaughtException");
  const onRejection = (err: unknown) => onError(err, "unhandledRejection");
  process.on("uncaughtException", onException);
  process.on("unhandledRejection", onRejection);
  transport.onAdopted(() => {
    process.off("uncaughtException", onException);
    process.off("unhandledRejection", onRejection);
  });
}

/** Whether the request side has been received in full (its end may not have been emitted yet). */
function isReadEnded(stream: http2.ServerHttp2Stream): boolean {
  return (stream as unknown as { _readableState?: { ended?: boolean } })._readableState?.ended === true;
}

function answer(stream: http2.ServerHttp2Stream, call: RecordedCall & { bodyBytes: Buffer }): void {
  // A stream the host reset with NO_ERROR (Node's default for close()) is closed but not destroyed,
  // and respond() would throw.
  if (stream.destroyed || stream.closed) return;
  stream.on("error", () => {});
  stream.respond({ ...call.headers, ":status": 200 }, { waitForTrailers: true });
  stream.once("wantTrailers", () => stream.sendTrailers(call.trailers));
  stream.end(call.bodyBytes);
}
