import { accessSync, constants, readFileSync, statSync } from "node:fs";
import { constants as osConstants } from "node:os";
import { extname, resolve } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  PluginLaunchError,
  PluginShutdownError,
  RecoverableError,
  launchPlugin,
  reattachPlugin,
  type PluginClient,
  type PluginLogEntry,
  type PluginLogLevel,
  type ReattachConfig,
} from "@nomadkit/client";
import { CliError } from "./errors.js";
import { atExit, interrupted, launchInterrupted, onInterrupt } from "./interrupt.js";

/** Options every command shares (set on the root program). */
export interface GlobalOptions {
  /** `--log-level`: lowest plugin log level shown on stderr; default `warn`. */
  logLevel: PluginLogLevel | "off";
  /** `--start-timeout <ms>` as typed (validated when used); default 60000 ms. */
  startTimeout?: string;
  /** `--automtls`: launch the plugin with go-plugin AutoMTLS. */
  automtls?: boolean;
  /** `--call-timeout <ms>` as typed (validated when used); default 30000 ms. */
  callTimeout?: string;
}

/** Default deadline of the set-up calls a command makes (see {@link Connected.call}). */
export const DEFAULT_CALL_TIMEOUT_MS = 30_000;

/** What `nomadkit run --state <file>` writes so `exec` and `stats` can reach the running plugin. */
export interface RunState {
  /** Marks the file as a run state, so `<plugin>` arguments can be told apart from plugin binaries. */
  kind: "nomadkit-run-state";
  /** The plugin as named on the `run` command line (for messages). */
  plugin: string;
  /** Id of the task `run` started. */
  taskId: string;
  /** How to reach the running plugin (`reattachPlugin` of `@nomadkit/client`). */
  reattach: ReattachConfig;
}

const LEVEL_ORDER: Record<string, number> = {
  trace: 0,
  debug: 1,
  info: 2,
  warn: 3,
  error: 4,
  off: 5,
};

/** Prints plugin log entries at or above `level` to stderr. */
export function stderrLogger(
  level: GlobalOptions["logLevel"],
  name: string,
): (e: PluginLogEntry) => void {
  const min = LEVEL_ORDER[level] ?? LEVEL_ORDER.warn!;
  return (e) => {
    if (LEVEL_ORDER[e.level]! < min) return;
    const fields = Object.entries(e.fields)
      .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
      .join(" ");
    const module = e.module ? `${e.module}: ` : "";
    process.stderr.write(
      `[${name}] ${e.level.toUpperCase()} ${module}${e.message}${fields ? " " + fields : ""}\n`,
    );
  };
}

function readState(path: string): RunState | undefined {
  if (extname(path) !== ".json") return undefined;
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new CliError(
      `plugin ${path}: cannot read run state file: ${(err as Error).message}`,
    );
  }
  const s = value as Partial<RunState> | null;
  if (
    !s ||
    s.kind !== "nomadkit-run-state" ||
    !s.reattach ||
    typeof s.taskId !== "string"
  ) {
    throw new CliError(
      `plugin ${path}: not a state file written by "nomadkit run --state"`,
    );
  }
  return s as RunState;
}

/** Resolves `<plugin>` to a command line: JavaScript files run with this Node, others directly. */
export function pluginCommand(plugin: string): { cmd: string; args: string[] } {
  const path = resolve(plugin);
  let st;
  try {
    st = statSync(path);
  } catch {
    throw new CliError(`plugin ${plugin}: no such file`);
  }
  if (!st.isFile()) throw new CliError(`plugin ${plugin}: not a file`);
  if ([".js", ".mjs", ".cjs"].includes(extname(path)))
    return { cmd: process.execPath, args: [path] };
  try {
    accessSync(path, constants.X_OK);
  } catch {
    // chmod +x would not help: Node cannot run a .ts file (ERR_UNKNOWN_FILE_EXTENSION), nor Nomad.
    if ([".ts", ".mts", ".cts"].includes(extname(path)))
      throw new CliError(
        `plugin ${plugin}: TypeScript source: compile it (tsc) or bundle it (npx nomadkit bundle ${plugin}) and pass the output`,
      );
    throw new CliError(`plugin ${plugin}: not executable (chmod +x ${plugin})`);
  }
  return { cmd: path, args: [] };
}

/**
 * Why Nomad could not start a JavaScript plugin file that this CLI runs with its own Node: Nomad
 * skips files in plugin_dir without an exec bit and runs the rest directly (ENOEXEC without a `#!`).
 */
export function nomadLaunchProblems(plugin: string): string[] {
  const path = resolve(plugin);
  if (![".js", ".mjs", ".cjs"].includes(extname(path))) return [];
  const problems: string[] = [];
  if ((statSync(path).mode & 0o111) === 0) problems.push(`it is not executable (chmod +x ${plugin}): Nomad skips it in plugin_dir`);
  let head = "";
  try {
    head = readFileSync(path, { encoding: "utf8", flag: "r" }).slice(0, 2);
  } catch {
    // unreadable: the launch says so
  }
  if (head !== "#!") problems.push("it has no #! line (#!/usr/bin/env node): Nomad runs it directly, which fails");
  return problems;
}

/** `--start-timeout` in milliseconds, checked; `undefined` when not given. */
export function parseStartTimeout(g: GlobalOptions): number | undefined {
  return positiveMs("--start-timeout", g.startTimeout);
}

/** `--call-timeout` in milliseconds, checked; the default when not given. */
export function parseCallTimeout(g: GlobalOptions): number {
  return positiveMs("--call-timeout", g.callTimeout) ?? DEFAULT_CALL_TIMEOUT_MS;
}

/** The longest delay a Node timer honours, in ms (~24.8 days; a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Checks `--cgroup-parent` by the rule createTaskCgroup applies, so that a bad parent fails before
 * the plugin starts (and is not reported as the driver's failure).
 */
export function checkCgroupParent(parent: string | undefined): void {
  if (parent === undefined) return;
  const levels = parent.split("/").filter((l) => l !== "" && l !== ".");
  if (levels.length === 0 || levels.includes("..") || parent.includes("\0"))
    throw new CliError(`--cgroup-parent ${JSON.stringify(parent)}: must name a cgroup below the root, without ".."`);
}

/**
 * A signal flag as the name Nomad sends (`SIGTERM`): Nomad's executor looks names up exactly, so
 * `TERM`, `term` and `15` are turned into that name here rather than sent as typed.
 */
export function signalFlag(flag: string, value: string, example: string): string {
  const v = value.trim().toUpperCase();
  const name = /^\d+$/.test(v)
    ? Object.keys(osConstants.signals).find((n) => (osConstants.signals as Record<string, number>)[n] === Number(v))
    : v.startsWith("SIG") ? v : `SIG${v}`;
  if (name === undefined || !Object.hasOwn(osConstants.signals, name))
    throw new CliError(`${flag} ${JSON.stringify(value)}: not a signal (a name such as ${example}, or a number)`);
  return name;
}

/** A flag's positive number of milliseconds, checked; `undefined` when not given. */
export function positiveMs(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const ms = Number(value);
  if (!Number.isFinite(ms) || ms <= 0) {
    throw new CliError(
      `${flag} ${JSON.stringify(value)}: expected a positive number of milliseconds`,
    );
  }
  // Timeouts end up in timers: a longer one would expire at once.
  if (ms > MAX_TIMER_MS)
    throw new CliError(`${flag} ${JSON.stringify(value)}: at most ${MAX_TIMER_MS} milliseconds (about 24.8 days)`);
  return ms;
}

/** A connected plugin plus how to let go of it when the command is done. */
export interface Connected {
  plugin: PluginClient;
  /** The name used in messages. */
  name: string;
  /** The task id from a run state file, if `<plugin>` was one. */
  stateTaskId?: string;
  /**
   * Options for the calls a command makes to set up and inspect (PluginInfo, schemas, SetConfig,
   * Init, Capabilities, TaskConfigSchema): `--call-timeout`, so a plugin that never answers does
   * not hang the command. StartTask, WaitTask and streams take as long as they take.
   */
  call: { timeoutMs: number };
  /** Kills a launched plugin; only disconnects from a reattached one. */
  release(): Promise<void>;
}

/**
 * Launches `<plugin>`, or reattaches when it is a state file from `nomadkit run --state`.
 */
export async function connectPlugin(
  plugin: string,
  g: GlobalOptions,
  extra: {
    onStdout?(d: Uint8Array): void;
    onStderr?(d: Uint8Array): void;
  } = {},
): Promise<Connected> {
  const call = { timeoutMs: parseCallTimeout(g) };
  const state = readState(plugin);
  if (state) {
    let client: PluginClient;
    try {
      client = await reattachPlugin(state.reattach, {
        logger: stderrLogger(g.logLevel, state.plugin),
        ...extra,
      });
    } catch (err) {
      throw new CliError(
        `plugin ${plugin}: cannot reattach to ${state.plugin} (pid ${state.reattach.pid}); is "nomadkit run" still running? ${(err as Error).message}`,
      );
    }
    const done = onInterrupt(() => client.close());
    // Nor killed when this command exits at once: the plugin is the one `run` launched, and runs on for it.
    return {
      plugin: client,
      name: state.plugin,
      stateTaskId: state.taskId,
      call,
      release: async () => {
        done();
        client.close();
      },
    };
  }
  const { cmd, args } = pluginCommand(plugin);
  const startTimeoutMs = parseStartTimeout(g);
  let client: PluginClient;
  try {
    client = await launchPlugin(cmd, args, {
      logger: stderrLogger(g.logLevel, plugin),
      autoMTLS: g.automtls,
      startTimeoutMs,
      signal: interrupted,
      ...extra,
    });
  } catch (err) {
    // Ctrl-C reaches the plugin too: however the race between its death and ours goes, 128+N.
    launchInterrupted(err);
    if (err instanceof PluginLaunchError) throw new CliError(err.message);
    throw err;
  }
  // Nomad's stop sequence: Driver.Shutdown (2 s, errors such as Unimplemented ignored), then kill.
  // Once: an interruption (a signal, output closed under us) while release() is stopping the
  // plugin must wait for that stop, not exit in the middle of it and orphan the plugin.
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      if (!client.exitSignal.aborted) {
        await client.driver.shutdown({}, { timeoutMs: 2000 }).catch(() => {});
      }
      await client.kill();
    })());
  const done = onInterrupt(stop);
  // Exiting before the stop is done (a second signal, the clean-up's bound) left the plugin running
  // for good, reparented to init, and its socket directory: no Shutdown then, only SIGKILL. What it
  // started goes too (an executor outlives its plugin for Nomad to recover it; nothing will here).
  const noExitKill = atExit(() => {
    if (client.exitSignal.aborted) return;
    client.killSync({ processTree: true });
    process.stderr.write(`nomadkit: plugin ${plugin} (pid ${client.pid}) and the processes it started killed (SIGKILL): exiting before they were stopped\n`);
  });
  return {
    plugin: client,
    name: plugin,
    call,
    release: async () => {
      await stop();
      done();
      noExitKill();
    },
  };
}

/**
 * Turns an RPC failure into a CLI error naming the plugin and the call (and `note`, say where the
 * config sent came from); when the plugin died under the call, with how it ended and the last lines
 * of its stderr (its panic, say).
 */
export async function rpcError(c: Connected, rpc: string, err: unknown, note = ""): Promise<CliError> {
  const error = await describeRpcError(c, rpc, err);
  if (note) error.message = error.message.replace(/^.*/, (first) => `${first} ${note}`);
  return error;
}

/** `call`'s result; its failure as {@link rpcError} describes it. */
export function orRpcError<T>(c: Connected, rpc: string, call: Promise<T>): Promise<T> {
  return call.catch(async (e: unknown) => {
    throw await rpcError(c, rpc, e);
  });
}

/**
 * What Nomad does with a RecoverableError from `rpc`: its task runner restarts a task whose
 * StartTask failed recoverably and fails it otherwise; its stats hook retries TaskStats with a
 * backoff, and stops collecting the task's stats on an unrecoverable error.
 */
function recoverableNote(rpc: string, recoverable: boolean): string {
  if (rpc === "Driver.StartTask")
    return recoverable ? "recoverable: Nomad restarts the task as its restart policy allows" : "not recoverable: Nomad fails the task without restarting it";
  if (rpc === "Driver.TaskStats")
    return recoverable ? "recoverable: Nomad retries the call with a backoff" : "not recoverable: Nomad stops collecting the task's stats";
  return recoverable ? "recoverable" : "not recoverable";
}

async function describeRpcError(c: Connected, rpc: string, err: unknown): Promise<CliError> {
  const name = c.name;
  if (err instanceof CliError) return err;
  if (err instanceof PluginShutdownError)
    return new CliError(`plugin ${name}: ${rpc}: the plugin exited${await exitReport(c.plugin)}`);
  // A FailedPrecondition with a RecoverableError detail: what Nomad then does depends on the call,
  // so say which the driver meant and what follows where Nomad acts on it.
  if (err instanceof RecoverableError)
    return new CliError(`plugin ${name}: ${rpc} failed: ${err.message} (${recoverableNote(rpc, err.recoverable)})`);
  if (err instanceof ConnectError) {
    if (err.code === Code.Unimplemented)
      return new CliError(`plugin ${name} does not implement ${rpc}`);
    if (err.code === Code.DeadlineExceeded)
      return new CliError(
        `plugin ${name}: ${rpc} did not answer in time (--call-timeout; ${err.rawMessage})`,
      );
    return new CliError(
      `plugin ${name}: ${rpc} failed: ${Code[err.code]}: ${err.rawMessage}`,
    );
  }
  return new CliError(
    `plugin ${name}: ${rpc} failed: ${err instanceof Error ? err.message : String(err)}`,
  );
}

/**
 * How `plugin` ended (` with status N`, ` on signal SIG…`) and the last lines of its stderr, as a
 * PluginLaunchError quotes them; "" for what a reattached plugin does not tell.
 */
async function exitReport(plugin: PluginClient): Promise<string> {
  const { code, signal } = await plugin.exited;
  // Its last words may still be in the pipe when its exit is seen; a child holding the pipe gets 1 s.
  const stderr = plugin.process?.stderr;
  if (stderr && !stderr.closed) {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      new Promise((r) => stderr.once("close", r)),
      new Promise((r) => (timer = setTimeout(r, 1000))),
    ]);
    clearTimeout(timer);
  }
  const how = signal ? ` on signal ${signal}` : code !== null ? ` with status ${code}` : "";
  const recent = plugin.recentStderr();
  return recent ? `${how}\n--- plugin stderr (most recent last) ---\n${recent}` : how;
}

/** Runs `fn` with a connected plugin and always releases it. */
export async function withPlugin<T>(
  plugin: string,
  g: GlobalOptions,
  fn: (c: Connected) => Promise<T>,
  extra?: Parameters<typeof connectPlugin>[2],
): Promise<T> {
  const c = await connectPlugin(plugin, g, extra);
  try {
    return await fn(c);
  } finally {
    await c.release();
  }
}
