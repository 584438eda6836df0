/**
 * The exec output handoff between a driver plugin and its task executor (both nomadkit): the
 * executor starts the command, but the command's stdout and stderr are unix sockets whose other
 * ends the plugin reads, so the output crosses one process and one HTTP/2 connection (plugin →
 * Nomad) instead of two (executor → plugin → Nomad). Everything else (setup, stdin, the exit, errors)
 * still travels as Executor.ExecStreaming messages.
 *
 * 1. The plugin connects twice to the executor's handoff socket, `exec-output.sock` next to its
 *    go-plugin socket, and writes a preface on each: a random token and which stream it is.
 * 2. It calls ExecStreaming with the token in the `nomadkit-exec-output` request header.
 * 3. The executor claims the two connections by that token and gives them to the process as its
 *    stdout and stderr. An executor that cannot (a tty, no such connections) closes them and sends
 *    the output as messages; one without the header does not know of any of this.
 *
 * The plugin forwards whatever comes either way and reports the exit after both sockets reached
 * EOF. The socket is 0600 in the executor's 0700 (or its group's 0750) directory; a connection
 * that names no pending session is closed. Cancelling the session kills the command's process
 * group while the command runs (the executor's ExecStreaming call is cancelled with it); after it
 * exited, a process it left behind holding the output only loses its reader (EPIPE), as with any
 * pipe whose reader went away.
 */
import { randomBytes } from "node:crypto";
import { chmodSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { dirname, join } from "node:path";
import type { Writable } from "node:stream";
import { readSocketInto } from "./read-buffers.js";

/** Request header carrying the session's token. */
export const OUTPUT_HANDOFF_HEADER = "nomadkit-exec-output";

/** Token (32 hex digits) and stream (`o` stdout, `e` stderr): what a connection first sends. */
const PREFACE_LENGTH = 33;
const TOKEN = /^[0-9a-f]{32}$/;
/** How long a connection waits for its ExecStreaming call to claim it. */
const UNCLAIMED_MS = 30_000;
/** How long a call waits for connections its token names (they are made before the call). */
const CLAIM_WAIT_MS = 5_000;

/** The output sockets of one session, as the executor claims them. */
export interface HandedOutputs {
  /** Becomes the process's stdout. */
  stdout: Socket;
  /** Becomes the process's stderr. */
  stderr: Socket;
}

/**
 * Where an executor listening at `address` (its go-plugin socket) takes output handoffs; undefined
 * for a TCP executor (no handoff).
 *
 * @example
 * ```ts
 * outputHandoffPath("unix", "/tmp/plugin-abc/plugin.sock"); // "/tmp/plugin-abc/exec-output.sock"
 * ```
 */
export function outputHandoffPath(network: string, address: string): string | undefined {
  return network === "unix" ? join(dirname(address), "exec-output.sock") : undefined;
}

interface Pending {
  o?: Socket;
  e?: Socket;
  timer: NodeJS.Timeout;
  wake?: () => void;
}

/**
 * The executor's side: a listener for handoff connections, and {@link claim} for an ExecStreaming
 * call that names a token. Without {@link listen} every claim declines. `runExecutorMain` sets one
 * up; an executor of your own passes it to `ExecutorService` as `outputHandoff`.
 *
 * @example
 * ```ts
 * import { ExecutorService, OutputHandoff, outputHandoffPath } from "@nomadkit/server/executor";
 * const outputHandoff = new OutputHandoff();
 * const service = new ExecutorService({ outputHandoff });
 * // once servePlugin has its address:
 * await outputHandoff.listen(outputHandoffPath(served.network, served.address)!);
 * ```
 */
export class OutputHandoff {
  #server: Server | undefined;
  readonly #pending = new Map<string, Pending>();

  /** Listen at `path` (see {@link outputHandoffPath}); the process keeps running without it. */
  async listen(path: string): Promise<void> {
    const server = createServer({ pauseOnConnect: true }, (socket) => this.#accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(path, () => {
        server.off("error", reject);
        resolve();
      });
    });
    chmodSync(path, 0o600);
    server.unref();
    this.#server = server;
  }

  /** Stop listening and close unclaimed connections. */
  close(): void {
    this.#server?.close();
    this.#server = undefined;
    for (const token of [...this.#pending.keys()]) this.#drop(token);
  }

  /**
   * The two connections made for `token`, once both are here; undefined (and any one of them
   * closed) if they do not come within a few seconds, the call is aborted, or nothing listens.
   */
  async claim(token: string, signal: AbortSignal): Promise<HandedOutputs | undefined> {
    if (this.#server === undefined || !TOKEN.test(token)) return undefined;
    const p = this.#entry(token);
    if (p.o === undefined || p.e === undefined) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, CLAIM_WAIT_MS);
        function done() {
          clearTimeout(timer);
          signal.removeEventListener("abort", done);
          resolve();
        }
        p.wake = () => {
          if (p.o !== undefined && p.e !== undefined) done();
        };
        signal.addEventListener("abort", done, { once: true });
      });
    }
    const { o, e } = p;
    this.#pending.delete(token);
    clearTimeout(p.timer);
    if (o === undefined || e === undefined || signal.aborted) {
      o?.destroy();
      e?.destroy();
      return undefined;
    }
    return { stdout: o, stderr: e };
  }

  #entry(token: string): Pending {
    let p = this.#pending.get(token);
    if (p === undefined) {
      p = { timer: setTimeout(() => this.#drop(token), UNCLAIMED_MS).unref() };
      this.#pending.set(token, p);
    }
    return p;
  }

  #drop(token: string): void {
    const p = this.#pending.get(token);
    if (p === undefined) return;
    this.#pending.delete(token);
    clearTimeout(p.timer);
    p.o?.destroy();
    p.e?.destroy();
    p.wake?.();
  }

  #accept(socket: Socket): void {
    socket.on("error", () => {});
    // Only the preface is ever sent this way: the process writes, the plugin reads.
    const timer = setTimeout(() => socket.destroy(), CLAIM_WAIT_MS).unref();
    const onReadable = () => {
      const preface = socket.read(PREFACE_LENGTH) as Buffer | null;
      if (preface === null) return;
      socket.off("readable", onReadable);
      clearTimeout(timer);
      const token = preface.toString("latin1", 0, 32);
      const kind = String.fromCharCode(preface[32] ?? 0);
      if (preface.length !== PREFACE_LENGTH || !TOKEN.test(token) || (kind !== "o" && kind !== "e")) {
        socket.destroy();
        return;
      }
      const p = this.#entry(token);
      if (p[kind] !== undefined) {
        socket.destroy();
        return;
      }
      p[kind] = socket;
      socket.once("close", () => {
        if (p[kind] === socket && this.#pending.get(token) === p) delete p[kind];
      });
      p.wake?.();
    };
    socket.on("readable", onReadable);
    socket.once("end", () => socket.destroy());
  }
}

/** The plugin's side of one session: the token and both outputs being read. */
export interface HandoffSession {
  /** For the {@link OUTPUT_HANDOFF_HEADER} request header. */
  readonly token: string;
  /** Resolves once both sockets have closed (EOF, or {@link close}). The targets are not ended. */
  readonly done: Promise<void>;
  /** Stop reading (the session is over). */
  close(): void;
}

/**
 * Connects both outputs of a session to the executor's handoff socket at `path`, reading them into
 * `stdout` and `stderr` (writables keeping the read-buffers promise: an exec session's). Rejects if
 * the executor does not listen there; the caller then forwards the output as messages.
 */
export async function openHandoffSession(path: string, stdout: Writable, stderr: Writable): Promise<HandoffSession> {
  const token = randomBytes(16).toString("hex");
  const sockets: Socket[] = [];
  const open = (kind: "o" | "e", target: Writable) =>
    new Promise<{ closed: Promise<void> }>((resolve, reject) => {
      // Not ended at EOF: an executor that declines closes the sockets at once and sends the output as messages.
      const reader = readSocketInto(target, { end: false });
      const socket = connect({ path, onread: reader.onread });
      sockets.push(socket);
      socket.once("error", reject);
      socket.once("connect", () => {
        socket.off("error", reject);
        socket.write(`${token}${kind}`);
        // Wrapped: a promise resolved with a promise would wait for the socket to close.
        resolve({ closed: reader.attach(socket) });
      });
    });
  try {
    const closed = await Promise.all([open("o", stdout), open("e", stderr)]);
    return {
      token,
      done: Promise.all(closed.map((c) => c.closed)).then(() => undefined),
      close: () => sockets.forEach((s) => s.destroy()),
    };
  } catch (err) {
    sockets.forEach((s) => s.destroy());
    throw err;
  }
}
