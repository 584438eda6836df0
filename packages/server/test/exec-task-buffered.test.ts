// ExecTask (Nomad's script checks) for a driver that only has the high-level execTaskStreaming,
// as the README's hello driver: the SDK runs it as a session without input and answers as Nomad's
// executor does (ExecScript), also when the command outlives its timeout or dies by a signal.
import { Code, ConnectError } from "@connectrpc/connect";
import type { DriverClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runExecCommand } from "../src/exec/index.js";
import { fakeDriver, serveTestDriver, type ServedTestDriver } from "./runtime-helpers.js";

let served: ServedTestDriver | undefined;
let driver: DriverClient;

beforeAll(async () => {
  served = await serveTestDriver(
    fakeDriver("highlevel", {
      execTaskStreaming: (session) => runExecCommand({ command: session.command, tty: session.tty }, session),
    }),
  );
  driver = served.driver;
});

afterAll(async () => {
  await served?.close();
});

const text = (b: Uint8Array) => Buffer.from(b).toString();

describe("ExecTask through execTaskStreaming", () => {
  it("answers the command's output and exit code", async () => {
    const r = await driver.execTask({ taskId: "t1", command: ["sh", "-c", "echo out; echo err >&2; exit 3"], timeout: { seconds: 30n } });
    expect([text(r.stdout), text(r.stderr), r.result?.exitCode]).toEqual(["out\n", "err\n", 3]);
  });

  it("past the timeout, kills the command and answers with what it printed and exit code -1", async () => {
    const r = await driver.execTask({ taskId: "t1", command: ["sh", "-c", "echo started; exec sleep 60"], timeout: { nanos: 300_000_000 } });
    expect(text(r.stdout)).toBe("started\n");
    expect(r.result).toMatchObject({ exitCode: -1, signal: 0 });
  });

  it("a command killed by a signal exits -1, as Nomad's ExecScript reports it", async () => {
    const r = await driver.execTask({ taskId: "t1", command: ["sh", "-c", "kill -9 $$"], timeout: { seconds: 30n } });
    expect(r.result).toMatchObject({ exitCode: -1, signal: 0 });
  });

  it("keeps the last 4 KiB of each stream", async () => {
    const r = await driver.execTask({ taskId: "t1", command: ["sh", "-c", "head -c 10000 /dev/zero | tr '\\0' x; echo; echo FAIL"], timeout: { seconds: 30n } });
    expect(r.stdout.length).toBe(4096);
    expect(text(r.stdout).endsWith("x\nFAIL\n")).toBe(true);
  });
});

describe("ExecTask's errors", () => {
  it("name ExecTaskRequest's own field, not the exec session's setup message", async () => {
    const err = await driver.execTask({ taskId: "t1", command: ["nk-no-such-command"], timeout: { seconds: 30n } }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: Code.InvalidArgument });
    expect((err as ConnectError).rawMessage).toMatch(/^command\[0\]: /);
  });
});
