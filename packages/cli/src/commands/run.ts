// nomadkit run: SetConfig, StartTask, WaitTask, like Nomad running one task.
import { execFileSync } from "node:child_process";
import {
  closeSync,
  constants,
  createReadStream,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createTaskDirs, nomadTaskConfig } from "@nomadkit/client";
import { CliError } from "../errors.js";
import {
  encodeOperatorConfig,
  parseEnvPairs,
  readJsonObject,
} from "../files.js";
import {
  connectPlugin,
  rpcError,
  type GlobalOptions,
  type RunState,
} from "../plugin.js";
import { configure } from "./inspect.js";

export interface RunOptions {
  config?: string;
  taskConfig?: string;
  name: string;
  env: string[];
  state?: string;
}

/** Forwards one of the task's output FIFOs (or plain files where mkfifo is unavailable). */
class TaskOutput {
  private readonly fifo: boolean;
  private readonly done: Promise<void>;

  constructor(
    private readonly path: string,
    private readonly out: NodeJS.WritableStream,
  ) {
    try {
      execFileSync("mkfifo", ["-m", "600", path], { stdio: "ignore" });
      this.fifo = true;
    } catch {
      writeFileSync(path, "", { mode: 0o600 });
      this.fifo = false;
    }
    if (this.fifo) {
      // The open completes when the driver opens the FIFO for writing (as Nomad's logmon does).
      const rs = createReadStream(path);
      rs.on("data", (d) => out.write(d));
      this.done = new Promise((r) => {
        rs.once("close", r);
        rs.once("error", () => r());
      });
    } else {
      this.done = Promise.resolve();
    }
  }

  /** After the task exited: drain what is left and stop. */
  async finish(): Promise<void> {
    if (!this.fifo) {
      this.out.write(readFileSync(this.path));
      return;
    }
    // If the driver never opened the FIFO, our pending open would wait forever: complete it with a
    // writer of our own, which also gives EOF once every other writer is gone.
    try {
      closeSync(openSync(this.path, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      // ENXIO: no reader pending any more
    }
    let t: NodeJS.Timeout | undefined;
    await Promise.race([
      this.done,
      new Promise((r) => (t = setTimeout(r, 2000))),
    ]);
    clearTimeout(t);
  }
}

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
  if (opts.config) readJsonObject("--config", opts.config);
  const taskConfig = opts.taskConfig
    ? readJsonObject("--task-config", opts.taskConfig)
    : {};
  const env = parseEnvPairs("--env", opts.env);
  // It names the task's directory below the allocation's.
  if (!/^[A-Za-z0-9_.-]+$/.test(opts.name) || /^\.\.?$/.test(opts.name))
    throw new CliError(
      `--name ${JSON.stringify(opts.name)}: use letters, digits, "_", "." or "-" (not "." or "..")`,
    );

  const c = await connectPlugin(plugin, g);
  // The directories Nomad makes before StartTask; drivers may rely on them.
  const allocDir = mkdtempSync(join(tmpdir(), "nomadkit-run-"));
  const dirs = createTaskDirs(allocDir, opts.name);
  // Nomad's names for the task's output FIFOs.
  const stdoutPath = join(dirs.logsDir, `.${opts.name}.stdout.fifo`);
  const stderrPath = join(dirs.logsDir, `.${opts.name}.stderr.fifo`);
  const statePath = opts.state ? resolve(opts.state) : undefined;
  let started = false;
  let taskId = "";
  let interrupts = 0;
  const onSigint = () => {
    interrupts++;
    if (!started) return;
    if (interrupts === 1) {
      process.stderr.write(
        `nomadkit: stopping task ${taskId} (Ctrl-C again to force)\n`,
      );
      c.plugin.driver
        .stopTask({
          taskId,
          timeout: { seconds: 5n, nanos: 0 },
          signal: "SIGINT",
        })
        .catch(() => {});
    } else {
      c.plugin.driver.destroyTask({ taskId, force: true }).catch(() => {});
    }
  };
  process.on("SIGINT", onSigint);
  try {
    await configure(c, opts.config);
    const { spec: taskSpec } = await c.plugin.driver
      .taskConfigSchema({})
      .catch((e: unknown) => {
        throw rpcError(c.name, "Driver.TaskConfigSchema", e);
      });
    const msgpackDriverConfig = await encodeOperatorConfig(
      opts.taskConfig
        ? `--task-config ${opts.taskConfig}`
        : "task config (no --task-config given)",
      taskSpec,
      taskConfig,
    );
    const task = nomadTaskConfig({
      name: opts.name,
      dirs,
      msgpackDriverConfig,
      stdoutPath,
      stderrPath,
      jobName: "nomadkit-run",
      env,
    });
    taskId = task.id;
    const stdout = new TaskOutput(stdoutPath, process.stdout);
    const stderr = new TaskOutput(stderrPath, process.stderr);
    try {
      await c.plugin.driver.startTask({ task });
    } catch (e) {
      const err = rpcError(c.name, "Driver.StartTask", e);
      if (opts.taskConfig)
        err.message += ` (task config from --task-config ${opts.taskConfig})`;
      await Promise.all([stdout.finish(), stderr.finish()]);
      throw err;
    }
    started = true;
    process.stderr.write(`nomadkit: started task ${taskId}\n`);
    if (statePath) {
      const state: RunState = {
        kind: "nomadkit-run-state",
        plugin: c.name,
        taskId,
        reattach: c.plugin.reattachConfig,
      };
      writeFileSync(statePath, JSON.stringify(state, null, 2) + "\n", {
        mode: 0o600,
      });
      process.stderr.write(
        `nomadkit: wrote ${statePath}; try: nomadkit exec ${opts.state} ${taskId} -it -- /bin/sh\n`,
      );
    }
    let wait;
    try {
      wait = await c.plugin.driver.waitTask({ taskId });
    } catch (e) {
      throw rpcError(c.name, "Driver.WaitTask", e);
    } finally {
      await Promise.all([stdout.finish(), stderr.finish()]);
    }
    await c.plugin.driver
      .destroyTask({ taskId, force: true })
      .catch((e: unknown) => {
        process.stderr.write(
          `nomadkit: ${rpcError(c.name, "Driver.DestroyTask", e).message}\n`,
        );
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
    if (statePath) rmSync(statePath, { force: true });
    await c.release();
    rmSync(allocDir, { recursive: true, force: true });
  }
}
