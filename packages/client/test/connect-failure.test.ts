// A call whose connection to the plugin cannot be made (connect(2) on its socket fails) must fail
// as grpc-go's client fails a dial, which is what Nomad's plugin-shutdown handling is written for:
// Unavailable, naming the socket, on every call path (unary direct on the plugin connection, unary
// and streams through connect, raw relays); and PluginShutdownError once the plugin's exit is seen.
// The sockets are real: left behind by a real plugin process killed with SIGKILL, removed, or not
// sockets at all.
import { spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@connectrpc/connect";
import {
  PluginLaunchError,
  PluginShutdownError,
  reattachPlugin,
  type ClientOptions,
} from "../src/index.js";
import { callPathFailures, status } from "./call-paths.js";
import { spawnFixture, tempDir } from "./helpers.js";

const failures = (socketPath: string, options: ClientOptions = {}) =>
  callPathFailures(socketPath, options);

/** The errno of the Node error under `err` (the dial's own error, kept as a cause). */
function errnoOf(err: unknown): string | undefined {
  for (let e = err; e instanceof Error; e = e.cause) {
    const code = (e as NodeJS.ErrnoException).code;
    if (typeof code === "string") return code;
  }
  return undefined;
}

describe("a call whose connection to the plugin cannot be made", () => {
  const tmp = tempDir();
  /** A socket its plugin (killed with SIGKILL) left behind: nothing listens on it. */
  const stale = `${tmp.dir}/stale.sock`;
  /** The socket of a plugin killed with SIGKILL, then removed (as launchPlugin does when it sees the exit). */
  const removed = `${tmp.dir}/removed.sock`;
  let exited: AbortSignal;

  beforeAll(async () => {
    for (const path of [stale, removed]) {
      const child = spawnFixture("dying-plugin.mjs", [path]);
      await child.waitFor("ready");
      child.proc.kill("SIGKILL");
      await new Promise<void>((r) =>
        child.exited.addEventListener("abort", () => r(), { once: true }),
      );
      exited = child.exited;
    }
    rmSync(removed);
  });
  afterAll(() => tmp.cleanup());

  const paths = [
    "unary, direct",
    "unary, through connect",
    "server stream",
    "raw bidi relay",
  ];

  it("socket removed, the plugin's exit not seen (no exit signal, or not within the grace): Unavailable naming the socket", async () => {
    const never = new AbortController().signal;
    for (const options of [{}, { pluginExited: never, shutdownGraceMs: 0 }]) {
      const got = await failures(removed, options);
      expect(Object.keys(got)).toEqual(paths);
      for (const [path, err] of Object.entries(got)) {
        expect(status(err), path).toEqual({
          code: "Unavailable",
          message: `cannot connect to the plugin at unix:${removed}: no such file or directory (ENOENT)`,
        });
        // What the dial met stays reachable (the errno, for code that looks at it).
        expect(errnoOf(err), path).toBe("ENOENT");
      }
    }
  });

  it("socket removed and the plugin's exit seen within the grace: PluginShutdownError, the Unavailable as its cause", async () => {
    for (const [path, err] of Object.entries(
      await failures(removed, {
        pluginExited: exited,
        shutdownGraceMs: 60_000,
      }),
    )) {
      expect(err, path).toBeInstanceOf(PluginShutdownError);
      expect(status((err as Error).cause), path).toMatchObject({
        code: "Unavailable",
      });
    }
  });

  it("a failure to connect that says nothing of the plugin's exit still waits for it, as Nomad waits on any Unavailable", async () => {
    // A socket path below a regular file: ENOTDIR, which was Internal and returned at once.
    const file = `${tmp.dir}/a-file`;
    writeFileSync(file, "");
    for (const [path, err] of Object.entries(
      await failures(`${file}/plugin.sock`, {
        pluginExited: exited,
        shutdownGraceMs: 60_000,
      }),
    )) {
      expect(err, path).toBeInstanceOf(PluginShutdownError);
    }
    for (const [path, err] of Object.entries(
      await failures(`${file}/plugin.sock`),
    )) {
      expect(status(err), path).toEqual({
        code: "Unavailable",
        message: `cannot connect to the plugin at unix:${file}/plugin.sock: not a directory (ENOTDIR)`,
      });
    }
  });

  it("a socket nothing listens on, and a path that is not a socket: Unavailable naming it and saying which", async () => {
    const file = `${tmp.dir}/regular`;
    writeFileSync(file, "");
    const dir = `${tmp.dir}/dir`;
    mkdirSync(dir);
    const want: [string, string][] = [
      [stale, "connection refused (ECONNREFUSED): nothing listens on it"],
      [
        file,
        "connection refused (ECONNREFUSED): it is a regular file, not a socket",
      ],
      [
        dir,
        "connection refused (ECONNREFUSED): it is a directory, not a socket",
      ],
    ];
    for (const [socket, reason] of want) {
      for (const [path, err] of Object.entries(await failures(socket))) {
        expect(status(err), `${socket}: ${path}`).toEqual({
          code: "Unavailable",
          message: `cannot connect to the plugin at unix:${socket}: ${reason}`,
        });
        expect(errnoOf(err), path).toBe("ECONNREFUSED");
      }
    }
  });

  it.runIf(process.platform === "linux")(
    "a socket path longer than a unix socket address holds: Unavailable naming it, never a connection to the socket its first 108 bytes name",
    async () => {
      // Node cuts a longer path to sun_path's 108 bytes: this listener's path is exactly those.
      const deep = `${tmp.dir}/${"d".repeat(98 - tmp.dir.length)}`;
      mkdirSync(deep);
      const prefix = `${deep}/plugin.s`;
      expect(Buffer.byteLength(prefix)).toBe(108);
      const long = `${prefix}ock-with-a-long-name`;
      let accepted = 0;
      const other = createServer((s) => {
        accepted++;
        s.destroy();
      });
      await new Promise<void>((r) => other.listen(prefix, r));
      try {
        const why = `invalid argument (EINVAL): the path is ${Buffer.byteLength(long)} bytes long, over the 107 bytes a unix socket address holds`;
        for (const [path, err] of Object.entries(await failures(long))) {
          expect(status(err), path).toEqual({
            code: "Unavailable",
            message: `cannot connect to the plugin at unix:${long}: ${why}`,
          });
          expect(errnoOf(err), path).toBe("EINVAL");
        }
        const err = await reattachPlugin({
          pid: process.pid,
          network: "unix",
          address: long,
        }).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(PluginLaunchError);
        expect((err as Error).message).toBe(
          `reattach: cannot talk gRPC to plugin ${process.pid} at unix:${long}: [unavailable] cannot connect to the plugin at unix:${long}: ${why}`,
        );
        expect(accepted).toBe(0);
      } finally {
        await new Promise((r) => other.close(r));
      }
    },
  );

  // EACCES needs a user the socket's permissions keep out: root passes them. Run as nobody, who must
  // be able to read this checkout's built code.
  const built = fileURLToPath(new URL("../dist/esm/index.js", import.meta.url));
  const nobodyReads = () =>
    spawnSync("setpriv", [
      "--reuid=65534",
      "--regid=65534",
      "--clear-groups",
      "test",
      "-r",
      built,
    ]).status === 0;
  it.skipIf(
    process.getuid?.() !== 0 ||
      !existsSync("/usr/bin/setpriv") ||
      !nobodyReads(),
  )(
    "a socket this user may not connect to (EACCES): Unavailable naming it",
    async () => {
      const child = spawnFixture("dying-plugin.mjs", [
        `${tmp.dir}/private.sock`,
      ]);
      try {
        await child.waitFor("ready");
        chmodSync(tmp.dir, 0o755);
        chmodSync(`${tmp.dir}/private.sock`, 0o600);
        const script = `
          const { DriverClient, createUnixSocketTransport } = await import(${JSON.stringify(built)});
          const err = await new DriverClient(createUnixSocketTransport(${JSON.stringify(`${tmp.dir}/private.sock`)})).capabilities({}).catch((e) => e);
          console.log(JSON.stringify({ code: err.code, message: err.rawMessage }));`;
        const r = await new Promise<{ stdout: string; code: number | null }>(
          (resolve) => {
            const c = spawn(
              "setpriv",
              [
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                process.execPath,
                "--input-type=module",
                "-e",
                script,
              ],
              {
                stdio: ["ignore", "pipe", "inherit"],
                timeout: 30_000,
              },
            );
            let stdout = "";
            c.stdout.on("data", (d: Buffer) => (stdout += d));
            c.on("exit", (code) => resolve({ stdout, code }));
          },
        );
        expect(r.code).toBe(0);
        expect(JSON.parse(r.stdout)).toEqual({
          code: Code.Unavailable,
          message: `cannot connect to the plugin at unix:${tmp.dir}/private.sock: permission denied (EACCES)`,
        });
      } finally {
        child.proc.kill("SIGKILL");
      }
    },
    60_000,
  );
});
