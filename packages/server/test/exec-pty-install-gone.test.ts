// A task's executor loads node-pty on the first terminal, from the directory it was started from.
// After an upgrade into a new directory the old one is removed while the executor runs on: the
// error must say so, not send the operator off to install a C++ compiler.
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { RequestQueue } from "@nomadkit/client";
import {
  ExecTaskStreamingRequestSchema,
  type ExecTaskStreamingRequest,
} from "@nomadkit/protocol/driver";
import { afterAll, beforeAll, expect, it } from "vitest";
import {
  executorBinPath,
  launchExecutor,
  type ExecutorHandle,
} from "../src/executor.js";
import { collectExec } from "./executor-helpers.js";

const packageDir = join(__dirname, "..");
let root: string;
let exe: ExecutorHandle | undefined;

beforeAll(() => {
  if (!existsSync(executorBinPath()))
    throw new Error(
      `build first: ${executorBinPath()} is missing (npx turbo run build)`,
    );
  root = mkdtempSync(join(tmpdir(), "nk-pty-gone-"));
});
afterAll(async () => {
  if (exe) {
    await exe.shutdownTask("SIGKILL", 0).catch(() => undefined);
    await exe.kill().catch(() => undefined);
  }
  rmSync(root, { recursive: true, force: true });
});

/** A dependency's installed directory, as Node would find it from this package. */
function installed(name: string): string {
  for (let dir = packageDir; ; dir = dirname(dir)) {
    const candidate = join(dir, "node_modules", name);
    if (existsSync(join(candidate, "package.json")))
      return realpathSync(candidate);
    if (dirname(dir) === dir) throw new Error(`${name} is not installed`);
  }
}

/**
 * An install of the plugin in a directory of its own: a copy of @nomadkit/server's package (its
 * files are what the upgrade removes), its dependencies and node-pty linked in from this repo.
 */
function installCopy(dir: string): string {
  const pkg = JSON.parse(
    readFileSync(join(packageDir, "package.json"), "utf8"),
  ) as {
    dependencies: Record<string, string>;
    optionalDependencies: Record<string, string>;
  };
  const own = join(dir, "node_modules", "@nomadkit", "server");
  mkdirSync(own, { recursive: true });
  cpSync(join(packageDir, "package.json"), join(own, "package.json"));
  cpSync(join(packageDir, "dist"), join(own, "dist"), { recursive: true });
  for (const name of [
    ...Object.keys(pkg.dependencies),
    ...Object.keys(pkg.optionalDependencies),
  ]) {
    const link = join(dir, "node_modules", name);
    mkdirSync(dirname(link), { recursive: true });
    symlinkSync(installed(name), link);
  }
  return join(own, "dist", "cjs", "executor", "bin.js");
}

it("a terminal asked of an executor whose install directory was removed says so, not how to build node-pty", async () => {
  const app = join(root, "app-v1");
  exe = await launchExecutor({ executorPath: installCopy(app) });
  await exe.client.launch({
    cmd: "/bin/sleep",
    args: ["600"],
    env: ["PATH=/usr/bin:/bin"],
  });
  // The upgrade: a new build elsewhere, the old directory removed; the executor runs on.
  rmSync(app, { recursive: true, force: true });
  const q = new RequestQueue<ExecTaskStreamingRequest>();
  q.push(
    create(ExecTaskStreamingRequestSchema, {
      setup: { taskId: "t", command: ["/bin/sh"], tty: true },
    }),
  );
  const err = await (async () => {
    for await (const _ of exe.client.execStreaming(q));
  })().then(
    () => undefined,
    (e: unknown) => e,
  );
  q.end();
  expect(err).toBeInstanceOf(ConnectError);
  expect((err as ConnectError).code).toBe(Code.FailedPrecondition);
  const message = (err as ConnectError).rawMessage;
  expect(message).toContain("tty: a terminal needs node-pty");
  expect(message).toContain(`${app}/node_modules/@nomadkit/server/dist/cjs/`);
  expect(message).toContain(
    "the plugin was upgraded or moved after this process started",
  );
  expect(message).not.toContain("C++ compiler");
  expect(message).toContain("commands without a terminal still run");
  // As it says: the executor runs commands without a terminal, streamed or buffered.
  const plain = await exe.client.exec({
    cmd: "/bin/echo",
    args: ["still here"],
  });
  expect(Buffer.from(plain.output).toString()).toBe("still here\n");
  const s = new RequestQueue<ExecTaskStreamingRequest>();
  s.push(
    create(ExecTaskStreamingRequestSchema, {
      setup: {
        taskId: "t",
        command: ["/bin/sh", "-c", "echo streamed; exit 4"],
        tty: false,
      },
    }),
  );
  const { stdout, exitCode } = await collectExec(exe.client.execStreaming(s));
  s.end();
  expect({ stdout, exitCode }).toEqual({ stdout: "streamed\n", exitCode: 4 });
});
