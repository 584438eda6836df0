// A NUL byte cannot be part of a command, argument or environment variable (the kernel takes them
// NUL-terminated): the executor refuses one with InvalidArgument naming the LaunchRequest or
// ExecRequest field, instead of Node's TypeError about its own parameters.
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { execInContext } from "../src/executor/exec.js";
import { prepareTaskContext } from "../src/executor/context.js";
import { TaskProcess } from "../src/executor/process.js";
import { resolveUser } from "../src/executor/user.js";

const PATH = `PATH=${process.env.PATH}`;

async function refusal(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  expect((err as ConnectError).code).toBe(Code.InvalidArgument);
  return (err as ConnectError).rawMessage;
}

describe("NUL bytes in what a process is started with", () => {
  it("TaskProcess.launch names cmd, args[i] and env[i] (or env[\"KEY\"])", async () => {
    expect(await refusal(TaskProcess.launch({ cmd: "ech\0o", env: [PATH] }))).toMatch(/^cmd: contains a NUL byte/);
    expect(await refusal(TaskProcess.launch({ cmd: "echo", args: ["ok", "a\0b"], env: [PATH] }))).toMatch(/^args\[1\]: contains a NUL byte/);
    expect(await refusal(TaskProcess.launch({ cmd: "echo", env: [PATH, "A=x\0y"] }))).toMatch(/^env\[1\]: contains a NUL byte/);
    expect(await refusal(TaskProcess.launch({ cmd: "echo", env: { PATH: process.env.PATH!, B: "\0" } }))).toMatch(/^env\["B"\]: contains a NUL byte/);
  });

  it("execInContext names cmd and args[i]", async () => {
    const ctx = await prepareTaskContext({ env: [PATH] });
    expect(await refusal(execInContext(ctx, "sh\0", []))).toMatch(/^cmd: contains a NUL byte/);
    expect(await refusal(execInContext(ctx, "echo", ["a\0"]))).toMatch(/^args\[0\]: contains a NUL byte/);
    expect((await execInContext(ctx, "echo", ["fine"])).exitCode).toBe(0);
  });
});

describe("a command the kernel refuses when it starts", () => {
  // Node throws E2BIG at once (ENOENT comes later, as an "error" event): both name cmd.
  const huge = "x".repeat(200 * 1024);

  it("TaskProcess.launch answers InvalidArgument naming cmd for an argument over 128 KiB", async () => {
    expect(await refusal(TaskProcess.launch({ cmd: "/bin/echo", args: [huge], env: [PATH] }))).toMatch(/^cmd: cannot start "\/bin\/echo": spawn E2BIG/);
  });

  it("execInContext answers InvalidArgument naming cmd", async () => {
    const ctx = await prepareTaskContext({ env: [PATH] });
    expect(await refusal(execInContext(ctx, "/bin/echo", [huge]))).toMatch(/^cmd: cannot start "\/bin\/echo": spawn E2BIG/);
  });
});

describe("the task's working directory", () => {
  it("prepareTaskContext names task_dir or work_dir when it is missing or not a directory", async () => {
    expect(await refusal(prepareTaskContext({ env: [PATH], taskDir: "/nonexistent-nomadkit-dir" }))).toBe('task_dir: "/nonexistent-nomadkit-dir" does not exist');
    expect(await refusal(prepareTaskContext({ env: [PATH], taskDir: "/etc", workDir: "passwd" }))).toBe('work_dir: "/etc/passwd" is not a directory');
    expect((await prepareTaskContext({ env: [PATH], taskDir: "/etc", workDir: "." })).cwd).toBe("/etc");
  });
});

describe("a numeric task user", () => {
  it("is refused beyond 32 bits or at (uid_t)-1, naming user: setpriv truncated 4294967296 to 0, root", async () => {
    for (const user of ["4294967296", "4294967296:4294967296", "65534:4294967296", "4294967295", "99999999999999999999"]) {
      expect(await refusal(resolveUser(user)), user).toMatch(/^user: ".*": (uid|gid) \d+ is not a valid id \(0 to 4294967294\)$/);
      expect(await refusal(TaskProcess.launch({ cmd: "/bin/true", env: [PATH], user })), user).toMatch(/^user: /);
    }
    expect(await resolveUser("4294967294:4294967294")).toMatchObject({ uid: 4294967294, gid: 4294967294 });
    expect(await resolveUser("0:0")).toMatchObject({ uid: 0, gid: 0 });
  });
});
