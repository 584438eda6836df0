// The one client every measure uses: a raw node:http2 gRPC client over a unix socket, with enlarged
// HTTP/2 windows (16 MiB per stream, 64 MiB per connection) and a 16 MiB max frame size. It speaks
// just enough gRPC to count: 5-byte envelopes, trailers with grpc-status. Large exec messages are
// never copied or decoded in full: the first bytes of each (tag, length, tag, length) are parsed and
// the payload bytes are counted as they arrive; small messages are decoded with protobuf-es by the
// caller. So the client stays cheap, and what is measured is the server.
import * as http2 from "node:http2";
import * as net from "node:net";

export const CLIENT_DESCRIPTION =
  "raw node:http2 gRPC client (h2c over the unix socket; 16 MiB stream / 64 MiB connection windows, 16 MiB max frame; envelope + protobuf header parsing only)";

const STREAM_WINDOW = 16 * 1024 * 1024;
const CONNECTION_WINDOW = 64 * 1024 * 1024;
const MAX_FRAME = 16 * 1024 * 1024 - 1;
/** Messages up to this size are handed over whole (close markers, exited, stats, unary replies). */
const SMALL = 64 * 1024;
const HEAD = 16;

/** A length-prefixed message as bytes: flags 0, big-endian length, payload. */
export function envelope(payload) {
  const out = Buffer.allocUnsafe(5 + payload.byteLength);
  out[0] = 0;
  out.writeUInt32BE(payload.byteLength, 1);
  out.set(payload, 5);
  return out;
}

function varint(buf, pos, end) {
  let v = 0;
  let shift = 0;
  for (; pos < end; pos++) {
    const b = buf[pos];
    v += (b & 0x7f) * 2 ** shift;
    if (b < 0x80) return [v, pos + 1];
    shift += 7;
  }
  return [-1, pos];
}

/**
 * Splits a gRPC response body into messages. `onMessage(bytes)` gets every message of at most 64 KiB
 * whole; bigger ones must be output chunks (`{stdout|stderr: {data}}`, field 1 or 2 holding only
 * field 1) and are reported as `onData(field, bytes)` with `field` 1 (stdout) or 2 (stderr).
 */
export class EnvelopeReader {
  #prefix = Buffer.alloc(5);
  #prefixGot = 0;
  #len = -1;
  #got = 0;
  #head = Buffer.alloc(HEAD);
  #whole = undefined;
  messages = 0;

  constructor(onMessage, onData) {
    this.onMessage = onMessage;
    this.onData = onData;
  }

  get idle() {
    return this.#len < 0 && this.#prefixGot === 0;
  }

  push(chunk) {
    let off = 0;
    const n = chunk.length;
    while (off < n) {
      if (this.#len < 0) {
        const take = Math.min(5 - this.#prefixGot, n - off);
        chunk.copy(this.#prefix, this.#prefixGot, off, off + take);
        this.#prefixGot += take;
        off += take;
        if (this.#prefixGot < 5) return;
        this.#prefixGot = 0;
        if (this.#prefix[0] !== 0) throw new Error(`compressed or unknown envelope flags ${this.#prefix[0]}`);
        this.#len = this.#prefix.readUInt32BE(1);
        this.#got = 0;
        this.#whole = this.#len <= SMALL ? Buffer.allocUnsafe(this.#len) : undefined;
        if (this.#len === 0) this.#finish();
        continue;
      }
      const take = Math.min(this.#len - this.#got, n - off);
      if (this.#whole !== undefined) chunk.copy(this.#whole, this.#got, off, off + take);
      else if (this.#got < HEAD) chunk.copy(this.#head, this.#got, off, off + Math.min(take, HEAD - this.#got));
      this.#got += take;
      off += take;
      if (this.#got === this.#len) this.#finish();
    }
  }

  #finish() {
    const len = this.#len;
    this.#len = -1;
    this.messages++;
    if (this.#whole !== undefined) {
      const w = this.#whole;
      this.#whole = undefined;
      this.onMessage(w);
      return;
    }
    // {field f: {data: bytes}}: tag(f, LEN) len1 0x0a len2 <len2 bytes>.
    const h = this.#head;
    const tag = h[0];
    const [len1, p1] = varint(h, 1, HEAD);
    const [len2, p2] = h[p1] === 0x0a ? varint(h, p1 + 1, HEAD) : [-1, 0];
    if ((tag !== 0x0a && tag !== 0x12) || len1 !== len - p1 || len2 !== len - p2) {
      throw new Error(`unexpected large message (${len} bytes, starts ${h.toString("hex")})`);
    }
    this.onData(tag >> 3, len2);
  }
}

/** One HTTP/2 connection to a gRPC server on a unix socket. */
export class GrpcH2Client {
  constructor(session) {
    this.session = session;
  }

  static connect(socketPath) {
    return new Promise((resolve, reject) => {
      const session = http2.connect("http://localhost", {
        createConnection: () => net.connect(socketPath),
        settings: { initialWindowSize: STREAM_WINDOW, maxFrameSize: MAX_FRAME, enablePush: false },
      });
      session.once("error", reject);
      session.once("connect", () => {
        session.off("error", reject);
        session.on("error", () => {});
        session.setLocalWindowSize(CONNECTION_WINDOW);
        resolve(new GrpcH2Client(session));
      });
    });
  }

  close() {
    this.session.close();
  }

  /**
   * Starts a call: sends `requests` (payloads, enveloped here) and, unless `halfClose` is false,
   * ends the request side. Resolves with status and trailers after the response ended; messages
   * are fed to `reader`. `onChunk(chunk, stream)` sees the raw DATA chunks (for slow reading).
   */
  call(path, requests, reader, { halfClose = true, onChunk, signal } = {}) {
    return new Promise((resolve, reject) => {
      const req = this.session.request(
        { ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" },
        { endStream: false },
      );
      let status;
      let message = "";
      const takeStatus = (h) => {
        if (h["grpc-status"] !== undefined) {
          status = Number(h["grpc-status"]);
          message = decodeURIComponent(String(h["grpc-message"] ?? ""));
        }
      };
      req.on("response", takeStatus);
      req.on("trailers", takeStatus);
      req.on("data", (chunk) => {
        try {
          reader.push(chunk);
        } catch (err) {
          req.close(http2.constants.NGHTTP2_PROTOCOL_ERROR);
          reject(err);
          return;
        }
        onChunk?.(chunk, req);
      });
      req.on("error", reject);
      req.on("end", () => {
        // The response is complete; our request side may still be open (exec never half-closes):
        // end it (a reset would count towards the server's rapid-reset limit).
        if (!req.writableEnded) req.end();
        if (status === undefined) reject(new Error(`${path}: response ended without grpc-status`));
        else if (!reader.idle) reject(new Error(`${path}: response ended inside a message`));
        else resolve({ status, message });
      });
      if (signal) {
        const onAbort = () => req.close(http2.constants.NGHTTP2_CANCEL);
        if (signal.aborted) onAbort();
        else signal.addEventListener("abort", onAbort, { once: true });
      }
      for (const r of requests) req.write(envelope(r));
      if (halfClose) req.end();
    });
  }

  /** A unary call: resolves with the reply payload; rejects on a non-OK status. */
  async unary(path, request) {
    let reply;
    const reader = new EnvelopeReader(
      (m) => (reply = m),
      () => {
        throw new Error("unexpected large reply");
      },
    );
    const { status, message } = await this.call(path, [request], reader);
    if (status !== 0) throw new Error(`${path}: grpc-status ${status}: ${message}`);
    if (reply === undefined || reader.messages !== 1) throw new Error(`${path}: expected one reply, got ${reader.messages}`);
    return reply;
  }
}
