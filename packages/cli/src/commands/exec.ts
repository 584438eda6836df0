// nomadkit exec: ExecTaskStreaming with a real terminal.
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
  const onData = (d: Buffer) => requests.push({ stdin: { data: d } });
  const onEnd = () => requests.push({ stdin: { close: true } });
  const onSigint = () => stop.abort();

  requests.push({ setup: { taskId, command, tty } });
  if (tty && process.stdout.isTTY) {
    requests.push(size());
    process.stdout.on("resize", onResize);
  }
  if (interactive) {
    if (rawMode) stdin.setRawMode(true);
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
      if (res.stdout?.data.length) process.stdout.write(res.stdout.data);
      if (res.stderr?.data.length) process.stderr.write(res.stderr.data);
      if (res.exited) {
        exitCode = res.result?.exitCode ?? 0;
        break;
      }
    }
  } catch (e) {
    if (stop.signal.aborted) exitCode = 130;
    else throw rpcError(c.name, "Driver.ExecTaskStreaming", e);
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
