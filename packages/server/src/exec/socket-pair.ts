/**
 * Connected pairs of unix stream sockets: what libuv gives a child's stdio "pipe", but with our end
 * created by us, so it can read with `onread` into our own buffers (see read-buffers.ts). Node has
 * no socketpair(2); a listening socket in a private (0700) directory, connected to and accepted from
 * one pair at a time, makes the same thing.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, connect, type OnReadOpts, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

interface Factory {
  server: Server;
  path: string;
}

let factory: Promise<Factory> | undefined;
/** Pairs are made one at a time, so the next accepted connection is the one just made. */
let queue: Promise<unknown> = Promise.resolve();

function startFactory(): Promise<Factory> {
  return new Promise((resolve, reject) => {
    // sun_path holds 108 bytes on Linux, 104 on macOS; libuv may cut a longer path short silently.
    if (Buffer.byteLength(join(tmpdir(), "nomadkit-pairs-XXXXXX", "s")) > 100) {
      reject(new Error(`socket pairs: the temporary directory's path is too long for a unix socket: ${tmpdir()}`));
      return;
    }
    const dir = mkdtempSync(join(tmpdir(), "nomadkit-pairs-"));
    const path = join(dir, "s");
    // Accepted sockets go to children as they are: never read from them here.
    const server = createServer({ pauseOnConnect: true });
    server.once("error", (err) => {
      rmSync(dir, { recursive: true, force: true });
      reject(err);
    });
    server.listen(path, () => {
      server.unref();
      process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
      resolve({ server, path });
    });
  });
}

/**
 * A connected pair: `ours` reads with `onread`; give `theirs` to a child as a stdio stream and
 * destroy it here once spawned.
 *
 * @example
 * ```ts
 * const [ours, theirs] = await socketPair({ buffer: reader.next, callback: onBytes });
 * const child = spawn(file, args, { stdio: ["pipe", theirs, "pipe"] });
 * theirs.destroy();
 * ```
 */
export function socketPair(onread: OnReadOpts): Promise<[ours: Socket, theirs: Socket]> {
  const made = queue.then(async () => {
    const { server, path } = await (factory ??= startFactory().catch((err: unknown) => {
      factory = undefined;
      throw err;
    }));
    return new Promise<[Socket, Socket]>((resolve, reject) => {
      let theirs: Socket | undefined;
      let connected = false;
      const ours = connect({ path, onread });
      const onConnection = (s: Socket) => {
        theirs = s;
        settle();
      };
      const onError = (err: Error) => {
        server.off("connection", onConnection);
        theirs?.destroy();
        reject(err);
      };
      const settle = () => {
        if (theirs === undefined || !connected) return;
        ours.off("error", onError);
        resolve([ours, theirs]);
      };
      server.once("connection", onConnection);
      ours.once("error", onError);
      ours.once("connect", () => {
        connected = true;
        settle();
      });
    });
  });
  queue = made.catch(() => {});
  return made;
}
