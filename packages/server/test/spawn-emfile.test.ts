// Out of file descriptors: Node then makes neither the process nor its pipes, and reports the spawn
// failure as an "error" event on the next tick, which crashes a process where nobody listens. Each
// API that spawns must fail that call with a clear error and leave the process running. Run in a
// process of its own, which uses up its descriptors first (built packages).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");

const script = `
import { openSync, closeSync } from "node:fs";
import { PassThrough, Readable } from "node:stream";
import { runExecCommand } from "@nomadkit/server";
import { launchExecutor, prepareTaskContext, spawnInContext } from "@nomadkit/server/executor";
import { launchPlugin } from "@nomadkit/client";
const ctx = await prepareTaskContext({ env: ["PATH=/usr/bin:/bin"] });
const io = () => ({ stdin: Readable.from([]), stdout: new PassThrough().resume(), stderr: new PassThrough().resume() });
const outcome = (p) => p.then(() => "succeeded", (e) => (e.code !== undefined ? e.code + " " : "") + (e.rawMessage ?? e.message));
await runExecCommand({ command: ["true"], tty: true }, io()); // node-pty loaded while files can still be opened
const fill = [];
try { for (;;) fill.push(openSync("/dev/null", "r")); } catch {}
closeSync(fill.pop()); // one left: not enough for a child's pipes
const r = {};
r.runExecCommand = await outcome(runExecCommand({ command: ["true"] }, io()));
r.tty = await outcome(runExecCommand({ command: ["true"], tty: true }, io()));
r.spawnInContext = await outcome((async () => spawnInContext(ctx, "/bin/true", [], { stdio: "pipe" }))());
r.launchExecutor = await outcome(launchExecutor());
r.launchPlugin = await outcome(launchPlugin("/bin/true"));
await new Promise((res) => setTimeout(res, 100)); // any unheard error event would have crashed us by now
for (const fd of fill) closeSync(fd);
r.afterwards = await outcome(runExecCommand({ command: ["true"] }, io()));
process.stdout.write(JSON.stringify(r));
`;

describe("spawning with no file descriptor left", () => {
  it("fails each call clearly, never crashes the process, and works again once descriptors are free", () => {
    if (!existsSync(join(pkg, "dist/esm/index.js"))) throw new Error("build first (npx turbo run build)");
    const res = spawnSync(process.execPath, ["--input-type=module", "-e", script], { cwd: pkg, encoding: "utf8", timeout: 60_000 });
    expect(res.stderr).not.toMatch(/Uncaught|unhandled|EMFILE\n\s+at /);
    expect(res.status).toBe(0);
    const r = JSON.parse(res.stdout) as Record<string, string>;
    expect(r.runExecCommand).toMatch(/^8 cannot start "\/.*true": no file descriptor left/); // ResourceExhausted
    expect(r.tty).toMatch(/^8 exec "\/.*true": cannot open a terminal: /);
    expect(r.spawnInContext).toMatch(/^8 cannot start "\/bin\/true": no file descriptor left/);
    expect(r.launchExecutor).toMatch(/^cannot start the nomadkit executor: spawn .* E[MN]FILE/);
    expect(r.launchPlugin).toMatch(/^cannot start plugin .*: spawn \/bin\/true E[MN]FILE/);
    expect(r.afterwards).toBe("succeeded");
  });
});
