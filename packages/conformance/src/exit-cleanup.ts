import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname } from "node:path";

/** What a suite with a run in progress does, synchronously, when its process ends mid-run. */
export interface SyncCleanup {
  cleanupSync(): void;
}

/**
 * Suites with a run in progress. A test runner that times a test out ends its worker mid-run
 * (process.exit, or SIGTERM as vitest's forks pool does): the asynchronous cleanup never runs, and
 * the plugins (reparented to init), their tasks, cgroups and directories would stay.
 */
const running = new Set<SyncCleanup>();
/** Signals whose default action ends the process without running any JavaScript. */
const SIGNALS = ["SIGTERM", "SIGINT", "SIGHUP"] as const;

function cleanupAll(): void {
  for (const s of [...running]) {
    running.delete(s);
    try {
      s.cleanupSync();
    } catch {
      // best effort: the process is ending either way
    }
  }
}

function onSignal(signal: NodeJS.Signals): void {
  // Another listener owns this signal (the CLI aborts the run on Ctrl-C and cleans up itself).
  if (process.listenerCount(signal) > 1) return;
  cleanupAll();
  uninstall();
  // With no listener left the default action applies: the process ends by the signal, as it would have.
  process.kill(process.pid, signal);
}

/** The signals this module listens to: those nobody else did when the first run began. */
const listening: NodeJS.Signals[] = [];

function install(): void {
  process.once("exit", cleanupAll);
  // A signal someone already handles is theirs: the CLI's handlers, for one, stop the run and
  // clean up, and take any other SIGINT listener for a command that gives Ctrl-C its own meaning.
  for (const sig of SIGNALS) {
    if (process.listenerCount(sig) > 0) continue;
    process.on(sig, onSignal);
    listening.push(sig);
  }
}

function uninstall(): void {
  process.off("exit", cleanupAll);
  for (const sig of listening.splice(0)) process.off(sig, onSignal);
}

/**
 * Runs `s.cleanupSync()` if this process exits (or is ended by SIGTERM, SIGINT or SIGHUP, when the
 * process had no listener for it as the first run began and none was added since) before the
 * returned function is called. The listeners exist only while a run is in progress.
 */
export function cleanupOnExit(s: SyncCleanup): () => void {
  if (running.size === 0) install();
  running.add(s);
  return () => {
    if (!running.delete(s)) return;
    if (running.size === 0) uninstall();
  };
}

/**
 * The paths of the unix sockets the processes have open, from `/proc/<pid>/fd` and `/proc/net/unix`
 * (empty without /proc): go-plugin servers (the plugin, a driver's executors) listen in a
 * directory of their own that their death leaves behind.
 */
export function unixSocketPaths(pids: Iterable<number>): string[] {
  const inodes = new Set<string>();
  for (const pid of pids) {
    let fds: string[] = [];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(
          readlinkSync(`/proc/${pid}/fd/${fd}`),
        );
        if (m) inodes.add(m[1]!);
      } catch {
        // closed meanwhile
      }
    }
  }
  const out: string[] = [];
  let table = "";
  try {
    table = readFileSync("/proc/net/unix", "utf8");
  } catch {
    return out;
  }
  // "Num RefCount Protocol Flags Type St Inode Path"
  for (const line of table.split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length >= 8 && inodes.has(f[6]!) && f[7]!.startsWith("/"))
      out.push(f[7]!);
  }
  return out;
}

/** Whether `socket` sits in a go-plugin socket directory (`plugin-*`) under one of `bases`. */
export function inPluginSocketDir(
  socket: string,
  bases: readonly string[],
): boolean {
  const dir = dirname(socket);
  return (
    basename(dir).startsWith("plugin") &&
    [tmpdir(), ...bases].includes(dirname(dir))
  );
}
