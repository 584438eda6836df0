import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  createTaskDirs,
  launchPlugin,
  nomadTaskConfig,
  type CallOptions,
  type PluginClient,
  type PluginExit,
} from "@nomadkit/client";
import type { PluginInfoResponse } from "@nomadkit/protocol/base";
import type {
  DriverCapabilities,
  NetworkIsolationSpec,
  TaskConfigSchema,
  TaskHandle,
  WaitTaskResponse,
} from "@nomadkit/protocol/driver";
import type { Spec } from "@nomadkit/protocol/hclspec";
import { encodeCheckedConfig } from "./config.js";
import type { ConformanceOptions } from "./types.js";
import { isGone, isUnimplemented, processGone, waitUntil } from "./util.js";

/** Options with every default applied. */
export interface ResolvedOptions extends ConformanceOptions {
  args: readonly string[];
  pluginConfig: Record<string, unknown>;
  execShell: string;
  signal: string;
  callTimeoutMs: number;
  checkTimeoutMs: number;
  fingerprintTimeoutMs: number;
  shutdownTimeoutMs: number;
}

/** Marker lines of the default task (see {@link defaultTaskConfig}). */
export const START_MARKER = "conformance-start";
export const TICK_MARKER = "conformance-tick";
export const SIGNAL_MARKER = "conformance-signal";

/**
 * The default task: a shell loop that prints its pid once, a tick ten times a second, and a line
 * when it receives `signal` (trapped, so the task survives it).
 *
 * @example
 * ```ts
 * defaultTaskConfig("/bin/sh", "SIGHUP"); // { command: "/bin/sh", args: ["-c", "trap 'echo conformance-signal' HUP; ..."] }
 * ```
 */
export function defaultTaskConfig(shell: string, signal: string): Record<string, unknown> {
  const trap = signal.toUpperCase().replace(/^SIG/, "");
  return {
    command: shell,
    args: [
      "-c",
      `trap 'echo ${SIGNAL_MARKER}' ${trap}; echo "${START_MARKER} $$"; i=0; ` +
        `while :; do i=$((i+1)); echo "${TICK_MARKER} $i"; sleep 0.1; done`,
    ],
  };
}

/** A task the suite started. */
export interface SuiteTask {
  id: string;
  name: string;
  allocId: string;
  allocDir: string;
  stdoutPath: string;
  stderrPath: string;
  config: MessageInitShape<typeof TaskConfigSchema>;
  handle?: TaskHandle;
  startedAt?: Date | undefined;
  /** A WaitTask call in flight (resolves with the response or the error). */
  waiting?: Promise<WaitTaskResponse | Error>;
  destroyed: boolean;
}

/** How a plugin process the suite stopped ended. */
export interface KillRecord {
  label: string;
  exit: PluginExit;
  ms: number;
}

/** State shared by the checks of one run. */
export class Suite {
  readonly root: string;
  readonly plugins: PluginClient[] = [];
  readonly kills: KillRecord[] = [];
  readonly tasks: SuiteTask[] = [];
  readonly networks = new Map<string, NetworkIsolationSpec | undefined>();
  /** Whether the default task config is in use (its output markers are then checked). */
  readonly defaultTask: boolean;
  /** Aborted when the current check times out. */
  signal: AbortSignal = new AbortController().signal;
  /** Name of the check being run. */
  current = "";
  /** Plugins the suite stopped on purpose. */
  private readonly intentional = new Set<PluginClient>();
  /** Plugins that died on their own: during which check, and how. */
  readonly deaths = new Map<PluginClient, { during: string; exit: PluginExit }>();

  load?: PluginClient;
  run?: PluginClient;
  info?: PluginInfoResponse;
  configSpec?: Spec | undefined;
  taskSpec?: Spec | undefined;
  caps?: DriverCapabilities | undefined;
  main?: SuiteTask;
  firstFingerprint?: Promise<{ health: number; description: string; attributes: number } | Error>;
  events = { count: 0, error: undefined as unknown, unimplemented: false };

  constructor(readonly opts: ResolvedOptions) {
    this.root = mkdtempSync(join(opts.workDir ?? tmpdir(), "nomadkit-conformance-"));
    this.defaultTask = opts.taskConfig === undefined;
  }

  /** Per-call options: the call deadline and the check's abort signal. */
  co(extra: CallOptions = {}): CallOptions {
    return { timeoutMs: this.opts.callTimeoutMs, signal: this.signal, ...extra };
  }

  /** Starts a plugin process exactly as Nomad does. */
  async launch(): Promise<PluginClient> {
    const o = this.opts;
    const p = await launchPlugin(o.plugin, o.args, {
      env: o.env,
      logger: o.logger,
      killTimeoutMs: o.shutdownTimeoutMs,
      startTimeoutMs: o.startTimeoutMs,
      autoMTLS: o.autoMTLS,
    });
    this.plugins.push(p);
    void p.exited.then((exit) => {
      if (!this.intentional.has(p)) this.deaths.set(p, { during: this.current, exit });
    });
    return p;
  }

  /** Marks a plugin as stopped on purpose (its exit is not a crash). */
  expectExit(p: PluginClient): void {
    this.intentional.add(p);
  }

  /** Why the running plugin is gone, for messages. */
  whyGone(p: PluginClient | undefined): string {
    const d = p && this.deaths.get(p);
    if (!d) return "the plugin process is not running";
    const how = d.exit.signal ? `on signal ${d.exit.signal}` : `with status ${d.exit.code}`;
    const lines = p.recentStderr().split("\n").map((l) => l.trim()).filter(Boolean);
    const errors = lines.filter((l) => /error|panic|exception|fatal/i.test(l));
    const tail = (errors.length > 0 ? errors : lines).slice(-2).join(" | ");
    return `the plugin process exited ${how} during ${d.during}${tail ? `; last log lines: ${tail}` : ""}`;
  }

  /** Stops a plugin like Nomad (GRPCController.Shutdown, wait, SIGKILL) and records how it went. */
  async kill(p: PluginClient, label: string): Promise<KillRecord> {
    const t0 = performance.now();
    this.expectExit(p);
    const exit = await p.kill();
    const rec = { label, exit, ms: performance.now() - t0 };
    this.kills.push(rec);
    return rec;
  }

  /** The plugin config as Nomad would encode it for this plugin's schema. */
  pluginConfigBytes(): Uint8Array {
    // A config that does not fit tests the operator's input, not the plugin (which would ignore a
    // mistyped key): the check fails saying so, as Nomad would refuse it.
    return encodeCheckedConfig(
      this.configSpec,
      this.opts.pluginConfig,
      "the plugin config (pluginConfig, --plugin-config) does not fit the plugin's ConfigSchema",
    );
  }

  /** SetConfig as Nomad's "run" dispense sends it. */
  async setConfig(p: PluginClient): Promise<void> {
    await p.basePlugin.setConfig(
      {
        msgpackConfig: this.pluginConfigBytes(),
        pluginApiVersion: "v0.1.0",
        nomadConfig: { driver: { ClientMinPort: 14000, ClientMaxPort: 14512 } },
      },
      this.co(),
    );
  }

  /** Init; Unimplemented counts as success, as in Nomad. */
  async init(p: PluginClient): Promise<string> {
    try {
      await p.driver.init({}, this.co());
      return "ok";
    } catch (err) {
      if (isUnimplemented(err)) return "unimplemented (accepted)";
      throw err;
    }
  }

  /**
   * Opens the two long-lived streams Nomad keeps on a driver: Fingerprint (the first response is
   * remembered) and TaskEvents. Errors caused by the plugin going away are expected and ignored.
   */
  openStreams(p: PluginClient): void {
    const fp = p.driver.fingerprint({}, { signal: p.exitSignal });
    this.firstFingerprint = (async () => {
      try {
        for await (const r of fp) {
          return { health: r.health, description: r.healthDescription, attributes: Object.keys(r.attributes).length };
        }
        return new Error("the Fingerprint stream ended without a response");
      } catch (err) {
        return err instanceof Error ? err : new Error(String(err));
      }
    })();
    void (async () => {
      try {
        for await (const _ of p.driver.taskEvents({}, { signal: p.exitSignal })) this.events.count++;
      } catch (err) {
        if (isUnimplemented(err)) this.events.unimplemented = true;
        else if (!isGone(err) && !p.exitSignal.aborted) this.events.error ??= err;
      }
    })();
  }

  /** Creates an allocation directory and the TaskConfig Nomad would send for a new task. */
  newTask(name: string, opts: { allocId?: string; network?: NetworkIsolationSpec | undefined } = {}): SuiteTask {
    const allocId = opts.allocId ?? randomUUID();
    const dirs = createTaskDirs(join(this.root, allocId), name);
    const allocDir = dirs.allocDir;
    const stdoutPath = join(dirs.logsDir, `${name}.stdout.0`);
    const stderrPath = join(dirs.logsDir, `${name}.stderr.0`);
    writeFileSync(stdoutPath, "");
    writeFileSync(stderrPath, "");
    const taskConfig = this.opts.taskConfig ?? defaultTaskConfig(this.opts.execShell, this.opts.signal);
    const config = nomadTaskConfig({
      name,
      dirs,
      allocId,
      msgpackDriverConfig: encodeCheckedConfig(this.taskSpec, taskConfig, "the task config (taskConfig, --task-config) does not fit the plugin's TaskConfigSchema"),
      stdoutPath,
      stderrPath,
      jobName: "conformance",
      groupName: "conformance",
      user: this.opts.user ?? "",
      memoryMb: 128,
      networkIsolation: opts.network,
    });
    const id = config.id;
    const task: SuiteTask = { id, name, allocId, allocDir, stdoutPath, stderrPath, config, destroyed: false };
    this.tasks.push(task);
    return task;
  }

  /** StartTask, then a WaitTask in the background, as Nomad's task runner does. */
  async startTask(p: PluginClient, task: SuiteTask): Promise<TaskHandle> {
    const res = await p.driver.startTask({ task: task.config }, this.co());
    if (!res.handle) throw new Error("StartTask returned no handle");
    task.handle = res.handle;
    this.watch(p, task);
    return res.handle;
  }

  /** Starts a WaitTask call without a deadline (it blocks until the task exits). */
  watch(p: PluginClient, task: SuiteTask): void {
    task.waiting = p.driver
      .waitTask({ taskId: task.id }, { signal: p.exitSignal })
      .catch((err: unknown) => (err instanceof Error ? err : new Error(String(err))));
  }

  /** The task's stdout so far. */
  stdout(task: SuiteTask): string {
    try {
      return readFileSync(task.stdoutPath, "utf8");
    } catch {
      return "";
    }
  }

  /** Pids printed by the default task's start marker. */
  startPids(task: SuiteTask): number[] {
    const re = new RegExp(`^${START_MARKER} (\\d+)$`, "gm");
    return [...this.stdout(task).matchAll(re)].map((m) => Number(m[1]));
  }

  /** Waits for the default task's start marker and returns its pid. */
  async taskPid(task: SuiteTask): Promise<number> {
    await waitUntil(() => this.startPids(task).length > 0, `the task's start line in ${task.stdoutPath}`, this.opts.callTimeoutMs, this.signal);
    return this.startPids(task)[0]!;
  }

  /** Waits until a pid is gone (or a zombie). */
  async pidGone(pid: number, what: string): Promise<void> {
    await waitUntil(() => processGone(pid), what, this.opts.callTimeoutMs, this.signal);
  }

  /** Size of a file, 0 when missing. */
  size(path: string): number {
    try {
      return statSync(path).size;
    } catch {
      return 0;
    }
  }

  /**
   * Best-effort cleanup: destroy leftover tasks and networks, stop plugins, remove the temp dir.
   * When the run plugin is gone, a fresh one recovers the leftover tasks first and destroys them,
   * as Nomad would, so a failed run leaves no task (or driver helper process) behind.
   */
  async cleanup(): Promise<void> {
    const quick: CallOptions = { timeoutMs: 10_000 };
    let p = this.run && !this.run.exitSignal.aborted ? this.run : undefined;
    const leftovers = this.tasks.filter((t) => !t.destroyed && t.handle);
    if (!p && leftovers.length > 0) {
      try {
        p = await this.launch();
        this.expectExit(p);
        await p.basePlugin.setConfig({ msgpackConfig: this.pluginConfigBytes(), pluginApiVersion: "v0.1.0" }, quick);
        await p.driver.init({}, quick).catch(() => undefined);
        for (const t of leftovers) await p.driver.recoverTask({ taskId: t.id, handle: t.handle }, quick).catch(() => undefined);
      } catch {
        // the plugin cannot even start: fall back to killing what we know
      }
    }
    for (const t of this.tasks) {
      if (t.destroyed || !t.handle) continue;
      let pids: number[] = [];
      if (this.defaultTask) pids = this.startPids(t);
      if (p && !p.exitSignal.aborted) await p.driver.destroyTask({ taskId: t.id, force: true }, quick).catch(() => undefined);
      // A task whose plugin died keeps running under its executor: end it so nothing leaks.
      for (const pid of pids) {
        if (!processGone(pid)) {
          try {
            process.kill(-pid, "SIGKILL");
          } catch {
            try {
              process.kill(pid, "SIGKILL");
            } catch {
              // gone
            }
          }
        }
      }
    }
    if (p && !p.exitSignal.aborted) {
      for (const [allocId, spec] of this.networks) {
        await p.driver.destroyNetwork({ allocId, isolationSpec: spec }, quick).catch(() => undefined);
      }
    }
    for (const pl of this.plugins) {
      if (!pl.exitSignal.aborted) await pl.kill().catch(() => undefined);
    }
    if (existsSync(this.root)) rmSync(this.root, { recursive: true, force: true });
  }
}

