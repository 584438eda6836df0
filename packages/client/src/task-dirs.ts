/**
 * The directories Nomad's allocation runner creates before it calls StartTask, for tools and
 * tests that start tasks themselves: a driver may rely on them (the reference driver runs its
 * tasks in `<alloc_dir>/<task>`).
 */
import { chmodSync, chownSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { makeDirectory } from "./make-directory.js";

/** The NOMAD_*_DIR variables of a task. */
export interface TaskDirsEnv {
  /** `<alloc_dir>/alloc`, the allocation's shared directory. */
  NOMAD_ALLOC_DIR: string;
  /** `<alloc_dir>/<task>/local`, the task's own scratch directory. */
  NOMAD_TASK_DIR: string;
  /** `<alloc_dir>/<task>/secrets`, for the task's secrets. */
  NOMAD_SECRETS_DIR: string;
}

/** What {@link createTaskDirs} made, and the variables Nomad sets for it. */
export interface TaskDirs {
  /** The allocation's directory: TaskConfig.alloc_dir. */
  allocDir: string;
  /** `<alloc_dir>/alloc`, shared by the allocation's tasks (`data/`, `logs/`, `tmp/`): NOMAD_ALLOC_DIR. */
  sharedDir: string;
  /** `<alloc_dir>/alloc/logs`, where Nomad keeps the tasks' logs and their stdout/stderr FIFOs. */
  logsDir: string;
  /** `<alloc_dir>/<task>`, the task's directory (`local/`, `secrets/`, `tmp/`, `private/`). */
  taskDir: string;
  /** The variables Nomad sets for these directories, for TaskConfig.env. */
  env: TaskDirsEnv;
}

/**
 * Creates, below `allocDir` (made if missing), the directory layout Nomad gives a task named
 * `taskName` before StartTask, as Nomad's client/allocdir makes it: the allocation directory 0755;
 * every directory below it 0777 (the task's `tmp` 1777) and, when this process is root, owned by
 * `nobody`, so a task running as another user can use them. Existing directories and their
 * contents are kept. Throws when `taskName` could leave the allocation directory or a directory
 * cannot be made (an error naming the allocation directory and the directory, with the `code` of
 * the failed mkdir: ENOENT, EACCES, ENAMETOOLONG, …).
 *
 * @example
 * ```ts
 * const dirs = createTaskDirs(mkdtempSync(join(tmpdir(), "alloc-")), "web");
 * await plugin.driver.startTask({
 *   task: { id, name: "web", allocDir: dirs.allocDir, env: { ...dirs.env }, stdoutPath, stderrPath, msgpackDriverConfig },
 * });
 * ```
 */
export function createTaskDirs(allocDir: string, taskName: string): TaskDirs {
  if (taskName === "" || taskName === "." || taskName === ".." || taskName.includes("/") || taskName.includes("\0")) {
    throw new Error(`task name ${JSON.stringify(taskName)} cannot name a directory below the allocation directory`);
  }
  const sharedDir = join(allocDir, "alloc");
  const taskDir = join(allocDir, taskName);
  // Not mkdirSync's recursive mode: it never returns under /proc (see makeDirectory).
  const make = (dir: string) => {
    try {
      makeDirectory(dir);
    } catch (err) {
      const what = dir === allocDir ? "cannot create it" : `cannot create ${relative(allocDir, dir)} in it`;
      throw Object.assign(new Error(`allocation directory ${allocDir}: ${what}: ${(err as Error).message}`, { cause: err }), {
        code: (err as NodeJS.ErrnoException).code,
      });
    }
  };
  make(allocDir);
  for (const d of ["data", "logs", "tmp"]) make(join(sharedDir, d));
  for (const d of ["local", "secrets", "tmp", "private"]) make(join(taskDir, d));
  // Nomad's modes, whatever the umask: a task may run as another user (the job's `user`). Nomad's
  // dropDirPermissions makes each one below the allocation directory 0777 (plus the sticky bit of
  // the task's tmp) and gives it to nobody when it can (as root).
  chmodSync(allocDir, 0o755);
  const nobody = process.getuid?.() === 0 ? nobodyIds() : undefined;
  for (const [dir, mode] of [
    [sharedDir, 0o777],
    [join(sharedDir, "data"), 0o777],
    [join(sharedDir, "logs"), 0o777],
    [join(sharedDir, "tmp"), 0o777],
    [taskDir, 0o777],
    [join(taskDir, "local"), 0o777],
    [join(taskDir, "secrets"), 0o777],
    [join(taskDir, "private"), 0o777],
    [join(taskDir, "tmp"), 0o1777],
  ] as const) {
    chmodSync(dir, mode);
    if (nobody) chownSync(dir, nobody.uid, nobody.gid);
  }
  return {
    allocDir,
    sharedDir,
    logsDir: join(sharedDir, "logs"),
    taskDir,
    env: { NOMAD_ALLOC_DIR: sharedDir, NOMAD_TASK_DIR: join(taskDir, "local"), NOMAD_SECRETS_DIR: join(taskDir, "secrets") },
  };
}

/** nobody's uid and gid from /etc/passwd (65534, the usual ids, where it is not listed). */
function nobodyIds(): { uid: number; gid: number } {
  try {
    const line = readFileSync("/etc/passwd", "utf8").split("\n").find((l) => l.startsWith("nobody:"));
    const [, , uid, gid] = line?.split(":") ?? [];
    if (uid && gid && /^\d+$/.test(uid) && /^\d+$/.test(gid)) return { uid: Number(uid), gid: Number(gid) };
  } catch {
    // no /etc/passwd
  }
  return { uid: 65534, gid: 65534 };
}
