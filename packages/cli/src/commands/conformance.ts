import type { Command } from "commander";
import type { ConformanceOptions } from "@nomadkit/conformance";
import { CliError } from "../errors.js";
import { readJsonOption } from "../files.js";
import { interrupted, launchInterrupted, onInterrupt } from "../interrupt.js";
import { addResourceOptions, parseResourceFlags, type ResourceFlags } from "../resources.js";
import { checkCgroupParent, nomadLaunchProblems, pluginCommand, positiveMs, signalFlag, stderrLogger, type GlobalOptions } from "../plugin.js";

/**
 * The kit's tasks' memory without --memory (its `DEFAULT_MEMORY_MB`), which --memory-max must not
 * be below: a copy, as the kit loads only when it runs (a test keeps the two equal).
 */
export const KIT_MEMORY_MB = 128;

interface ConformanceFlags extends ResourceFlags {
  pluginConfig?: string;
  taskConfig?: string;
  execShell: string;
  signal?: string;
  user?: string;
  name?: string;
  checks?: string;
  list?: boolean;
  json?: boolean;
  callTimeout?: string;
  shutdownTimeout?: string;
  /** false with --no-task-cgroup. */
  taskCgroup: boolean;
  cgroupParent?: string;
  requireTaskEvents?: boolean;
}

async function conformanceCommand(plugin: string | undefined, flags: ConformanceFlags, g: GlobalOptions): Promise<void> {
  const { formatHeader, formatResult, formatSummary, listChecks, runConformance } = await import("@nomadkit/conformance");
  if (flags.list) {
    const checks = listChecks();
    const w = Math.max(...checks.map((c) => c.name.length));
    for (const c of checks) process.stdout.write(`${c.name.padEnd(w)}  ${c.title}\n`);
    return;
  }
  if (!plugin) throw new CliError("missing argument <plugin> (the driver executable to test)");
  // Not given: the suite's default (SIGHUP, which the default task traps; SIGCONT with --task-config).
  const signal = flags.signal === undefined ? undefined : signalFlag("--signal", flags.signal, "SIGHUP");
  // The check's task traps the signal and reports it: one that cannot be trapped would only time out.
  if (signal === "SIGKILL" || signal === "SIGSTOP")
    throw new CliError(`--signal ${JSON.stringify(flags.signal)}: ${signal} cannot be trapped, and the signal-task check needs a task that reports the signal it got`);
  if (flags.execShell !== undefined && flags.execShell.trim() === "")
    throw new CliError("--exec-shell: must name a shell (the default task runs under it)");
  if (flags.taskCgroup) checkCgroupParent(flags.cgroupParent);
  const resources = parseResourceFlags(flags, KIT_MEMORY_MB);
  if (resources.cores !== undefined && !flags.taskCgroup)
    throw new CliError(`--cores ${flags.cores}: reserved cores need the tasks' cgroups, which --no-task-cgroup turns off`);
  const { cmd, args } = pluginCommand(plugin);
  const options: ConformanceOptions = {
    plugin: cmd,
    args,
    execShell: flags.execShell,
    ...(signal === undefined ? {} : { signal }),
    logger: g.logLevel === "off" ? undefined : stderrLogger(g.logLevel, plugin),
    autoMTLS: g.automtls === true,
    taskCgroup: flags.taskCgroup,
    cgroupParent: flags.cgroupParent,
    ...resources,
  };
  if (flags.pluginConfig !== undefined) options.pluginConfig = readJsonOption("--plugin-config", flags.pluginConfig).value;
  if (flags.taskConfig !== undefined) options.taskConfig = readJsonOption("--task-config", flags.taskConfig).value;
  if (flags.user) options.user = flags.user;
  if (flags.requireTaskEvents) options.requireTaskEvents = true;
  if (flags.name) options.name = flags.name;
  if (flags.checks !== undefined) {
    options.checks = flags.checks.split(",").map((c) => c.trim()).filter(Boolean);
    // An empty selection would run every check, the opposite of what was asked.
    if (options.checks.length === 0) throw new CliError(`--checks: no check named in ${JSON.stringify(flags.checks)} (see --list)`);
    // Before the report's header is printed: the run would refuse it only after.
    const known = new Set(listChecks().map((c) => c.name));
    const unknown = options.checks.find((c) => !known.has(c));
    if (unknown !== undefined) throw new CliError(`--checks: unknown check ${JSON.stringify(unknown)} (see --list)`);
  }
  const start = positiveMs("--start-timeout", g.startTimeout);
  if (start !== undefined) options.startTimeoutMs = start;
  const call = positiveMs("--call-timeout", flags.callTimeout ?? g.callTimeout);
  if (call !== undefined) options.callTimeoutMs = call;
  const shutdown = positiveMs("--shutdown-timeout", flags.shutdownTimeout);
  if (shutdown !== undefined) options.shutdownTimeoutMs = shutdown;

  // Once the flags are good: run here with this Node, a .js file passes checks that Nomad could not
  // even start it for.
  for (const problem of nomadLaunchProblems(plugin)) process.stderr.write(`nomadkit: warning: ${plugin}: ${problem}\n`);

  const color = !flags.json && process.stdout.isTTY === true && !process.env.NO_COLOR;
  options.onResult = (r) => {
    // A plugin killed by Ctrl-C while being launched: the run was interrupted (exit 128+N).
    if (r.status === "fail") launchInterrupted(r.message);
    if (!flags.json) process.stdout.write(formatResult(r, { color }) + "\n");
  };
  if (!flags.json)
    process.stdout.write(`Conformance of ${plugin} (launched as Nomad launches drivers)\n\n${formatHeader()}\n`);
  // An interruption stops the run; the suite cleans up what it started before the CLI exits.
  options.abortSignal = interrupted;
  const run = runConformance(options);
  const noCleanup = onInterrupt(() => run.catch(() => {}));
  let report;
  try {
    report = await run;
  } catch (err) {
    throw new CliError((err as Error).message);
  } finally {
    noCleanup();
  }
  if (flags.json) process.stdout.write(JSON.stringify(report, null, 2) + "\n");
  else process.stdout.write(`\n${formatSummary(report)}\n`);
  if (!report.ok) process.exitCode = 1;
}

/**
 * `nomadkit conformance <plugin>`: runs `@nomadkit/conformance` against a driver binary and prints
 * the pass/fail table; exits 1 when a check fails. The package is imported lazily so the other
 * commands keep starting fast.
 */
export function registerConformanceCommand(program: Command): void {
  const cmd = program
    .command("conformance")
    .description("run the driver conformance suite against a plugin, launched exactly as Nomad does; exit 1 on any failure")
    .argument("[plugin]", "driver plugin executable or .js file")
    .option("--plugin-config <json|file>", "agent plugin config as JSON, inline or a file (default {})")
    .option(
      "--task-config <json|file>",
      'a long-running task\'s driver config as JSON, inline or a file (default: {"command":"/bin/sh","args":["-c",<loop>]})',
    )
    .option("--exec-shell <path>", "shell inside the task for the exec checks (<shell> -c <script>)", "/bin/sh")
    .option("--signal <name>", "first signal the signal-task check sends, by name or number (to the default task, which traps each, SIGUSR1 and SIGUSR2 follow; a --task-config task must survive it); default SIGHUP, SIGCONT with --task-config")
    .option("--user <user>", "run the tasks as this user (TaskConfig.user); start-task checks the task's uid, gid and groups")
    .option("--name <name>", "expected plugin name (the job's driver = \"...\")")
    .option("--checks <names>", "comma-separated checks to run (plus what they need); see --list")
    .option(
      "--require-task-events",
      "fail task-events unless the driver sends at least one TaskEvent for a task it runs (default: events are optional, as in Nomad)",
    )
    .option("--list", "list the checks and exit")
    .option("--call-timeout <ms>", "deadline of each RPC (default 30000)")
    .option("--shutdown-timeout <ms>", "how long a plugin may take to exit after Shutdown (default 2000, Nomad's)")
    .option(
      "--no-task-cgroup",
      "do not create each task's cgroup (resources.linux_resources.cpuset_cgroup) as Nomad's client does; without root it is skipped anyway, and the start-task row says so",
    )
    .option(
      "--cgroup-parent <path>",
      "parent of the tasks' cgroups (Nomad's cgroup_parent); default nomadkit.slice on cgroup v2, nomadkit on v1",
    );
  addResourceOptions(cmd, { cpu: "100 (with --cores: the node's MHz per core times their number)", memory: String(KIT_MEMORY_MB) })
    .option("--json", "print the report as JSON")
    .addHelpText(
      "after",
      `
Examples:
  $ nomadkit conformance ./nomadkit-rawexec
  $ nomadkit conformance ./nomad-driver-foo --plugin-config '{"enabled":true}' \\
      --task-config '{"command":"/bin/sleep","args":["600"]}'
  $ nomadkit conformance ./driver.mjs --checks exec-streaming,exec-streaming-tty`,
    )
    .action(async (plugin: string | undefined, flags: ConformanceFlags, cmd: Command) => {
      await conformanceCommand(plugin, flags, cmd.optsWithGlobals() as GlobalOptions);
    });
}
