// ExecTaskStreaming through the real wire, against a driver served by serveDriver in a child
// process: Nomad's reference vectors with the generated client and with
// @grpc/grpc-js, heartbeats, stdin close, protocol errors, the raw form, and a 256 MiB checksummed
// stream read slowly while the plugin's memory stays bounded.
import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type * as grpc from "@grpc/grpc-js";
import { encode } from "@msgpack/msgpack";
import type { PluginClient } from "@nomadkit/client";
import {
  ExecTaskStreamingRequestSchema,
  TaskState,
  type ExecTaskStreamingRequest,
  type ExecTaskStreamingResponse,
} from "@nomadkit/protocol/driver";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { grpcDriverClient, launchFixture, memoryOf } from "./fixtures/driver/harness.js";
import { RequestQueue } from "@nomadkit/client";

type Req = MessageInitShape<typeof ExecTaskStreamingRequestSchema>;

let plugin: PluginClient;
const TASK = "exec-task";

interface Collected {
  stdout: Buffer;
  stderr: Buffer;
  stdoutCloses: number;
  stderrCloses: number;
  exited: number;
  exitCode: number | undefined;
  signal: number | undefined;
}

/** Collect an exec response stream, checking the protocol's ordering rules on the way. */
async function collect(responses: AsyncIterable<ExecTaskStreamingResponse>, onData?: (r: ExecTaskStreamingResponse) => void): Promise<Collected> {
  const out = { stdout: [] as Buffer[], stderr: [] as Buffer[], stdoutCloses: 0, stderrCloses: 0, exited: 0, exitCode: undefined as number | undefined, signal: undefined as number | undefined };
  for await (const r of responses) {
    expect(out.exited, "nothing may follow the exited message").toBe(0);
    if (r.stdout !== undefined) {
      if (r.stdout.data.length > 0) {
        expect(out.stdoutCloses, "stdout data after its close marker").toBe(0);
        out.stdout.push(Buffer.from(r.stdout.data));
      }
      if (r.stdout.close) out.stdoutCloses++;
    }
    if (r.stderr !== undefined) {
      if (r.stderr.data.length > 0) {
        expect(out.stderrCloses, "stderr data after its close marker").toBe(0);
        out.stderr.push(Buffer.from(r.stderr.data));
      }
      if (r.stderr.close) out.stderrCloses++;
    }
    if (r.exited) {
      expect(out.stdoutCloses).toBe(1);
      expect(out.stderrCloses).toBe(1);
      out.exited++;
      out.exitCode = r.result?.exitCode;
      out.signal = r.result?.signal;
    }
    onData?.(r);
  }
  return { ...out, stdout: Buffer.concat(out.stdout), stderr: Buffer.concat(out.stderr) };
}

function exec(first: Req, ...rest: Req[]): { requests: RequestQueue<Req>; responses: AsyncIterable<ExecTaskStreamingResponse> } {
  const requests = new RequestQueue<Req>();
  requests.push(first, ...rest);
  return { requests, responses: plugin.driver.execTaskStreaming(requests) };
}

const setup = (command: string[], tty = false, taskId = TASK): Req => ({ setup: { taskId, command, tty } });
const stdin = (s: string): Req => ({ stdin: { data: Buffer.from(s) } });

async function failure(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectError);
    return err as ConnectError;
  }
  throw new Error("expected the exec to fail");
}

beforeAll(async () => {
  plugin = await launchFixture("test-driver");
  await plugin.driver.startTask({ task: { id: TASK, name: "exec", allocId: "alloc-exec", msgpackDriverConfig: encode({ command: "sleep", args: ["3600"] }) } });
});

afterAll(async () => {
  await plugin?.driver.destroyTask({ taskId: TASK, force: true }).catch(() => {});
  await plugin?.kill();
});

describe("ExecTaskStreaming, high-level form (generated client)", () => {
  it("Nomad's vector without tty: separate streams, exit 43, one close marker each, one exited, then OK", async () => {
    const { requests, responses } = exec(setup(["sh", "-c", "echo hello stdout; echo hello stderr >&2; exit 43"]));
    const r = await collect(responses);
    requests.end();
    expect(r.stdout.toString()).toBe("hello stdout\n");
    expect(r.stderr.toString()).toBe("hello stderr\n");
    expect(r).toMatchObject({ exitCode: 43, stdoutCloses: 1, stderrCloses: 1, exited: 1 });
  });

  it("Nomad's vector with tty: resizes to 50x40 then 100x100, stty size prints 100 100", async () => {
    // `read` holds the command until our stdin arrives, which is after both resizes (requests are
    // handled in order), so no sleep is needed.
    const { requests, responses } = exec(
      setup(["sh", "-c", "read x; stty size; echo oops >&2"], true),
      { ttySize: { height: 50, width: 40 } },
      { ttySize: { height: 100, width: 100 } },
      stdin("go\n"),
    );
    const r = await collect(responses);
    requests.end();
    expect(r.stdout.toString()).toContain("100 100\r\n");
    // With a tty all output is stdout.
    expect(r.stdout.toString()).toContain("oops");
    expect(r.stderr.length).toBe(0);
    expect(r).toMatchObject({ exitCode: 0, stdoutCloses: 1, stderrCloses: 1, exited: 1 });
  });

  it("ignores heartbeats and ends cat when stdin is closed", async () => {
    const { requests, responses } = exec(setup(["cat"]), {}, stdin("abc"), {}, stdin("def\n"), {}, { stdin: { close: true } }, {});
    const r = await collect(responses);
    requests.end();
    expect(r.stdout.toString()).toBe("abcdef\n");
    expect(r).toMatchObject({ exitCode: 0, exited: 1 });
  });

  it("reports a process killed by signal N as exit code 128+N", async () => {
    const { requests, responses } = exec(setup(["sh", "-c", "kill -KILL $$"]));
    const r = await collect(responses);
    requests.end();
    expect(r).toMatchObject({ exitCode: 137, signal: 9, exited: 1 });
  });

  it("answers InvalidArgument when the first message is not setup", async () => {
    const { requests, responses } = exec(stdin("hello"));
    const err = await failure(collect(responses));
    requests.end();
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toBe("first message must be setup");
  });

  it("answers InvalidArgument on a second setup, and NotFound for an unknown task", async () => {
    const { requests, responses } = exec(setup(["cat"]), setup(["cat"]));
    const err = await failure(collect(responses));
    requests.end();
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toMatch(/setup may only be sent once/);

    const unknown = exec(setup(["true"], false, "ghost-task"));
    const nf = await failure(collect(unknown.responses));
    unknown.requests.end();
    expect(nf.code).toBe(Code.NotFound);
    expect(nf.rawMessage).toContain('"ghost-task"');

    const empty = exec(setup([]));
    const ia = await failure(collect(empty.responses));
    empty.requests.end();
    expect(ia.rawMessage).toBe("setup.command must not be empty");
  });

  it("kills the process when the client goes away", async () => {
    const requests = new RequestQueue<Req>();
    requests.push(setup(["sh", "-c", "echo $$; exec sleep 3600"]));
    const ac = new AbortController();
    let pid = 0;
    await collect(plugin.driver.execTaskStreaming(requests, { signal: ac.signal }), (r) => {
      if (pid === 0 && r.stdout?.data.length) {
        pid = Number(Buffer.from(r.stdout.data).toString().trim());
        ac.abort();
      }
    }).catch(() => {});
    requests.end();
    expect(pid).toBeGreaterThan(0);
    // The plugin kills the process group; wait (without a deadline) until the pid is gone.
    while (alive(pid)) await sleep(20);
  });
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("ExecTaskStreaming cancelled by the caller", () => {
  it("with output still queued, many times over: the host is not locked out (Node never un-counts those bytes)", async () => {
    // A plugin of its own: before the fix its connection refused every new call once it happened.
    const own = await launchFixture("test-driver");
    try {
      await own.driver.startTask({ task: { id: TASK, name: "exec", allocId: "alloc-exec-cancel", msgpackDriverConfig: encode({ command: "sleep", args: ["3600"] }) } });
      // Each cancel left what was queued for the stream (~0.4 MiB here) counted against the
      // connection's HTTP/2 session memory: with 128 MiB, new streams got ENHANCE_YOUR_CALM after
      // ~330 of them, and every call in flight failed when the plugin then sent GOAWAY.
      for (let i = 0; i < 450; i++) {
        const ac = new AbortController();
        const requests = new RequestQueue<Req>();
        requests.push(setup(["yes"])); // never half-closed, like Nomad
        const it = own.driver.execTaskStreaming(requests, { signal: ac.signal })[Symbol.asyncIterator]();
        let got = 0;
        while (got < 1 << 20) {
          const r = await it.next();
          expect([i, r.done]).toEqual([i, false]);
          got += r.value?.stdout?.data.length ?? 0;
        }
        ac.abort();
        await it.next().catch(() => undefined);
      }
      expect((await own.driver.inspectTask({ taskId: TASK })).task?.state).toBe(TaskState.RUNNING);
    } finally {
      await own.driver.destroyTask({ taskId: TASK, force: true }).catch(() => {});
      await own.kill();
    }
  }, 300_000);
});

describe("ExecTaskStreaming through @grpc/grpc-js", () => {
  interface GrpcRes {
    stdout?: { data: Buffer; close: boolean };
    stderr?: { data: Buffer; close: boolean };
    exited: boolean;
    result?: { exit_code: number };
  }

  /** Run one exec over grpc-js, never half-closing (like Nomad). */
  async function grpcExec(messages: object[]): Promise<{ stdout: string; stderr: string; closes: string[]; exited: number; exitCode?: number; status: grpc.StatusObject }> {
    const client = grpcDriverClient(plugin.address);
    try {
      const call = (client["ExecTaskStreaming"] as () => grpc.ClientDuplexStream<object, GrpcRes>).call(client);
      const res = { stdout: "", stderr: "", closes: [] as string[], exited: 0, exitCode: undefined as number | undefined };
      call.on("data", (r: GrpcRes) => {
        if (r.stdout?.data.length) res.stdout += r.stdout.data.toString();
        if (r.stderr?.data.length) res.stderr += r.stderr.data.toString();
        if (r.stdout?.close) res.closes.push("stdout");
        if (r.stderr?.close) res.closes.push("stderr");
        if (r.exited) {
          res.exited++;
          res.exitCode = r.result?.exit_code;
        }
      });
      const status = new Promise<grpc.StatusObject>((resolve) => call.on("status", resolve));
      call.on("error", () => {});
      for (const m of messages) call.write(m);
      return { ...res, status: await status, ...res };
    } finally {
      client.close();
    }
  }

  it("Nomad's vector without tty", async () => {
    const r = await grpcExec([{ setup: { task_id: TASK, command: ["sh", "-c", "echo hello stdout; echo hello stderr >&2; exit 43"] } }]);
    expect(r.status.code).toBe(0);
    expect(r).toMatchObject({ stdout: "hello stdout\n", stderr: "hello stderr\n", exited: 1, exitCode: 43 });
    expect(r.closes.sort()).toEqual(["stderr", "stdout"]);
  });

  it("Nomad's vector with tty, heartbeats included", async () => {
    const r = await grpcExec([
      { setup: { task_id: TASK, command: ["sh", "-c", "read x; stty size"], tty: true } },
      {},
      { tty_size: { height: 50, width: 40 } },
      {},
      { tty_size: { height: 100, width: 100 } },
      { stdin: { data: Buffer.from("go\n") } },
    ]);
    expect(r.status.code).toBe(0);
    expect(r.stdout).toContain("100 100\r\n");
    expect(r).toMatchObject({ stderr: "", exited: 1, exitCode: 0 });
  });

  it("first message not setup", async () => {
    const r = await grpcExec([{ stdin: { data: Buffer.from("x") } }]);
    expect(r.status.code).toBe(3);
    expect(r.status.details).toBe("first message must be setup");
    expect(r.exited).toBe(0);
  });
});

describe("ExecTaskStreaming, raw form", () => {
  let raw: PluginClient;
  beforeAll(async () => {
    raw = await launchFixture("test-driver", { env: { NOMADKIT_TEST_EXEC: "raw" } });
    await raw.driver.startTask({ task: { id: "raw-task", msgpackDriverConfig: encode({ command: "sleep", args: ["3600"] }) } });
  });
  afterAll(async () => {
    await raw?.driver.destroyTask({ taskId: "raw-task", force: true }).catch(() => {});
    await raw?.kill();
  });

  it("hands the driver the message stream as is (heartbeats included) and preferred over high-level", async () => {
    const requests = new RequestQueue<Req>();
    requests.push(setup(["echo", "hi"], false, "raw-task"), {}, { ttySize: { height: 1, width: 2 } }, {}, stdin("payload"), { stdin: { close: true } });
    const r = await collect(raw.driver.execTaskStreaming(requests));
    requests.end();
    expect(r.stdout.toString()).toBe("raw raw-task echo hi\npayloadheartbeats=2 resizes=1\n");
    expect(r).toMatchObject({ exitCode: 5, exited: 1, stdoutCloses: 1, stderrCloses: 1 });
  });

  it("still checks setup first", async () => {
    const requests = new RequestQueue<Req>();
    requests.push({});
    const err = await failure(collect(raw.driver.execTaskStreaming(requests)));
    requests.end();
    expect(err.rawMessage).toBe("first message must be setup");
  });
});

describe("a 256 MiB exec stream read slowly", () => {
  it("arrives intact while the plugin's memory stays bounded", async () => {
    const size = 256 * 1024 * 1024;
    const before = memoryOf(plugin.pid);
    const requests = new RequestQueue<Req>();
    requests.push(setup(["bash", "-c", `head -c ${size} /dev/urandom | tee >(sha256sum >&2)`]));
    const hash = createHash("sha256");
    let received = 0;
    let nextPause = 0;
    let stderr = "";
    let peakKiB = before.hwmKiB;
    let exitCode: number | undefined;
    for await (const r of plugin.driver.execTaskStreaming(requests)) {
      if (r.stdout?.data.length) {
        hash.update(r.stdout.data);
        received += r.stdout.data.length;
        if (received >= nextPause) {
          // The deliberately slow reader: a pause per MiB, so the process outruns us by far and an
          // unbounded buffer in the plugin would hold most of the 256 MiB.
          nextPause += 1024 * 1024;
          peakKiB = Math.max(peakKiB, memoryOf(plugin.pid).rssKiB);
          await sleep(15);
        }
      }
      if (r.stderr?.data.length) stderr += Buffer.from(r.stderr.data).toString();
      if (r.exited) exitCode = r.result?.exitCode;
    }
    requests.end();
    const after = memoryOf(plugin.pid);
    expect(received).toBe(size);
    expect(exitCode).toBe(0);
    expect(stderr.trim().split(/\s+/)[0]).toBe(hash.digest("hex"));
    const growthMiB = (Math.max(after.hwmKiB, peakKiB) - before.hwmKiB) / 1024;
    console.log(`plugin peak RSS growth during 256 MiB exec: ${growthMiB.toFixed(1)} MiB (VmHWM ${before.hwmKiB} -> ${after.hwmKiB} KiB)`);
    expect(growthMiB).toBeLessThan(96);
  }, 300_000);
});

void create;
void ({} as ExecTaskStreamingRequest);
