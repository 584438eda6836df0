import { Command, CommanderError, Option } from "commander";
import { CliError } from "./errors.js";
import { interrupted } from "./interrupt.js";
import type { GlobalOptions } from "./plugin.js";
import { addResourceOptions } from "./resources.js";

const EXAMPLES = `
Plugins are started exactly as Nomad starts them (magic cookie, go-plugin handshake, gRPC); a
plugin may be a native binary or a .js/.mjs/.cjs file (run with this Node). On Ctrl-C, SIGTERM or
SIGHUP, what a command started (plugins, tasks) is stopped before it exits with 128+N; a second
signal exits at once, SIGKILLing the plugin it launched (run: also what is in the task's cgroup).

Examples (with @nomadkit/cli installed in the project, not globally: npx nomadkit ...):
  $ nomadkit info ./nomad-driver-foo
  $ nomadkit capabilities ./driver.mjs --json
  $ nomadkit fingerprint ./driver.mjs --config agent.json --watch
  $ nomadkit run ./driver.mjs --config agent.json --task-config task.json --state run.json
  $ nomadkit run ./driver.mjs --task-config '{"command":"/bin/date"}'     (JSON inline or a file)
  $ nomadkit run ./driver.mjs --task-config task.json --memory 256 --memory-max 512 --cores 0-1
  $ nomadkit exec run.json <task-id> -it -- /bin/sh     (in a second terminal, while run is running)
  $ nomadkit stats run.json <task-id>
  $ nomadkit bundle src/main.ts --out dist/plugin --name my-driver
`;

function globals(cmd: Command): GlobalOptions {
  return cmd.optsWithGlobals() as GlobalOptions;
}

/**
 * Builds the `nomadkit` command line (commander). Exposed for embedding and tests; most users run
 * the `nomadkit` binary.
 *
 * @example
 * ```ts
 * import { main } from "@nomadkit/cli";
 * process.exitCode = await main(["node", "nomadkit", "info", "./my-driver"]);
 * ```
 */
export function createProgram(info: { version?: string } = {}): Command {
  const program = new Command("nomadkit")
    .description(
      "Inspect, run and test HashiCorp Nomad task-driver plugins (Go or TypeScript) the way Nomad drives them.",
    )
    .exitOverride()
    .showHelpAfterError("(run with --help for usage)")
    .addOption(
      new Option("--log-level <level>", "plugin log lines to show on stderr")
        .choices(["trace", "debug", "info", "warn", "error", "off"])
        .default("warn"),
    )
    .option(
      "--start-timeout <ms>",
      "how long to wait for the plugin's go-plugin handshake (default 60000)",
    )
    .option(
      "--call-timeout <ms>",
      "deadline of the set-up calls (PluginInfo, schemas, SetConfig, Init, Capabilities; default 30000) and of fingerprint's first fingerprint (default 50000, Nomad's); StartTask, WaitTask and other streams have none",
    )
    .option(
      "--automtls",
      "talk to the plugin over go-plugin AutoMTLS (PLUGIN_CLIENT_CERT), as non-Nomad hosts do",
    )
    .addHelpText("after", EXAMPLES);
  if (info.version) program.version(info.version);

  program
    .command("info")
    .description(
      "print PluginInfo, the agent config schema and (drivers) the task config schema",
    )
    .argument("<plugin>", "plugin executable or .js file")
    .option("--json", "print JSON")
    .action(async (plugin: string, opts, cmd: Command) => {
      const { infoCommand } = await import("./commands/inspect.js");
      await infoCommand(plugin, opts, globals(cmd));
    });

  program
    .command("fingerprint")
    .description(
      "SetConfig, then print the first Fingerprint response (or keep printing with --watch)",
    )
    .argument("<plugin>", "plugin executable or .js file")
    .option(
      "--config <json|file>",
      "agent plugin config as JSON, inline or a file (sent msgpack-encoded to SetConfig)",
    )
    .option(
      "--watch",
      "keep the stream open and print every fingerprint until Ctrl-C",
    )
    .option("--json", "print JSON")
    .action(async (plugin: string, opts, cmd: Command) => {
      const { fingerprintCommand } = await import("./commands/inspect.js");
      await fingerprintCommand(plugin, opts, globals(cmd));
    });

  program
    .command("capabilities")
    .description("print the driver's Capabilities")
    .argument("<plugin>", "plugin executable or .js file")
    .option("--json", "print JSON")
    .action(async (plugin: string, opts, cmd: Command) => {
      const { capabilitiesCommand } = await import("./commands/inspect.js");
      await capabilitiesCommand(plugin, opts, globals(cmd));
    });

  const run = program
    .command("run")
    .description(
      "start one task like Nomad (SetConfig, Init, the allocation's directories, StartTask, WaitTask), stream its output, print its exit and exit with its status",
    )
    .argument("<plugin>", "plugin executable or .js file")
    .option(
      "--config <json|file>",
      "agent plugin config as JSON, inline or a file (msgpack-encoded for SetConfig); default {}",
    )
    .option(
      "--task-config <json|file>",
      "the task's driver config as JSON, inline or a file (msgpack-encoded into TaskConfig.msgpack_driver_config); default {}",
    )
    .option("--name <name>", "task name", "task")
    .option(
      "--env <KEY=VALUE>",
      "task environment variable (repeatable)",
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .option(
      "--kill-signal <signal>",
      'the task\'s kill_signal (SIGTERM, TERM or 15; sent as SIGTERM), sent with StopTask on Ctrl-C; default "" (none, as in a job without kill_signal: the driver picks, SIGINT for Nomad\'s executor)',
    )
    .option(
      "--state <file>",
      "write a state file (.json; an existing file must be an old state file) while the task runs, so `nomadkit exec <file> <task-id>` and `nomadkit stats <file> <task-id>` can reach it",
    )
    .option(
      "--no-task-cgroup",
      "do not create the task's cgroup (resources.linux_resources.cpuset_cgroup) as Nomad's client does; without root it is skipped anyway",
    )
    .option(
      "--cgroup-parent <path>",
      "parent of the task's cgroup (Nomad's cgroup_parent); default nomadkit.slice on cgroup v2, nomadkit on v1",
    );
  // Nomad's default task resources: 100 MHz, 300 MB.
  addResourceOptions(run, { cpu: "100 (with --cores: the node's MHz per core times their number)", memory: "300" })
    .addHelpText(
      "after",
      "\nCtrl-C stops the task (StopTask with --kill-signal, 5 s timeout); a second Ctrl-C destroys it; a third exits (130)\nwithout waiting for WaitTask, once what was started is cleaned up. The plugin is killed\n(GRPCController.Shutdown, then SIGKILL after 2 s) when the task is gone. The task's cgroup (as root: Nomad's layout\nunder nomadkit.slice on cgroup v2, nomadkit on v1, where cpuset_cgroup is the cpuset cgroup <parent>/share that tasks without\nreserved cores share, or with --cores the task's own below <parent>/reserve, beside the task's own freezer, cpu and memory cgroups) is removed after DestroyTask, with anything left in it.",
    )
    .action(async (plugin: string, opts, cmd: Command) => {
      const { runCommand } = await import("./commands/run.js");
      await runCommand(plugin, opts, globals(cmd));
    });

  program
    .command("exec")
    .description(
      "run a command inside a running task (ExecTaskStreaming) with your terminal",
    )
    .argument(
      "<plugin>",
      "a state file from `nomadkit run --state`, or a plugin executable that can find the task itself",
    )
    .argument("<task-id>", "task id (printed by `nomadkit run`)")
    .argument("<command...>", "command and arguments, after --")
    .option("-i, --interactive", "forward stdin")
    .option(
      "-t, --tty",
      "allocate a terminal (window size forwarded; with -i from a terminal, raw mode: Ctrl-C goes to the command)",
    )
    .action(
      async (
        plugin: string,
        taskId: string,
        command: string[],
        opts,
        cmd: Command,
      ) => {
        const { execCommand } = await import("./commands/exec.js");
        await execCommand(plugin, taskId, command, opts, globals(cmd));
      },
    );

  program
    .command("bundle")
    .description(
      "bundle a plugin into a directory Nomad starts quickly: one CommonJS file, a launcher, a V8 code cache of a real start-up, the task executor",
    )
    .argument("<entry>", "the plugin's entry file (.ts, .mts, .js, .mjs, .cjs)")
    .option("-o, --out <dir>", "directory to write into", "dist/plugin")
    .option(
      "-n, --name <name>",
      "file name of the plugin executable, a CommonJS script: no extension, .js or .cjs, not .mjs (default: the entry's name without extension)",
    )
    .option(
      "--external <package>",
      "leave a package out of the bundle, loaded from node_modules at run time (repeatable; node-pty and @peculiar/x509 always are)",
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .option(
      "--executor",
      "require bundling @nomadkit/server's task executor (default: when the plugin uses launchExecutor)",
    )
    .option("--no-executor", "do not bundle the task executor")
    .option(
      "--no-code-cache",
      "skip launching the bundled plugin (PluginInfo, Shutdown) and executor to make their V8 code caches (and the load recording)",
    )
    .option(
      "--no-load-recording",
      "do not record the answers of Nomad's load launch (health check, PluginInfo, ConfigSchema) for the launcher to serve without loading the plugin; for plugins whose PluginInfo or ConfigSchema vary at run time",
    )
    .addHelpText(
      "after",
      "\nWrites <name>, <name>.cjs, <name>.cjs.v8cache, a package.json listing the packages left outside the bundle and, for\na driver that launches task executors, <name>-executor, <name>-executor.cjs and <name>-executor.cjs.v8cache; and the load\nlaunch's fast path, <name>-load.cjs and its recording <name>.load.json. Copy the\ndirectory to the client node, run `npm install --omit=dev` there when it lists any, and put <name> (or a wrapper\nnaming node) in Nomad's plugin_dir. In the bundle an ES module's import.meta.url, .dirname and .filename name <name>.cjs,\nso files the plugin finds relative to them are looked for next to the bundle.",
    )
    .action(async (entry: string, opts, cmd: Command) => {
      const { bundleCommand } = await import("./commands/bundle.js");
      await bundleCommand(entry, opts, globals(cmd));
    });

  program
    .command("stats")
    .description("show a running task's TaskStats as a live line")
    .argument(
      "<plugin>",
      "a state file from `nomadkit run --state`, or a plugin executable that can find the task itself",
    )
    .argument("<task-id>", "task id (printed by `nomadkit run`)")
    .option(
      "--interval <duration>",
      "collection interval, e.g. 500ms, 2s",
      "1s",
    )
    .option("--count <n>", "stop after n samples")
    .option("--json", "print one JSON object per sample")
    .action(async (plugin: string, taskId: string, opts, cmd: Command) => {
      const { statsCommand } = await import("./commands/stats.js");
      await statsCommand(plugin, taskId, opts, globals(cmd));
    });

  return program;
}

/**
 * Runs the CLI with `argv` (as `process.argv`) and returns the exit status; prints errors as
 * `nomadkit: <message>` on stderr.
 *
 * @example
 * ```ts
 * import { main } from "@nomadkit/cli";
 * process.exitCode = await main(["node", "nomadkit", "capabilities", "./my-driver", "--json"]);
 * ```
 */
export async function main(
  argv: readonly string[] = process.argv,
  info: { version?: string } = {},
): Promise<number> {
  const program = createProgram(info);
  const { registerConformanceCommand } =
    await import("./commands/conformance.js");
  registerConformanceCommand(program);
  try {
    await program.parseAsync([...argv]);
    return typeof process.exitCode === "number" ? process.exitCode : 0;
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode; // commander printed it already
    // A failure caused by the interruption (a cancelled launch, a plugin stopped under a call, a
    // stream that ended): the exit status says what happened (exitWith), and stderr may be gone.
    if (interrupted.aborted) return 1;
    if (err instanceof CliError) {
      process.stderr.write(`nomadkit: ${err.message}\n`);
      return err.exitCode;
    }
    process.stderr.write(
      `nomadkit: unexpected error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    return 1;
  }
}
