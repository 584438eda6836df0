import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterAll, describe, expect, it } from "vitest";

// A file of its own: nsenterPath() caches the first nsenter it finds, and this test puts its own
// first on PATH before the module loads.
const isRoot = process.getuid?.() === 0;
// The real nsenter, which the shim below runs.
const realNsenter = (() => {
  try {
    return (
      execFileSync("sh", ["-c", "command -v nsenter"], {
        encoding: "utf8",
      }).trim() || undefined
    );
  } catch {
    return undefined;
  }
})();
const dir = mkdtempSync(join(tmpdir(), "nk-nsenter-locale-"));
const saved = { PATH: process.env.PATH, LC_ALL: process.env.LC_ALL };

afterAll(() => {
  process.env.PATH = saved.PATH;
  if (saved.LC_ALL === undefined) delete process.env.LC_ALL;
  else process.env.LC_ALL = saved.LC_ALL;
  rmSync(dir, { recursive: true, force: true });
});

describe.runIf(isRoot && realNsenter !== undefined)(
  "assertNetnsUsable under a translated locale",
  () => {
    it("still tells a namespace of another kind (nsenter's message is read in the C locale)", async () => {
      // The real nsenter, its messages translated as gettext would under a German locale (Debian's
      // util-linux-locales; not installed here): only LC_ALL=C keeps them English.
      const shim = join(dir, "nsenter");
      writeFileSync(
        shim,
        `#!/bin/sh
if [ "$LC_ALL" = C ]; then exec ${realNsenter} "$@"; fi
${realNsenter} "$@" 2>"${dir}/err"; rc=$?
sed 's/Invalid argument/Ungültiges Argument/' "${dir}/err" >&2
exit $rc
`,
      );
      chmodSync(shim, 0o755);
      process.env.PATH = `${dir}:${saved.PATH ?? ""}`;
      process.env.LC_ALL = "de_DE.UTF-8";
      const { assertNetnsUsable, nsenterPath } =
        await import("../src/network.js");
      expect(nsenterPath()).toBe(shim);
      await expect(
        assertNetnsUsable({ path: "/proc/self/ns/net" }, "spec.path"),
      ).resolves.toBeUndefined();
      await expect(
        assertNetnsUsable({ path: "/proc/self/ns/uts" }, "spec.path"),
      ).rejects.toMatchObject({
        code: Code.InvalidArgument,
        rawMessage: expect.stringMatching(
          /^spec\.path: "\/proc\/self\/ns\/uts" is not a network namespace \(nsenter: .*Invalid argument\)$/,
        ),
      });
    });
  },
);
