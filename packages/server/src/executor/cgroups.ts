/**
 * A task's cgroups: its processes start inside them (no window in which a child could escape),
 * are all killed through them when the task stops (daemons that called setsid or forked twice
 * included), and report OOM kills. Nomad's executor does the same with the cgroups the client
 * made for the task or the ones a job names.
 */
import { spawn, type ChildProcess, type SpawnOptions, type StdioOptions } from "node:child_process";
import { accessSync, constants as fsConstants, existsSync, readFileSync, writeFileSync } from "node:fs";
import { constants as osConstants } from "node:os";
import { isAbsolute, join } from "node:path";
import type { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { setTimeout as delay } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import type { PtyGate } from "../exec/local.js";
import { CGROUP_V2_ROOT, cgroupProcs, type CgroupV1Dirs } from "../stats/cgroup.js";
import { readProcStat } from "../stats/proc.js";
import { assertSpawned } from "../exec/spawned.js";
import { checkInterpreter, execvpName } from "../exec/find-executable.js";

/** Where a LaunchRequest names the task's cgroups (its field names). */
export interface TaskCgroupsRequest {
  /** `cgroup_v2_override`: the task's cgroup v2 directory, absolute or under the v2 root. */
  cgroupV2Override?: string;
  /** `cgroup_v1_override`: controller → directory, absolute or under `<v1 root>/<controller>`. */
  cgroupV1Override?: Record<string, string>;
  /** `cpuset_cgroup` (or `resources.linux_resources.cpuset_cgroup`): the cgroup Nomad's client made. */
  cpusetCgroup?: string;
  /** Which field `cpusetCgroup` came from, for errors. */
  cpusetField?: string;
  /**
   * The task's allocation (its `NOMAD_ALLOC_ID`): on cgroup v1 a task without reserved cores gets
   * the cpuset cgroup all such tasks share (`<parent>/share`), and its own freezer, cpu and memory
   * cgroups, `<controller>/<parent>/<allocId>.<taskName>`, are found by it and `taskName`, as
   * Nomad's executor finds them.
   */
  allocId?: string;
  /** The task's name (its `NOMAD_TASK_NAME`); see `allocId`. */
  taskName?: string;
}

/** Mount points to resolve relative paths against; the defaults are Linux's. */
export interface CgroupRoots {
  /** The cgroup v2 mount (default `/sys/fs/cgroup`). */
  v2?: string;
  /** The directory holding one mount per v1 controller (default `/sys/fs/cgroup`). */
  v1?: string;
}

interface CgroupDir {
  path: string;
  /** The LaunchRequest field it came from, for errors. */
  field: string;
  version: 1 | 2;
  /** v1 controller name. */
  controller?: string;
  /** Shared with other tasks (v1 `<parent>/share`): joined, never killed through or limited. */
  shared?: boolean;
}

/** SIGKILL rounds before {@link TaskCgroups.killAll} gives up on a process that keeps forking. */
const KILL_ROUNDS = 20;
/** How long a v1 freezer may stay FREEZING before the kill goes ahead unfrozen. */
const FREEZE_WAIT_MS = 1000;
/** The shell that holds a task until it is in its cgroups; its pid becomes the task's at exec. */
const GATE_SHELL = "/bin/sh";
/** How long a terminal's gate may take to stop itself (a shell's start) before the session fails. */
const GATE_STOP_WAIT_MS = 10_000;

/**
 * The cgroups a task runs in, from a LaunchRequest. Use {@link TaskCgroups.resolve}, then give it to
 * the task context: {@link TaskCgroups.spawn} starts a process inside them.
 *
 * @example
 * ```ts
 * import { TaskCgroups } from "@nomadkit/server/executor";
 * const cgroups = TaskCgroups.resolve({ cgroupV1Override: { freezer: "nomad/web", memory: "nomad/web" } });
 * const child = cgroups!.spawn("/usr/bin/sleep", ["60"], { stdio: "ignore", detached: true });
 * await cgroups!.killAll(); // the child and anything it started, wherever it went
 * ```
 */
export class TaskCgroups {
  private constructor(private readonly dirs: readonly CgroupDir[]) {}

  /**
   * The task's cgroups, or undefined when the request names none. Precedence as in Nomad's
   * executor: the override for the host's cgroup mode (`cgroup_v2_override` on v2, on v1 also when
   * it names a cgroup2 directory absolutely or there is no `cgroup_v1_override`), then the cpuset
   * cgroup the client made (on cgroup v1 with the freezer, cpu and memory cgroups of Nomad's layout
   * that exist next to it). Throws FailedPrecondition naming the field for a directory that is
   * not a cgroup, a hierarchy's root, or the executor's own cgroup: killing everything in it would
   * kill more than the task.
   */
  static resolve(req: TaskCgroupsRequest, roots: CgroupRoots = {}): TaskCgroups | undefined {
    const v2Root = roots.v2 ?? CGROUP_V2_ROOT;
    const v1Root = roots.v1 ?? "/sys/fs/cgroup";
    const dirs: CgroupDir[] = [];
    // As in Nomad, the host's mode decides which override counts: a v2 host ignores the v1 one and
    // a v1 host the v2 one, unless that names (absolutely) a directory of a cgroup2 mount.
    const v2Host = existsSync(join(v2Root, "cgroup.controllers"));
    const v2Path = req.cgroupV2Override && (isAbsolute(req.cgroupV2Override) ? req.cgroupV2Override : join(v2Root, req.cgroupV2Override));
    const v1Wanted = !v2Host && req.cgroupV1Override !== undefined && Object.keys(req.cgroupV1Override).length > 0;
    if (v2Path && (v2Host || existsSync(join(v2Path, "cgroup.controllers")) || !v1Wanted)) {
      dirs.push({ path: v2Path, field: "cgroup_v2_override", version: 2 });
    } else if (v1Wanted) {
      for (const [controller, p] of Object.entries(req.cgroupV1Override!)) {
        const field = `cgroup_v1_override[${JSON.stringify(controller)}]`;
        if (!/^[a-z_][a-z0-9_,=.]*$/i.test(controller) || controller.includes("..")) {
          throw new ConnectError(`${field}: ${JSON.stringify(controller)} is not a cgroup v1 controller name`, Code.InvalidArgument);
        }
        dirs.push({
          path: isAbsolute(p) ? p : join(v1Root, controller, p),
          field,
          version: 1,
          controller,
        });
      }
    } else if (req.cpusetCgroup) {
      const field = req.cpusetField ?? "cpuset_cgroup";
      const cpuset = req.cpusetCgroup;
      if (v2Host) {
        dirs.push({
          path: isAbsolute(cpuset) ? cpuset : join(v2Root, cpuset),
          field,
          version: 2,
        });
      } else {
        const path = isAbsolute(cpuset) ? cpuset : join(v1Root, "cpuset", cpuset);
        // Nomad's v1 layout: <root>/cpuset/<parent>/reserve/<alloc>.<task> for a task with reserved
        // cores, the shared <root>/cpuset/<parent>/share for the others, and beside either
        // <root>/<controller>/<parent>/<alloc>.<task>.
        const own = /^(.*)\/cpuset\/(.+)\/(?:share|reserve)\/([^/]+)\/?$/.exec(path);
        const shared = own ? undefined : /^(.*)\/cpuset\/(.+)\/share\/?$/.exec(path);
        dirs.push({ path, field, version: 1, controller: "cpuset", ...(shared && { shared: true }) });
        const base = own ?? (shared && req.allocId && req.taskName ? [, shared[1], shared[2], `${req.allocId}.${req.taskName}`] : undefined);
        for (const controller of base ? ["freezer", "cpu", "memory"] : []) {
          const path = `${base![1]}/${controller}/${base![2]}/${base![3]}`;
          if (existsSync(join(path, "cgroup.procs"))) dirs.push({ path, field, version: 1, controller });
        }
      }
    } else {
      return undefined;
    }
    for (const d of dirs) checkTaskCgroup(d);
    return new TaskCgroups(dirs);
  }

  /** The cgroup v2 directory, for cgroup statistics; undefined on v1. */
  get v2Path(): string | undefined {
    return this.dirs.find((d) => d.version === 2)?.path;
  }

  /** The cgroup v1 directories of the memory, cpuacct and cpu controllers, for statistics. */
  get v1Stats(): CgroupV1Dirs | undefined {
    const of = (c: string) => this.dirs.find((d) => d.controller?.split(",").includes(c))?.path;
    const cpu = of("cpu");
    // cpu and cpuacct are often mounted together (systemd hosts): the cpu directory has cpuacct's files.
    const cpuacct = of("cpuacct") ?? (cpu !== undefined && existsSync(join(cpu, "cpuacct.usage")) ? cpu : undefined);
    const dirs: CgroupV1Dirs = { memory: of("memory"), cpuacct, cpu };
    return dirs.memory || dirs.cpuacct || dirs.cpu ? dirs : undefined;
  }

  /** Every directory the task joins. */
  get paths(): string[] {
    return this.dirs.map((d) => d.path);
  }

  /**
   * Spawns `file args` inside the cgroups: a gate (perl, else a shell) waits on a pipe until its pid
   * has been written to every cgroup, then closes the pipe and execs the command (same pid), so
   * nothing of the command runs outside them and its variables are passed exactly as given (through the
   * gate's own environment where it is perl, else in its arguments). Takes `child_process.spawn`'s options
   * (uid/gid apply to the command: the executor moves the process, not the process itself; `argv0`
   * is the command's argv[0], as with `spawn`), except `shell`. Throws InvalidArgument when `file` cannot be started (a missing
   * interpreter), and FailedPrecondition naming the field when a cgroup refuses the process, which
   * is then killed.
   */
  spawn(file: string, args: readonly string[], options: SpawnOptions = {}): ChildProcess {
    const stdio = expandStdio(options.stdio);
    const gateFd = stdio.length;
    if (gateFd > 9) throw new TypeError("TaskCgroups.spawn: at most 9 stdio entries (the gate's descriptor must be a single digit)");
    if (options.shell) throw new TypeError("TaskCgroups.spawn: shell is not supported");
    const { argv0, ...rest } = options;
    const cwd = options.cwd instanceof URL ? fileURLToPath(options.cwd) : options.cwd;
    const gated = gateCommand({ fd: gateFd }, file, args, options.env ?? process.env, argv0, cwd);
    const child = assertSpawned(spawn(gated.file, gated.args, { ...rest, env: gated.env, stdio: [...stdio, "pipe"] }), file);
    const gate = child.stdio[gateFd] as Writable | null;
    if (child.pid === undefined || !gate) return child; // spawn failed: the child emits "error"
    try {
      this.join(child.pid);
    } catch (err) {
      gate.destroy();
      try {
        process.kill(child.pid, "SIGKILL");
      } catch {
        // gone
      }
      throw err;
    }
    gate.on("error", () => undefined);
    gate.end("\n");
    return child;
  }

  /**
   * For a terminal's process, which node-pty starts (so {@link TaskCgroups.spawn} cannot): a gate
   * that stops itself before it execs the command (same pid, environment passed as given; node-pty
   * must start it with the environment `wrap` returns);
   * `admit` moves it into the cgroups, waits until it has stopped and lets it go on. Nothing of the
   * command runs outside them, as Nomad's executor starts an exec session inside the task's cgroup.
   * `admit` rejects (FailedPrecondition naming the field) when a cgroup refuses the process.
   */
  ptyGate(): PtyGate {
    return {
      // node-pty starts the gate in the directory its PWD names.
      wrap: (file, args, env, argv0) => gateCommand("stop", file, args, env, argv0, env.PWD),
      admit: async (pid) => {
        try {
          this.join(pid);
        } catch (err) {
          // A gate that is already gone (killed, aborted, a cwd it could not enter): its exit is the session's answer.
          if (gone((await readProcStat(pid))?.state)) return;
          throw err;
        }
        // SIGCONT before the gate has stopped would be lost, and the gate would then wait forever.
        for (const until = Date.now() + GATE_STOP_WAIT_MS; ; await delay(1)) {
          const state = (await readProcStat(pid))?.state;
          if (state === "T" || gone(state)) break;
          if (Date.now() > until) throw new ConnectError(`the terminal's process ${pid} did not reach its gate in ${GATE_STOP_WAIT_MS} ms`, Code.Unavailable);
        }
        try {
          process.kill(pid, "SIGCONT");
        } catch {
          // gone: the session reports its exit
        }
      },
    };
  }

  /**
   * Writes the task's resource limits into its cgroups before it starts, as Nomad's universal
   * executor does (`configureCG1` / `configureCG2`): the hard memory limit (`memory_max_mb`, else
   * `memory_mb`; a `memory_max_mb` of -1 means none), the soft one (`memory_mb` when there is a
   * `memory_max_mb`), swap off (cgroup v1 `memory.swappiness` 0), the cpu shares (cgroup v2:
   * `cpu.weight`) and the cpuset's cpus. Cgroups a job
   * names with `cgroup_v1_override` keep the limits they have, as in Nomad. A write the kernel
   * refuses is skipped, as Nomad skips it; the refusals are returned, for the log.
   *
   * @example
   * ```ts
   * const refused = cgroups.applyLimits({ memoryMb: 256n, memoryMaxMb: 0n, cpuShares: 500n, cpusetCpus: "" });
   * ```
   */
  applyLimits(limits: TaskLimits): string[] {
    const refused: string[] = [];
    const write = (dir: CgroupDir | undefined, file: string, value: string) => {
      if (dir === undefined) return;
      try {
        writeFileSync(join(dir.path, file), value);
      } catch (err) {
        refused.push(`${join(dir.path, file)} = ${value}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
      }
    };
    const { hard, soft } = memoryLimits(limits);
    const v2 = this.dirs.find((d) => d.version === 2);
    if (v2 !== undefined) {
      write(v2, "memory.max", hard === undefined ? "max" : String(hard));
      if (soft > 0n) write(v2, "memory.low", String(soft));
      if (limits.cpuShares > 0n) write(v2, "cpu.weight", String(cpuWeight(limits.cpuShares)));
      if (limits.cpusetCpus !== "") write(v2, "cpuset.cpus", limits.cpusetCpus);
      return refused;
    }
    if (this.dirs.some((d) => d.field.startsWith("cgroup_v1_override"))) return refused;
    const of = (c: string) => this.dirs.find((d) => d.controller === c);
    write(of("memory"), "memory.limit_in_bytes", hard === undefined ? "-1" : String(hard));
    if (soft > 0n) write(of("memory"), "memory.soft_limit_in_bytes", String(soft));
    // Nomad's MaybeDisableMemorySwappiness: without it a task at its limit (no memsw limit) is
    // swapped out on a host with swap instead of being OOM-killed. cgroup v2 has no such file.
    write(of("memory"), "memory.swappiness", "0");
    if (limits.cpuShares > 0n) write(of("cpu"), "cpu.shares", String(limits.cpuShares));
    const cpuset = of("cpuset");
    if (limits.cpusetCpus !== "" && cpuset?.shared !== true) write(cpuset, "cpuset.cpus", limits.cpusetCpus);
    return refused;
  }

  /** Moves a process (all its threads) into every cgroup of the task. */
  join(pid: number): void {
    for (const d of this.dirs) {
      try {
        writeFileSync(join(d.path, "cgroup.procs"), `${pid}\n`);
      } catch (err) {
        throw new ConnectError(
          `${d.field}: cannot move the task into ${JSON.stringify(d.path)}: ${(err as Error).message}`,
          Code.FailedPrecondition,
        );
      }
    }
  }

  /**
   * The cgroup that holds only this task, whose processes Shutdown kills: the v2 cgroup, else the
   * v1 freezer, pids or (Nomad's per-task) cpuset cgroup. Other v1 controllers named by an override
   * may be shared with other tasks (one memory cgroup for a group, say): none of those.
   */
  private get containment(): CgroupDir | undefined {
    return (
      this.dirs.find((d) => d.version === 2) ??
      this.dirs.find((d) => d.controller === "freezer") ??
      this.dirs.find((d) => d.controller === "pids") ??
      this.dirs.find((d) => d.controller === "cpuset" && !d.field.startsWith("cgroup_v1_override") && d.shared !== true)
    );
  }

  /**
   * The processes in the task's containment cgroup and its sub-cgroups (never the executor, its
   * parent or init); none when the task has no such cgroup.
   */
  pids(): number[] {
    const dir = this.containment?.path;
    if (dir === undefined) return [];
    const out = new Set<number>();
    for (const pid of cgroupProcs(dir) ?? []) if (pid > 1 && pid !== process.pid && pid !== process.ppid) out.add(pid);
    return [...out];
  }

  /**
   * SIGKILLs every process in the task's containment cgroup and its sub-cgroups and waits until they
   * are empty: `cgroup.kill` on cgroup v2 (recursive); otherwise the freezer (v1 `freezer.state`,
   * v2 `cgroup.freeze`, when there is one) stops them first so none forks in between, then each is
   * killed. Resolves false if processes remained after repeated rounds.
   */
  async killAll(): Promise<boolean> {
    const c = this.containment;
    if (c === undefined) return true;
    const killFile = c.version === 2 && existsSync(join(c.path, "cgroup.kill")) ? join(c.path, "cgroup.kill") : undefined;
    const freezer =
      c.version === 2
        ? { file: join(c.path, "cgroup.freeze"), frozen: "1", thawed: "0", state: join(c.path, "cgroup.events"), done: /^frozen 1$/m }
        : c.controller === "freezer"
          ? { file: join(c.path, "freezer.state"), frozen: "FROZEN", thawed: "THAWED", state: join(c.path, "freezer.state"), done: /^FROZEN$/m }
          : undefined;
    for (let round = 0; round < KILL_ROUNDS; round++) {
      const pids = this.pids();
      if (pids.length === 0) return true;
      if (killFile && tryWrite(killFile, "1")) {
        // the kernel kills the whole subtree, forks in flight included
      } else if (freezer && tryWrite(freezer.file, freezer.frozen)) {
        await waitFor(freezer.state, freezer.done);
        killEach(this.pids());
        tryWrite(freezer.file, freezer.thawed); // killed processes die once thawed
      } else {
        killEach(pids);
      }
      await delay(Math.min(100, 5 * 2 ** round));
    }
    return this.pids().length === 0;
  }

  /**
   * The OOM kills counted in the task's memory cgroup so far (`memory.events` on v2,
   * `memory.oom_control` on v1), or undefined without a memory controller.
   */
  oomKills(): number | undefined {
    for (const d of this.dirs) {
      const file = d.version === 2 ? "memory.events" : d.controller === "memory" ? "memory.oom_control" : undefined;
      if (!file) continue;
      let text: string;
      try {
        text = readFileSync(join(d.path, file), "utf8");
      } catch {
        continue;
      }
      const m = /^oom_kill (\d+)$/m.exec(text);
      if (m) return Number(m[1]);
    }
    return undefined;
  }
}

/** The resources Nomad's executor writes into a task's cgroups ({@link TaskCgroups.applyLimits}). */
export interface TaskLimits {
  /** `allocated_resources.memory.memory_mb`: the hard limit, or the soft one when `memoryMaxMb` is set. */
  memoryMb: bigint;
  /** `allocated_resources.memory.memory_max_mb`: the hard limit when set (0: none given; -1: no limit). */
  memoryMaxMb: bigint;
  /** `linux_resources.cpu_shares` (0: leave the cgroup's). */
  cpuShares: bigint;
  /** `linux_resources.cpuset_cpus`, e.g. "0-1" ("": leave the cgroup's). */
  cpusetCpus: string;
}

const MiB = 1024n * 1024n;

/** Nomad's computeMemory, in bytes; `hard` undefined is no limit. */
function memoryLimits(l: TaskLimits): { hard: bigint | undefined; soft: bigint } {
  if (l.memoryMaxMb === 0n) return { hard: l.memoryMb > 0n ? l.memoryMb * MiB : undefined, soft: 0n };
  if (l.memoryMaxMb < 0n) return { hard: undefined, soft: l.memoryMb * MiB };
  return { hard: l.memoryMaxMb * MiB, soft: l.memoryMb * MiB };
}

/** runc's ConvertCPUSharesToCgroupV2Value: shares 2..262144 onto weight 1..10000. */
function cpuWeight(shares: bigint): bigint {
  return 1n + ((shares - 2n) * 9999n) / 262142n;
}

function checkTaskCgroup(d: CgroupDir): void {
  const fail = (why: string) => {
    throw new ConnectError(`${d.field}: ${JSON.stringify(d.path)} ${why}`, Code.FailedPrecondition);
  };
  try {
    readFileSync(join(d.path, "cgroup.procs"), "utf8");
  } catch (err) {
    return fail(`is not a cgroup directory: ${(err as Error).message}`);
  }
  // A v2 root has no cgroup.events; only a v1 hierarchy's root has release_agent.
  const isRoot = d.version === 2 ? !existsSync(join(d.path, "cgroup.events")) : existsSync(join(d.path, "release_agent"));
  if (isRoot) fail("is the root of its cgroup hierarchy; a task needs a cgroup of its own");
  // Shutdown kills the cgroup's whole subtree: not if the executor (or the plugin above it) is in it.
  // A shared one is never killed through.
  if (d.shared === true) return;
  const own = new Set([process.pid, process.ppid].filter((p) => p > 1));
  if ((cgroupProcs(d.path) ?? []).some((p) => own.has(p))) fail("holds the executor (or its plugin) in its subtree; a task needs a cgroup of its own");
}

/** A gate's command line and the environment to start it with. */
interface GateLaunch {
  file: string;
  args: string[];
  env: Record<string, string>;
}

/**
 * Perl, which Debian and Ubuntu always have (perl-base is Essential); undefined where it is missing
 * or `NOMADKIT_GATE=sh` (in the executor's environment) asks for the shell gate.
 */
function gatePerl(): string | undefined {
  if (process.env.NOMADKIT_GATE === "sh") return undefined;
  // Looked up once: every task launch and exec in cgroups goes through the gate.
  perlPath ??= ["/usr/bin/perl", "/bin/perl"].find((p) => {
    try {
      accessSync(p, fsConstants.X_OK);
      return true;
    } catch {
      return false;
    }
  }) ?? null;
  return perlPath ?? undefined;
}
let perlPath: string | null | undefined;

/** Where the perl gate finds the command's environment: one variable per entry, `name=value`. */
const GATE_ENV_PREFIX = "NOMADKIT_GATE_ENV_";

/**
 * The gate in front of `file args`: it waits (for a line on descriptor `fd`, or stopped until
 * SIGCONT), then execs the command with exactly the variables of `env` (in another order: programs
 * cannot rely on it, and Nomad's own order is a map's). Perl starts with none of them: each entry is
 * the value of a `NOMADKIT_GATE_ENV_<i>` variable of its own environment (which only its user and
 * root can read, where argv is in every user's /proc/<pid>/cmdline), so the task's LD_PRELOAD,
 * LD_LIBRARY_PATH, PERL5OPT or LANG act on the command only, never on the gate before it is in the
 * cgroups; the script rebuilds %ENV from them before the exec. Without perl, /bin/sh, with an empty
 * environment: a shell drops names such as `NOMAD_META_release.channel` and rewrites PWD, IFS,
 * PPID and OPTIND, so the environment goes to `env -i` in argv. A terminal's gate ignores SIGINT
 * and SIGQUIT while it is stopped: a ^C typed then would stay pending and kill the gate at SIGCONT
 * instead of reaching the command; it is dropped, and the command starts with both at default (as
 * node-pty starts the gate). The command's argv[0] is `argv0` (perl execs `file` with it; env execs
 * by name, see execvpName). Throws InvalidArgument for a command that cannot start.
 */
function gateCommand(
  wait: "stop" | { fd: number },
  file: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv | Readonly<Record<string, string>>,
  argv0: string = file,
  /** The directory the gate starts in; default this process's. */
  cwd?: string,
): GateLaunch {
  checkInterpreter(file);
  const vars = Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined);
  const perl = gatePerl();
  if (perl !== undefined) {
    const hold =
      wait === "stop"
        ? '$SIG{INT} = $SIG{QUIT} = "IGNORE"; kill "STOP", $$; $SIG{INT} = $SIG{QUIT} = "DEFAULT";'
        : `open(my $g, "<&=", ${wait.fd}) or exit 125; sysread($g, my $b, 1) or exit 125; close $g;`;
    // `$! + 0` and ENOENT's number, not %!: that would load Errno.pm (a few ms) at every start.
    const script =
      `my %e; for (grep { /^${GATE_ENV_PREFIX}\\d+\\z/ } keys %ENV) { my ($k, $v) = split /=/, $ENV{$_}, 2; $e{$k} = $v } %ENV = %e; ` +
      `${hold} my $f = shift @ARGV; exec { $f } @ARGV; my $err = $! + 0; print STDERR "nomadkit-gate: $f: $!\n"; exit($err == ${osConstants.errno.ENOENT} ? 127 : 126);`;
    return {
      file: perl,
      args: ["-e", script, "--", file, argv0, ...args],
      env: Object.fromEntries(vars.map(([k, v], i) => [`${GATE_ENV_PREFIX}${i}`, `${k}=${v}`])),
    };
  }
  // env execs by name (execvp) with the variables it was given: the name as typed when that finds `file`.
  const name = execvpName(argv0, file, Object.fromEntries(vars), cwd);
  // `env` would take the command for one more variable.
  if (name.includes("=")) throw new ConnectError(`cannot start ${JSON.stringify(name)} in cgroups: its path contains "="`, Code.InvalidArgument);
  const hold = wait === "stop" ? "trap '' INT QUIT; kill -STOP $$ && trap - INT QUIT &&" : `read -r _ <&${wait.fd} || exit 125; exec ${wait.fd}<&-;`;
  return { file: GATE_SHELL, args: ["-c", `${hold} exec env -i -- "$@"`, "nomadkit-gate", ...vars.map(([k, v]) => `${k}=${v}`), name, ...args], env: {} };
}

/** Whether a process state means it has exited (gone, or a zombie). */
function gone(state: string | undefined): boolean {
  return state === undefined || state === "Z" || state === "X";
}

function expandStdio(stdio: StdioOptions | undefined): Exclude<StdioOptions, string> {
  if (Array.isArray(stdio)) {
    const out = [...stdio];
    while (out.length < 3) out.push("pipe");
    return out;
  }
  const all = stdio ?? "pipe";
  return [all, all, all] as Exclude<StdioOptions, string>;
}

function tryWrite(path: string, text: string): boolean {
  try {
    writeFileSync(path, text);
    return true;
  } catch {
    return false;
  }
}

function killEach(pids: readonly number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
}

/** Waits (bounded) until `file` matches `done`: a freezer that is FROZEN, not FREEZING any more. */
async function waitFor(file: string, done: RegExp): Promise<void> {
  const until = Date.now() + FREEZE_WAIT_MS;
  while (Date.now() < until) {
    try {
      if (done.test(readFileSync(file, "utf8"))) return;
    } catch {
      return;
    }
    await delay(5);
  }
}

