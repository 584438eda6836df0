import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Code } from "@connectrpc/connect";
import { afterAll, describe, expect, it } from "vitest";

// A host without nsenter, made for one child process: its own mount namespace, where an overlay
// with a whiteout hides nsenter from every directory it is in. Runs the built code (build first).
const isRoot = process.getuid?.() === 0;
const has = (cmd: string) =>
  spawnSync("sh", ["-c", `command -v ${cmd}`]).status === 0;
const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const dir = mkdtempSync(join(tmpdir(), "nk-no-nsenter-"));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The directories nsenterPath() looks in that hold an nsenter, each once. */
function nsenterDirs(): string[] {
  const dirs = (process.env.PATH ?? "")
    .split(":")
    .concat(["/usr/bin", "/bin", "/usr/sbin", "/sbin"]);
  const found = new Set<string>();
  for (const d of dirs)
    if (d && existsSync(join(d, "nsenter"))) found.add(realpathSync(d));
  return [...found];
}

const child = `
const { assertNetnsUsable } = await import(${JSON.stringify(join(pkg, "dist/esm/network.js"))});
const { TaskProcess } = await import(${JSON.stringify(join(pkg, "dist/esm/executor.js"))});
const outcome = (e) => ({ code: e.code, message: e.rawMessage ?? e.message });
const out = {};
try {
  await assertNetnsUsable({ path: "/proc/self/ns/net" }, "spec.path");
  out.assert = "resolved";
} catch (e) {
  out.assert = outcome(e);
}
try {
  const t = await TaskProcess.launch({ cmd: "/bin/true", env: ["PATH=/usr/bin:/bin"], network: { path: "/proc/self/ns/net" } });
  out.launch = await t.wait();
} catch (e) {
  out.launch = outcome(e);
}
console.log(JSON.stringify(out));
`;

describe.runIf(isRoot && has("unshare") && has("nsenter"))(
  "a host without nsenter",
  () => {
    it("refuses a task in a network namespace up front (FailedPrecondition naming the field and nsenter), not as the task's failure", (ctx) => {
      if (!existsSync(join(pkg, "dist/esm/network.js")))
        throw new Error("build first (npx turbo run build)");
      const dirs = nsenterDirs();
      // The overlays' upper layers live on a tmpfs of the namespace: all of it goes with the child.
      const script = [
        `mount -t tmpfs nk ${dir} || exit 77`,
        ...dirs.map(
          (d, i) =>
            `mkdir ${dir}/u${i} ${dir}/w${i} && mount -t overlay nk -o lowerdir=${d},upperdir=${dir}/u${i},workdir=${dir}/w${i} ${d} || exit 77; rm ${d}/nsenter`,
        ),
        "command -v nsenter >/dev/null && exit 77",
        `exec "${process.execPath}" --input-type=module -e "$0"`,
      ].join("\n");
      const r = spawnSync(
        "unshare",
        ["-m", "--propagation", "private", "sh", "-c", script, child],
        { encoding: "utf8", timeout: 60_000 },
      );
      if (r.status === 77) ctx.skip(); // no overlayfs here
      expect(r.stderr).toBe("");
      const out = JSON.parse(r.stdout) as Record<string, unknown>;
      expect(out.assert).toEqual({
        code: Code.FailedPrecondition,
        message: expect.stringMatching(
          /^spec\.path: entering "\/proc\/self\/ns\/net" needs nsenter \(util-linux\), which cannot be run here \(nsenter: ENOENT\)$/,
        ),
      });
      // The executor's launch checks the same way, naming the LaunchRequest field.
      expect(out.launch).toEqual({
        code: Code.FailedPrecondition,
        message: expect.stringMatching(
          /^network_isolation\.path: .*needs nsenter/,
        ),
      });
      // Nothing of the overlays outlived the child.
      expect(
        execFileSync(
          "sh",
          ["-c", `grep -c ' ${dir} ' /proc/self/mounts || true`],
          { encoding: "utf8" },
        ).trim(),
      ).toBe("0");
    });
  },
);
