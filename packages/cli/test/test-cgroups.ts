// The task cgroups of the CLI tests' runs: below a parent of the test process's own, not the
// host's default (`nomadkit`), so that what a run leaves is found, named and removed.

/** The parent every run and conformance run of this test process gets, unless it names one. */
export const TEST_CGROUP_PARENT = `nomadkit-test-${process.pid}-cli`;

/**
 * `args` of a nomadkit command line with `--cgroup-parent TEST_CGROUP_PARENT` added when the
 * command is `run` or `conformance` and the arguments neither name a parent nor turn cgroups off.
 */
export function withTestCgroupParent(args: readonly string[]): string[] {
  const command = args.find((a) => a === "run" || a === "conformance");
  const skip = ["--cgroup-parent", "--no-task-cgroup", "--help", "--list"];
  if (command === undefined || args.some((a) => skip.includes(a)))
    return [...args];
  return [...args, "--cgroup-parent", TEST_CGROUP_PARENT];
}
