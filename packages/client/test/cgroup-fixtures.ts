// Cgroups made by tests: whether this host lets a test make them, the ones a test made (named with
// its prefix) and their removal, whatever the code under test left in them; and a cgroup2 hierarchy
// of a test's own. Shared by the client's, the server's and the conformance kit's tests.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const CGROUP_ROOT = "/sys/fs/cgroup";
const isRoot = process.getuid?.() === 0;
/** cgroup v2 host (else v1 or hybrid). */
export const v2Host = existsSync(join(CGROUP_ROOT, "cgroup.controllers"));
/** Whether a test may make task cgroups here: root, and a v2 hierarchy or a v1 cpuset controller. */
export const canMakeCgroups = isRoot && (v2Host || existsSync(join(CGROUP_ROOT, "cpuset/cgroup.procs")));

/**
 * Whether cgroup `name` is one named with `prefix`: the prefix itself or followed by a separator
 * (`-run`, `.slice`). Not `<prefix>3`: with a pid at the end of the prefix, that is another
 * process's, whose tasks would be killed.
 */
function namedWith(name: string, prefix: string): boolean {
  return name.startsWith(prefix) && !/^[A-Za-z0-9]/.test(name.slice(prefix.length));
}

/** The cgroups at the top of every hierarchy named with `prefix` (see namedWith). */
export function testCgroups(prefix: string, root = CGROUP_ROOT): string[] {
  if (!existsSync(root)) return [];
  const bases = [root, ...readdirSync(root).map((d) => join(root, d))];
  return bases.flatMap((b) => (existsSync(join(b, "cgroup.procs")) ? readdirSync(b).filter((d) => namedWith(d, prefix)).map((d) => join(b, d)) : []));
}

/** Kills what is in a cgroup tree and removes it, deepest first, retrying while killed processes exit. */
export function removeCgroupTree(dir: string): void {
  if (!existsSync(join(dir, "cgroup.procs"))) return;
  for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) removeCgroupTree(join(dir, e.name));
  for (let i = 0; i < 200; i++) {
    for (const pid of readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean)) {
      try {
        process.kill(Number(pid), "SIGKILL");
      } catch {
        // gone
      }
    }
    try {
      return rmdirSync(dir);
    } catch {
      execFileSync("sleep", ["0.02"]);
    }
  }
}

/**
 * Every cgroup named with `prefix` and below it (parents first), which are then removed with what
 * is in them: a suite's last check that its runs left none, and the clean-up when they did.
 */
export function sweepTestCgroups(prefix: string, root = CGROUP_ROOT): string[] {
  const found: string[] = [];
  const walk = (dir: string): void => {
    found.push(dir);
    for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) walk(join(dir, e.name));
  };
  const tops = testCgroups(prefix, root);
  for (const t of tops) walk(t);
  for (const t of tops) removeCgroupTree(t);
  return found;
}

/**
 * A cgroup2 hierarchy mounted for a test (no controllers: cgroup.procs and cgroup.kill work; on a
 * hybrid host, the unified one), or undefined where that is not possible. `cleanups` gets its
 * unmount, after removing the cgroups named with `prefix` in it (on a hybrid host, the unified
 * hierarchy: other processes' cgroups are there too).
 */
export function mountCgroup2(cleanups: (() => void)[], prefix?: string): string | undefined {
  if (!isRoot) return undefined;
  const mnt = mkdtempSync(join(tmpdir(), "nk-cg2-"));
  try {
    execFileSync("mount", ["-t", "cgroup2", "none", mnt], { stdio: "ignore" });
  } catch {
    rmdirSync(mnt);
    return undefined;
  }
  cleanups.push(() => {
    if (prefix !== undefined) for (const d of readdirSync(mnt)) if (namedWith(d, prefix)) removeCgroupTree(join(mnt, d));
    execFileSync("umount", [mnt]);
    rmdirSync(mnt);
  });
  return mnt;
}
