// nomadkit run: SetConfig, StartTask, WaitTask, like Nomad running one task.
import { randomUUID } from "node:crypto";
import {
  accessSync,
  existsSync,
  constants,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, extname, join, resolve } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  DEFAULT_TASK_MEMORY_MB,
  createTaskCgroup,
  createTaskDirs,
  nomadTaskConfig,
  openTaskLogs,
  PluginShutdownError,
  TaskCgroupUnavailableError,
  type TaskCgroup,
  type TaskDirs,
  type TaskLogs,
} from "@nomadkit/client";
import type { TaskHandle } from "@nomadkit/protocol/driver";
import { CliError } from "../errors.js";
import {
  encodeOperatorConfig,
  parseEnvPairs,
  readJsonOption,
} from "../files.js";
import {
  checkCgroupParent,
  connectPlugin,
  orRpcError,
  rpcError,
  signalFlag,
  type Connected,
  type GlobalOptions,
  type RunState,
} from "../plugin.js";
import { atExit, interrupt, interrupted, onInterrupt } from "../interrupt.js";
import { parseResourceFlags, type ResourceFlags } from "../resources.js";
import { configure } from "./inspect.js";

export interface RunOptions extends ResourceFlags {
  config?: string;
  taskConfig?: string;
  name: string;
  env: string[];
  state?: string;
  /** The task's kill_signal, sent with StopTask on Ctrl-C; "" (Nomad's when the job sets none) lets the driver pick. */
  /** Undefined when not given (commander prints a default's value itself: the help text says it). */
  killSignal?: string;
  /** Create the task's cgroup as Nomad's client does (false with --no-task-cgroup). */
  taskCgroup: boolean;
  /** Its parent (--cgroup-parent); default createTaskCgroup's. */
  cgroupParent?: string;
}

/**
 * How many times a run relaunches a plugin that died under its task to recover the task, as Nomad
 * does (over the whole run: a plugin that keeps dying will not be saved by more).
 */
const MAX_PLUGIN_RELAUNCHES = 3;

/**
 * How long a run waits for DestroyTask of its started task, once the task has exited or the run is
 * being cleaned up. Unbounded, a DestroyTask that never answers held the run forever after its task
 * had exited, or used up the whole (bounded) clean-up after a signal, which then exited with the
 * plugin and the task left running, as the plugin is stopped after the task is destroyed. Then the
 * task's cgroup is emptied and the plugin stopped, as usual.
 */
const DESTROY_TIMEOUT_MS = 10_000;

/**
 * How long removing the task's cgroup may hold up an exit that skips the clean-up (a second
 * signal, the clean-up's own bound): what is in it is killed, and the directories go once it has left.
 */
const EXIT_CGROUP_MS = 500;

function exitStatus(
  result: { exitCode: number; signal: number } | undefined,
): number {
  if (!result) return 1;
  if (result.signal > 0 && result.exitCode === 0) return 128 + result.signal;
  return result.exitCode;
}

export async function runCommand(
  plugin: string,
  opts: RunOptions,
  g: GlobalOptions,
): Promise<void> {
  // Validate inputs before starting anything.
  const config = opts.config === undefined ? undefined : readJsonOption("--config", opts.config);
  const taskConfig =
    opts.taskConfig === undefined ? undefined : readJsonOption("--task-config", opts.taskConfig);
  const env = parseEnvPairs("--env", opts.env);
  if (opts.state !== undefined) checkStatePath(opts.state);
  // It names the task's directory below the allocation's.
  if (!/^[A-Za-z0-9_.-]+$/.test(opts.name) || /^\.\.?$/.test(opts.name))
    throw new CliError(
      `--name ${JSON.stringify(opts.name)}: use letters, digits, "_", "." or "-" (not "." or "..")`,
    );
  // Checked here: a signal the driver refuses would only surface as a StopTask failure at Ctrl-C.
  const killSignal = opts.killSignal === undefined || opts.killSignal === "" ? "" : signalFlag("--kill-signal", opts.killSignal, "SIGTERM");
  const parent = opts.cgroupParent;
  if (opts.taskCgroup) checkCgroupParent(parent);
  const resources = parseResourceFlags(opts, DEFAULT_TASK_MEMORY_MB);
  // Nomad's reserve partition is a cpuset cgroup of the task's own: without it the cores mean nothing.
  if (resources.cores !== undefined && !opts.taskCgroup)
    throw new CliError(`--cores ${opts.cores}: reserved cores need the task's cgroup, which --no-task-cgroup turns off`);

  // The directories Nomad makes before StartTask; drivers may rely on them. Made before the plugin
  // starts: a name the filesystem refuses (too long) then fails with nothing to stop.
  let allocDir: string;
  try {
    allocDir = mkdtempSync(join(tmpdir(), "nomadkit-run-"));
  } catch (err) {
    throw new CliError(`cannot create the allocation directory in ${tmpdir()}: ${errorCode(err)}`);
  }
  const removeAllocDir = () => rmSync(allocDir, { recursive: true, force: true });
  let dirs: TaskDirs;
  try {
    dirs = createTaskDirs(allocDir, opts.name);
  } catch (err) {
    removeAllocDir();
    throw new CliError(`--name ${JSON.stringify(opts.name)}: cannot create the task's directory: ${errorCode(err)}`);
  }
  // Also while the plugin is being launched; registered first, so it runs last.
  const noAllocDirCleanup = onInterrupt(removeAllocDir);
  const statePath = opts.state ? resolve(opts.state) : undefined;
  let wroteState = false;
  let taskId = "";
  // Exiting without the clean-up (a second signal) left these too: last, after the task's cgroup
  // and the plugin (their hooks are registered later). The state file would name a dead plugin.
  const noExitRemoval = atExit(() => {
    if (statePath && wroteState && holdsTask(statePath, taskId)) rmSync(statePath, { force: true });
    removeAllocDir();
  });
  // Replaced when the plugin dies under the task and is relaunched to recover it.
  let c: Connected;
  try {
    c = await connectPlugin(plugin, g);
  } catch (err) {
    noAllocDirCleanup();
    removeAllocDir();
    noExitRemoval();
    throw err;
  }
  /** The task's output FIFOs, read as Nomad's logmon reads them; opened just before StartTask. */
  let logs: TaskLogs | undefined;
  /** The task's cgroup, made just before StartTask; removed (with what is left in it) once the task is gone. */
  let cgroup: TaskCgroup | undefined;
  /**
   * The last resort for the cgroup when the process exits before the clean-up removed it (a second
   * signal exits at once): left, it stays on the host for good, with whatever still runs in it.
   */
  const destroyCgroupAtExit = () => cgroup?.destroySync({ timeoutMs: EXIT_CGROUP_MS });
  let noExitCgroup = () => {};
  let started = false;
  /** StartTask in flight: an interruption meanwhile (output closed as the task's first lines arrive) waits for it. */
  let starting: Promise<void> | undefined;
  let destroyed = false;
  /** StartTask's handle, kept as Nomad keeps it: RecoverTask gets it when the plugin is relaunched. */
  let handle: TaskHandle | undefined;
  /** The plugin is being relaunched and the task recovered: Ctrl-C's calls and the clean-up wait for it. */
  let recovering: Promise<void> | undefined;
  let relaunches = 0;
  let interrupts = 0;
  // A call Ctrl-C makes whose failure would otherwise go unseen (the task keeps running). Not when
  // the plugin died under it: the recovery makes the call again.
  const report = (rpc: string, to: Connected) => async (e: unknown) => {
    if (pluginDied(to, e) && to.stateTaskId === undefined) return;
    process.stderr.write(`nomadkit: ${(await rpcError(to, rpc, e)).message}\n`);
  };
  /** What Ctrl-C asked so far (StopTask, then DestroyTask), of the plugin that now has the task. */
  const askForStop = () => {
    if (interrupts === 0 || recovering !== undefined) return;
    const to = c;
    if (interrupts === 1)
      to.plugin.driver
        .stopTask({
          taskId,
          timeout: { seconds: 5n, nanos: 0 },
          signal: killSignal,
        })
        .catch(report("Driver.StopTask", to));
    else to.plugin.driver.destroyTask({ taskId, force: true }).catch(report("Driver.DestroyTask", to));
  };
  const onSigint = () => {
    // Before the task runs, Ctrl-C stops everything (see interrupt.ts), once: after that, the
    // handler there decides (a second signal exits at once).
    if (!started) {
      if (!interrupted.aborted) interrupt("SIGINT");
      return;
    }
    interrupts++;
    if (interrupts === 1) {
      process.stderr.write(
        `nomadkit: stopping task ${taskId} (Ctrl-C again to force)\n`,
      );
      askForStop();
    } else if (interrupts === 2) {
      process.stderr.write(`nomadkit: destroying task ${taskId} (Ctrl-C again to exit)\n`);
      askForStop();
    } else {
      // WaitTask may never return (a driver that lost its task): clean up as any signal does, then exit 130.
      interrupt("SIGINT");
    }
  };
  process.on("SIGINT", onSigint);
  /**
   * DestroyTask (force) of the task on the plugin that has it, bounded by DESTROY_TIMEOUT_MS. Its
   * timeout is said (the task may still run; the plugin is stopped next all the same), other
   * failures go to `onError`.
   */
  const destroyTask = (onError: (e: unknown) => unknown): Promise<unknown> =>
    c.plugin.driver.destroyTask({ taskId, force: true }, { timeoutMs: DESTROY_TIMEOUT_MS }).catch((e: unknown) => {
      if (!(e instanceof ConnectError && e.code === Code.DeadlineExceeded)) return onError(e);
      process.stderr.write(
        `nomadkit: plugin ${c.name}: Driver.DestroyTask of task ${taskId} did not answer within ${DESTROY_TIMEOUT_MS} ms; stopping the plugin\n`,
      );
    });
  // What a run that ends leaves behind, however it ends: a task not destroyed yet (the executor
  // outlives the plugin) and the state file.
  // Once: an interruption during the finally's undo waits for it instead of exiting mid-way.
  let undoing: Promise<void> | undefined;
  const undo = () =>
    (undoing ??= (async () => {
      await starting?.catch(() => {});
      // The task on the relaunched plugin, once it has it (or not).
      await recovering?.catch(() => {});
      if (!started && starting !== undefined && interrupted.aborted) {
        // Cancelled mid-start: the driver may have started the task all the same.
        await c.plugin.driver.destroyTask({ taskId, force: true }, { timeoutMs: 5000 }).catch(() => {});
      }
      if (started && !destroyed) {
        destroyed = true;
        await destroyTask(() => {});
      }
      if (statePath && wroteState && holdsTask(statePath, taskId)) rmSync(statePath, { force: true });
    })());
  // Registered after the plugin's release, so it runs first: the task goes before its plugin.
  const cleanup = async () => {
    await undo();
    await cgroup?.destroy().catch(() => {});
    await logs?.close(0);
    removeAllocDir();
  };
  let noCleanup = onInterrupt(cleanup);
  const writeState = () => {
    const state: RunState = {
      kind: "nomadkit-run-state",
      plugin: c.name,
      taskId,
      reattach: c.plugin.reattachConfig,
    };
    // Whole or not at all: exec and stats may read it while a relaunched plugin's replaces it.
    const tmp = `${statePath!}.${process.pid}.tmp`;
    try {
      writeFileSync(tmp, JSON.stringify(state, null, 2) + "\n", { mode: 0o600 });
      renameSync(tmp, statePath!);
    } catch (err) {
      rmSync(tmp, { force: true });
      throw new CliError(`--state ${opts.state}: cannot write it: ${(err as Error).message}`);
    }
  };
  /**
   * The plugin died under the task (WaitTask failed with `died`): as Nomad, launch it again, give it
   * its config, and hand it the task with RecoverTask and StartTask's handle; the task's executor
   * outlives its plugin. Throws when the task cannot be recovered; the run's clean-up then destroys
   * it on the plugin it has, and kills what is left in its cgroup.
   */
  const recoverTask = async (died: unknown): Promise<void> => {
    const dead = c;
    // How it died (its panic, say), before anything else is tried.
    process.stderr.write(`nomadkit: ${(await rpcError(dead, "Driver.WaitTask", died)).message}\n`);
    if (dead.stateTaskId !== undefined)
      throw new CliError(`task ${taskId}: its plugin was reached through a state file and cannot be relaunched to recover it`);
    if (handle === undefined)
      throw new CliError(`task ${taskId}: cannot recover it: Driver.StartTask returned no task handle`);
    let why = "";
    while (relaunches < MAX_PLUGIN_RELAUNCHES && !interrupted.aborted) {
      relaunches++;
      process.stderr.write(
        `nomadkit: relaunching the plugin to recover task ${taskId} (attempt ${relaunches} of ${MAX_PLUGIN_RELAUNCHES})\n`,
      );
      // The dead plugin (or a relaunch that failed): its socket directory goes, its clean-up too.
      await c.release();
      let next: Connected;
      try {
        next = await connectPlugin(plugin, g);
      } catch (err) {
        why = (err as Error).message;
        continue;
      }
      c = next;
      // connectPlugin registered the new plugin's stop: the task's clean-up must again run before it.
      noCleanup();
      noCleanup = onInterrupt(cleanup);
      try {
        await configure(c, config);
        await orRpcError(c, "Driver.RecoverTask", c.plugin.driver.recoverTask({ taskId, handle }, c.call));
      } catch (err) {
        why = (err as Error).message;
        // A plugin that died again gets another attempt; one that refuses the task would refuse again.
        if (c.plugin.exitSignal.aborted) continue;
        break;
      }
      process.stderr.write(`nomadkit: recovered task ${taskId} (plugin pid ${c.plugin.pid})\n`);
      if (statePath && wroteState) {
        // Unless another run took the file while the plugin was down (its socket gone, it was stale).
        if (holdsTask(statePath, taskId)) {
          try {
            writeState();
          } catch (err) {
            process.stderr.write(`nomadkit: ${(err as Error).message}\n`);
          }
        } else process.stderr.write(`nomadkit: --state ${opts.state} no longer holds task ${taskId}; not updating it\n`);
      }
      return;
    }
    if (why === "") why = interrupted.aborted ? "interrupted" : `the plugin was relaunched ${relaunches} times`;
    // The run's clean-up then destroys the task on the plugin it has and kills what is left in its cgroup.
    throw new CliError(`cannot recover task ${taskId} after its plugin exited: ${why}`);
  };
  try {
    await configure(c, config);
    const { spec: taskSpec } = await orRpcError(c, "Driver.TaskConfigSchema", c.plugin.driver.taskConfigSchema({}, c.call));
    const msgpackDriverConfig = await encodeOperatorConfig(
      taskConfig?.source ?? "task config (no --task-config given)",
      taskSpec,
      taskConfig?.value ?? {},
    );
    // Read before StartTask, as logmon does; nothing else holds a write end, so EOF comes when the
    // task's writers are gone. What is written after that is lost under Nomad: said, not shown.
    const out = (logs = openTaskLogs(dirs, opts.name, {
      onStdout: (d) => process.stdout.write(d),
      onStderr: (d) => process.stderr.write(d),
      onLateOutput: (late) => process.stderr.write(`nomadkit: warning: ${late.message}\n`),
    }));
    const allocId = randomUUID();
    // Nomad's client (>= 1.7) makes every task's cgroup before StartTask; where this host does not
    // let us (not root, no writable cgroupfs) the task starts without one, as on such a Nomad client.
    let cgroupNote = "no task cgroup (--no-task-cgroup)";
    if (opts.taskCgroup) {
      try {
        cgroup = createTaskCgroup({ allocId, task: opts.name, parent, cores: resources.cores });
        noExitCgroup = atExit(destroyCgroupAtExit);
        cgroupNote = `cpuset_cgroup ${cgroup.path}`;
      } catch (err) {
        // Cores this host's (or the parent's) cpuset does not have.
        if (err instanceof RangeError) throw new CliError(`--cores ${opts.cores}: ${err.message}`);
        if (!(err instanceof TaskCgroupUnavailableError)) {
          const flag = parent === undefined ? "" : ` under --cgroup-parent ${JSON.stringify(parent)}`;
          throw new CliError(`cannot create the task's cgroup${flag}: ${(err as Error).message}`);
        }
        // Started without one, the task would run on every CPU while told it reserves some.
        if (resources.cores !== undefined)
          throw new CliError(`--cores ${opts.cores}: reserved cores need the task's cgroup, which this host cannot make: ${err.reason}`);
        cgroupNote = `no task cgroup: ${err.reason}`;
      }
    }
    const task = nomadTaskConfig({
      name: opts.name,
      dirs,
      allocId,
      cpusetCgroup: cgroup?.path,
      cgroupParent: cgroup?.parent,
      cpuMhz: resources.cpuMhz,
      memoryMb: resources.memoryMb,
      memoryMaxMb: resources.memoryMaxMb,
      // The cgroup's: the same CPUs, as the task config and the cgroup must name.
      cores: cgroup?.cores,
      msgpackDriverConfig,
      stdoutPath: out.stdoutPath,
      stderrPath: out.stderrPath,
      jobName: "nomadkit-run",
      env,
    });
    taskId = task.id;
    try {
      // Cancelled by an interruption: the clean-up waits for this call, and a driver's startTask
      // that never answers held it. (Nomad never cancels StartTask; stopping the plugin ends it.)
      await (starting = c.plugin.driver.startTask({ task }, { signal: interrupted }).then((res) => {
        handle = res.handle;
        started = true;
      }));
    } catch (e) {
      const err = await rpcError(c, "Driver.StartTask", e, taskConfig && `(task config from ${taskConfig.source})`);
      await out.close();
      throw err;
    }
    process.stderr.write(`nomadkit: started task ${taskId} (${cgroupNote})\n`);
    if (statePath) {
      // Again now: another run may have written it since the check at start-up.
      checkStatePath(statePath);
      writeState();
      wroteState = true;
      process.stderr.write(
        `nomadkit: wrote ${statePath}; try: npx nomadkit exec ${shellQuote(opts.state!)} ${taskId} -it -- /bin/sh\n`,
      );
    }
    let wait;
    try {
      for (;;) {
        try {
          wait = await c.plugin.driver.waitTask({ taskId });
          break;
        } catch (e) {
          if (!pluginDied(c, e) || interrupted.aborted) throw await rpcError(c, "Driver.WaitTask", e);
          await (recovering = recoverTask(e).finally(() => (recovering = undefined)));
          // Asked while the plugin was down, or of the one that died: of the recovered one now.
          askForStop();
        }
      }
    } finally {
      // A process the task left behind holding the FIFOs gets logmon's 2 s.
      await out.close();
    }
    destroyed = true;
    await destroyTask(async (e) => {
      process.stderr.write(`nomadkit: ${(await rpcError(c, "Driver.DestroyTask", e)).message}\n`);
    });
    if (wait.err) throw new CliError(`task ${taskId} failed: ${wait.err}`);
    const r = wait.result;
    const status = exitStatus(r);
    process.stderr.write(
      `nomadkit: task exited with code ${r?.exitCode ?? "?"}${r?.signal ? ` (signal ${r.signal})` : ""}${r?.oomKilled ? " (OOM killed)" : ""}\n`,
    );
    process.exitCode = status;
  } finally {
    process.off("SIGINT", onSigint);
    await logs?.close(0);
    // Also after a failure once the task started (say, writing the state file).
    await undo();
    // After DestroyTask, as Nomad's client: it kills what the driver left in it.
    await cgroup?.destroy().catch((e: unknown) => {
      process.stderr.write(`nomadkit: ${(e as Error).message}\n`);
    });
    // Removed, or reported: a process that would not die in destroy's 10 s would not in the exit's bound.
    noExitCgroup();
    noCleanup();
    await c.release();
    noAllocDirCleanup();
    removeAllocDir();
    noExitRemoval();
  }
}

/** Whether `err`, a call's failure, came from `to`'s plugin having exited. */
function pluginDied(to: Connected, err: unknown): boolean {
  return err instanceof PluginShutdownError || to.plugin.exitSignal.aborted;
}

/** An fs error's code (ENAMETOOLONG, EACCES, …), else its message. */
function errorCode(err: unknown): string {
  return (err as NodeJS.ErrnoException).code ?? (err as Error).message;
}

/**
 * `--state` is written after the task started and removed when it ends: refuse, before starting
 * anything, a path `exec` and `stats` would not take for a state file (no `.json`), one in a
 * directory we cannot write, and an existing file that is not a state file (it would be lost).
 */
function checkStatePath(path: string): void {
  if (extname(path) !== ".json")
    throw new CliError(
      `--state ${path}: must end in .json (that is how exec and stats tell a state file from a plugin)`,
    );
  const dir = dirname(resolve(path));
  try {
    if (!statSync(dir).isDirectory()) throw new Error("not a directory");
    accessSync(dir, constants.W_OK);
  } catch (err) {
    throw new CliError(
      `--state ${path}: cannot write in ${dir}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  let existing: string;
  try {
    existing = readFileSync(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
    throw new CliError(
      `--state ${path}: exists and cannot be read: ${(err as Error).message}`,
    );
  }
  let parsed: Partial<RunState> | null = null;
  try {
    parsed = JSON.parse(existing) as Partial<RunState> | null;
  } catch {
    // not JSON: not ours
  }
  if (parsed?.kind !== "nomadkit-run-state")
    throw new CliError(
      `--state ${path}: exists and is not a state file of "nomadkit run"; not overwriting it`,
    );
  // Left behind by a run that ended uncleanly: fine to replace. Not while its plugin still runs:
  // that run's exec and stats need it.
  const pid = parsed.reattach?.pid;
  // Its plugin's socket gone means that plugin is (a pid alone may have been reused since).
  const address = parsed.reattach?.address;
  const socketGone = parsed.reattach?.network === "unix" && typeof address === "string" && !existsSync(address);
  if (typeof pid === "number" && pid > 0 && !socketGone && processRuns(pid))
    throw new CliError(
      `--state ${path}: belongs to a run whose plugin (pid ${pid}) is still running; not overwriting it`,
    );
}

/** Whether `pid` is a live process (a zombie counts as gone). */
function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
  try {
    return !/^\d+ \(.*\) [ZX] /s.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return true; // no /proc: the signal said it exists
  }
}

/** Whether the state file at `path` still describes task `taskId` (another run may have replaced it since). */
function holdsTask(path: string, taskId: string): boolean {
  try {
    return (JSON.parse(readFileSync(path, "utf8")) as Partial<RunState>).taskId === taskId;
  } catch {
    return false;
  }
}

/** `s` as one POSIX shell word, quoted only when it needs to be (a hint the user pastes). */
function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}
