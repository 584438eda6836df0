// nomadkit exec: ExecTaskStreaming with a real terminal.
import { spawnSync } from "node:child_process";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { RequestQueue } from "@nomadkit/client";
import type { ExecTaskStreamingRequestSchema } from "@nomadkit/protocol/driver";
import { CliError } from "../errors.js";
import { connectPlugin, rpcError, type GlobalOptions } from "../plugin.js";

type Request = MessageInitShape<typeof ExecTaskStreamingRequestSchema>;

export async function execCommand(
  plugin: string,
  taskId: string,
  command: string[],
  opts: { interactive?: boolean; tty?: boolean },
  g: GlobalOptions,
): Promise<void> {
  if (command.length === 0)
    throw new CliError(
      "exec: no command given; put it after --, e.g. nomadkit exec <plugin> <task-id> -- /bin/sh",
    );
  const tty = !!opts.tty;
  const interactive = !!opts.interactive;
  const c = await connectPlugin(plugin, g);
  const requests = new RequestQueue<Request>();
  const stop = new AbortController();
  const stdin = process.stdin;
  const rawMode = tty && interactive && stdin.isTTY === true;
  const size = (): Request => ({
    ttySize: {
      height: process.stdout.rows ?? 24,
      width: process.stdout.columns ?? 80,
    },
  });
  const onResize = () => requests.push(size());
  // Input faster than the plugin takes it (a file piped in) waits in the pipe, not in memory: stop
  // reading while the request queue is full, go on once the call has taken what it holds.
  const onData = (d: Buffer) => {
    if (requests.push({ stdin: { data: d } }) || stdin.isPaused()) return;
    stdin.pause();
    void requests.drained().then(() => {
      if (!requests.ended) stdin.resume();
    });
  };
  const onEnd = () => requests.push({ stdin: { close: true } });
  const onSigint = () => stop.abort();

  requests.push({ setup: { taskId, command, tty } });
  if (tty && process.stdout.isTTY) {
    requests.push(size());
    process.stdout.on("resize", onResize);
  }
  // Node's raw mode keeps output processing (OPOST, so "\n" is written as "\r\n"): the remote
  // terminal's bytes must reach ours unchanged, as Nomad's `alloc exec` makes them (moby/term's
  // MakeRaw clears OPOST). Node has no termios call; stty sets it, and puts it back after.
  const savedOutput = rawMode && process.stdout.isTTY ? stty(["-g"]) : undefined;
  if (interactive) {
    if (rawMode) stdin.setRawMode(true);
    if (savedOutput !== undefined) stty(["-opost"]);
    stdin.on("data", onData);
    stdin.once("end", onEnd);
    stdin.resume();
  } else {
    requests.push({ stdin: { close: true } });
  }
  // In raw mode Ctrl-C is a byte for the remote side; otherwise it ends the session.
  if (!rawMode) process.on("SIGINT", onSigint);

  let exitCode: number | undefined;
  try {
    for await (const res of c.plugin.driver.execTaskStreaming(requests, {
      signal: stop.signal,
    })) {
      // Waiting for a slow reader of our output stops reading the stream: HTTP/2 flow control then
      // holds the command's output in the plugin instead of here.
      if (res.stdout?.data.length) await write(process.stdout, res.stdout.data, stop.signal);
      if (res.stderr?.data.length) await write(process.stderr, res.stderr.data, stop.signal);
      if (res.exited) {
        exitCode = res.result?.exitCode ?? 0;
        break;
      }
    }
  } catch (e) {
    if (stop.signal.aborted) exitCode = 130;
    else throw await rpcError(c, "Driver.ExecTaskStreaming", e);
  } finally {
    // Nomad never half-closes the request side; end it only now.
    requests.end();
    stop.abort();
    process.stdout.off("resize", onResize);
    process.off("SIGINT", onSigint);
    if (interactive) {
      stdin.off("data", onData);
      stdin.off("end", onEnd);
      if (rawMode) stdin.setRawMode(false);
      if (savedOutput !== undefined) stty([savedOutput]);
      stdin.pause();
    }
    await c.release();
  }
  if (exitCode === undefined)
    throw new CliError(
      `plugin ${c.name}: exec stream ended without an exit status`,
    );
  process.exitCode = exitCode;
}

/** Runs `stty args` on our stdout's terminal; its output (`-g`: the settings), undefined when it fails. */
function stty(args: string[]): string | undefined {
  const r = spawnSync("stty", args, { stdio: [process.stdout, "pipe", "ignore"], encoding: "utf8" });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

/** Writes `data` to `out`; resolves once `out` takes more (drain), fails or closes, or `signal` aborts. */
async function write(out: NodeJS.WriteStream, data: Uint8Array, signal: AbortSignal): Promise<void> {
  if (out.write(data) || signal.aborted) return;
  await new Promise<void>((resolve) => {
    const done = () => {
      out.off("drain", done);
      out.off("error", done);
      out.off("close", done);
      signal.removeEventListener("abort", done);
      resolve();
    };
    out.on("drain", done);
    out.on("error", done);
    out.on("close", done);
    signal.addEventListener("abort", done);
  });
}
