import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { assertDirectory, checkInterpreter, execvpName, findExecutable } from "../exec/find-executable.js";
import { withoutGoPluginVariables } from "../goplugin/env.js";
import { checkProcessEnv, checkProcessStrings } from "../runtime/process-strings.js";
import { assertNetnsUsable, needsNetns, netnsCommand } from "../network/exec.js";
import type { NetworkIsolation } from "../network/types.js";
import type { TaskCgroups } from "./cgroups.js";
import { resolveUser, userCommand, type ResolvedUser } from "./user.js";
import { assertSpawned } from "../exec/spawned.js";

/** Where and as whom a task's processes run: shared by the task itself, Exec and ExecStreaming. */
export interface TaskContext {
  /** Environment of the task's processes. */
  env: Record<string, string>;
  /** Working directory; undefined keeps the executor's. */
  cwd: string | undefined;
  /** User to run as; undefined keeps the executor's. */
  user: ResolvedUser | undefined;
  /** Network namespace to enter; undefined (or an empty path) stays in the executor's. */
  network: Partial<NetworkIsolation> | undefined;
  /** The task's cgroups, which its processes start in; undefined: the executor's. */
  cgroups?: TaskCgroups | undefined;
}

/** Inputs of {@link prepareTaskContext}, named after LaunchRequest's fields. */
export interface TaskContextOptions {
  /** `KEY=value` strings (LaunchRequest.env) or an object. Empty: the executor's own environment. */
  env?: readonly string[] | Record<string, string>;
  /** User name, uid or uid:gid; the task's USER, LOGNAME and HOME become that user's. */
  user?: string;
  /** Task directory; the default working directory. */
  taskDir?: string;
  /** Working directory; relative paths are taken from taskDir. */
  workDir?: string;
  /** Network namespace to run in. */
  network?: Partial<NetworkIsolation> | undefined;
  /** cgroups to start the task's processes in ({@link TaskCgroups.resolve}). */
  cgroups?: TaskCgroups | undefined;
}

/**
 * Validates and resolves a task's environment, working directory, user and network namespace.
 * Bad input throws InvalidArgument naming the LaunchRequest field (`env[3]`, `user`, `work_dir`,
 * `network_isolation.path`).
 *
 * @example
 * ```ts
 * import { prepareTaskContext, spawnInContext } from "@nomadkit/server/executor";
 * const ctx = await prepareTaskContext({ env: ["PATH=/usr/bin:/bin"], user: "nobody", taskDir: "/tmp" });
 * spawnInContext(ctx, "id", ["-u"], { stdio: "inherit" });
 * ```
 */
export async function prepareTaskContext(options: TaskContextOptions): Promise<TaskContext> {
  const env = parseEnv(options.env);
  let cwd: string | undefined;
  if (options.workDir) cwd = options.taskDir ? resolve(options.taskDir, options.workDir) : resolve(options.workDir);
  else if (options.taskDir) cwd = resolve(options.taskDir);
  if (cwd !== undefined) assertDirectory(cwd, options.workDir ? "work_dir" : "task_dir", Code.InvalidArgument);
  let user: ResolvedUser | undefined;
  if (options.user) {
    user = await resolveUser(options.user, "user");
    Object.assign(env, userEnv(user));
    const me = process.getuid?.();
    if (me !== undefined && me !== 0 && me !== user.uid) {
      throw new ConnectError(
        `user: running tasks as ${JSON.stringify(options.user)} needs the executor to run as root (it runs as uid ${me})`,
        Code.FailedPrecondition,
      );
    }
    if (me === user.uid && process.getgid?.() === user.gid) user = undefined; // nothing to switch
  }
  await assertNetnsUsable(options.network, "network_isolation.path");
  const ctx: TaskContext = { env, cwd, user, network: needsNetns(options.network) ? options.network : undefined };
  if (options.cgroups) ctx.cgroups = options.cgroups;
  return ctx;
}

/**
 * USER, LOGNAME and HOME of a task user, over what the task's env had (raw_exec's carries the
 * agent's own, root's): Nomad's executor sets them so (setCmdUser) for the task and exec into it.
 * Without a passwd entry the login name is the uid and HOME `/`.
 */
function userEnv(user: ResolvedUser): Record<string, string> {
  // A `uid:gid` user is not looked up in passwd: its name is that string, not a login name.
  const login = /^\d+:\d+$/.test(user.name) ? String(user.uid) : user.name;
  return { USER: login, LOGNAME: login, HOME: user.home };
}

function parseEnv(env: TaskContextOptions["env"]): Record<string, string> {
  if (env === undefined || (Array.isArray(env) && env.length === 0)) return withoutGoPluginVariables(process.env);
  const out: Record<string, string> = {};
  if (!Array.isArray(env)) {
    checkProcessEnv(env as Record<string, string>, (k) => `env[${JSON.stringify(k)}]`);
    return { ...(env as Record<string, string>) };
  }
  checkProcessStrings(env, (i) => `env[${i}]`);
  env.forEach((kv, i) => {
    const eq = kv.indexOf("=");
    if (eq <= 0) throw new ConnectError(`env[${i}]: ${JSON.stringify(kv.slice(0, 80))} is not KEY=value`, Code.InvalidArgument);
    out[kv.slice(0, eq)] = kv.slice(eq + 1);
  });
  return out;
}

/**
 * Finds an executable like execvp would, with the TASK's PATH and working directory, so a missing
 * command is a clear error at launch instead of a failing child (nsenter would exit 127).
 * Throws InvalidArgument naming `field`.
 *
 * @example
 * ```ts
 * import { lookPath, prepareTaskContext } from "@nomadkit/server/executor";
 * const ctx = await prepareTaskContext({ env: ["PATH=/usr/bin:/bin"] });
 * lookPath("sh", ctx); // "/usr/bin/sh"
 * ```
 */
export function lookPath(cmd: string, ctx: TaskContext, field = "cmd"): string {
  return findExecutable(cmd, ctx.env, ctx.cwd, field);
}

/**
 * The command line and spawn options that run `file args` in `ctx` (user with its groups, netns
 * wrapper), for runners other than `child_process.spawn` (e.g. node-pty). A task user is switched
 * to by `setpriv` (uid, gid and supplementary groups, as Nomad sets them), inside `nsenter` when the
 * task has a network namespace; only where setpriv is missing are uid/gid returned for the spawner
 * (which drops the supplementary groups). Spawn with the returned `env`: those wrappers run as root,
 * and the dynamic loader would honour a task's `LD_PRELOAD` (and the other variables glibc ignores
 * for setuid programs) in them, so those reach the command through `env` after the user switch.
 * Given `argv0` (the name `file` was looked up by, {@link lookPath}), the command gets it as its
 * argv[0], as Go's exec.Command gives it the name as typed: spawn with the returned `argv0`, or,
 * behind a wrapper, the wrapper is handed the name to exec (execvp finds the same file).
 *
 * @example
 * ```ts
 * import { commandInContext, lookPath } from "@nomadkit/server/executor";
 * const { file, args, env, argv0, uid, gid } = commandInContext(task.context, lookPath("sh", task.context), ["-l"], "cmd", "sh");
 * ```
 */
export function commandInContext(
  ctx: TaskContext,
  file: string,
  args: readonly string[],
  /** The request field that named `file`, for errors. */
  field = "cmd",
  /** The command's argv[0]; default `file`. */
  argv0?: string,
): {
  /** Executable to spawn (`nsenter` with a network namespace, `setpriv` with a user). */
  file: string;
  /** argv[0] to spawn `file` with (child_process.spawn's option); only without a wrapper. */
  argv0?: string;
  /** Its arguments. */
  args: string[];
  /** Environment to spawn with: the task's, less what is only set after the user switch. */
  env: Record<string, string>;
  /** uid to spawn with; only without setpriv and namespace. */
  uid?: number;
  /** gid to spawn with; only without setpriv and namespace. */
  gid?: number;
} {
  const asUser = ctx.user ? userCommand(ctx.user, file, args) : undefined;
  // setpriv, nsenter and env exec their command by name (execvp) with the task's PATH, in its
  // working directory: handed the name as typed, they give it to the command as its argv[0].
  const named = argv0 !== undefined && (asUser !== undefined || needsNetns(ctx.network)) ? execvpName(argv0, file, ctx.env, ctx.cwd) : file;
  // Root runs setpriv or nsenter before the switch: the loader's variables must not reach them.
  const wrapped = ctx.user !== undefined && ctx.user.uid !== 0 && (asUser !== undefined || needsNetns(ctx.network));
  const after = wrapped ? afterUserSwitch(ctx.env, named, args, field) : undefined;
  const env = after?.env ?? ctx.env;
  const inner = after ?? { file: named, args: [...args] };
  const cmd = ctx.user && asUser ? userCommand(ctx.user, inner.file, inner.args)! : inner;
  if (ctx.network) {
    // Entering the namespace needs root, so the user is switched to after setns.
    const ids = ctx.user && !asUser ? { uid: ctx.user.uid, gid: ctx.user.gid } : {};
    return { ...netnsCommand(ctx.network, cmd.file, cmd.args, ids), env };
  }
  const out: { file: string; argv0?: string; args: string[]; env: Record<string, string>; uid?: number; gid?: number } = { file: cmd.file, args: cmd.args, env };
  if (argv0 !== undefined && cmd.file === file) out.argv0 = argv0;
  if (ctx.user && !asUser) {
    out.uid = ctx.user.uid;
    out.gid = ctx.user.gid;
  }
  return out;
}

/**
 * What glibc's loader and libc ignore in setuid programs (UNSECURE_ENVVARS), and every `LD_*`: in
 * a program root runs they load code (`LD_PRELOAD`, `GCONV_PATH`) or write files (`MALLOC_TRACE`).
 */
const LOADER_VARIABLES = new Set([
  "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE",
  "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR", "TZDIR",
]);

let cachedEnvPath: string | null | undefined;

/**
 * `file args` behind coreutils' `env`, which sets the loader's variables from its arguments and
 * execs the command (same pid); the environment without them. Undefined when there are none, or
 * no `env` (then the wrappers get them, as before).
 */
function afterUserSwitch(env: Record<string, string>, file: string, args: readonly string[], field: string): { file: string; args: string[]; env: Record<string, string> } | undefined {
  const moved = Object.keys(env).filter((k) => k.startsWith("LD_") || LOADER_VARIABLES.has(k));
  if (moved.length === 0) return undefined;
  if (cachedEnvPath === undefined) cachedEnvPath = ["/usr/bin/env", "/bin/env"].find((p) => existsSync(p)) ?? null;
  if (cachedEnvPath === null) return undefined;
  const rest = { ...env };
  for (const k of moved) delete rest[k];
  const assignments = moved.map((k) => `${k}=${env[k]}`);
  // env would take it for one more variable (and a shell in between would rewrite the environment).
  if (file.includes("=")) {
    throw new ConnectError(`${field}: cannot start ${JSON.stringify(file)} as another user with ${moved[0]} set: its path contains "="`, Code.InvalidArgument);
  }
  return { file: cachedEnvPath, args: ["--", ...assignments, file, ...args], env: rest };
}

/**
 * Spawns `file args` in a task context: its env, cwd, user (uid, gid and groups), network namespace
 * (through nsenter) and cgroups (entered before the command runs; a cgroup that refuses the
 * process throws FailedPrecondition). `options` may add stdio, detached, `argv0` (the command's
 * argv[0], kept behind the wrappers too), etc.; env/cwd/uid/gid come from `ctx`.
 *
 * @example
 * ```ts
 * import { prepareTaskContext, spawnInContext } from "@nomadkit/server/executor";
 * const ctx = await prepareTaskContext({ env: launch.env, user: launch.user, network: launch.networkIsolation });
 * const child = spawnInContext(ctx, "/bin/sh", ["-c", "ip -o link"], { stdio: "pipe" });
 * ```
 */
export function spawnInContext(ctx: TaskContext, file: string, args: readonly string[], options: SpawnOptions = {}): ChildProcess {
  const { argv0, ...rest } = options;
  const c = commandInContext(ctx, file, args, "cmd", argv0);
  // Behind nsenter/setpriv a missing interpreter would only be an exit code: say so now.
  if (c.file !== file) checkInterpreter(file);
  const opts: SpawnOptions = { ...rest, env: c.env };
  if (c.argv0 !== undefined) opts.argv0 = c.argv0;
  if (ctx.cwd !== undefined) {
    // Checked at launch, but the allocation's directory may be gone since (an operator, a GC): say
    // so rather than leave it to the spawn, which blames its first program (the cgroup gate's perl).
    assertDirectory(ctx.cwd, "cwd", Code.FailedPrecondition);
    opts.cwd = ctx.cwd;
  }
  if (c.uid !== undefined) opts.uid = c.uid;
  if (c.gid !== undefined) opts.gid = c.gid;
  try {
    return ctx.cgroups ? ctx.cgroups.spawn(c.file, c.args, opts) : assertSpawned(spawn(c.file, c.args, opts), file);
  } catch (err) {
    // Node throws some refusals at once (E2BIG for arguments over 128 KiB) and reports others as an
    // "error" event; callers map those to InvalidArgument naming cmd: so are these.
    if (err instanceof ConnectError) throw err;
    throw new ConnectError(`cmd: cannot start ${JSON.stringify(file)}: ${(err as Error).message}`, Code.InvalidArgument);
  }
}
