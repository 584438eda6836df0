// Shared by the tools tests that run a command to its end and look at what it printed.
import { spawn, type SpawnOptions } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export interface ProcessResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `file` with `args` (stdin closed) until it exits; its exit code and output as text.
 *
 * @example
 * const { code, stderr } = await runProcess("bash", ["-c", "exit 3"]);
 */
export function runProcess(file: string, args: readonly string[], options: SpawnOptions = {}): Promise<ProcessResult> {
  return new Promise((done, fail) => {
    const child = spawn(file, args, { ...options, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout!.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr!.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.once("error", fail);
    child.once("close", (code) => done({ code, stdout, stderr }));
  });
}

/**
 * Builds one of the repo's Go commands with `tools/go/build.sh` (which installs Debian's Go
 * packages on first use: minutes) and gives the binary's path; throws with the script's stderr.
 *
 * @example
 * const bin = await buildGoCommand("tools/hcl-type-go");
 */
export async function buildGoCommand(dir: string): Promise<string> {
  const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
  const r = await runProcess("bash", [join(repo, "tools/go/build.sh"), join(repo, dir)], { cwd: repo });
  if (r.code !== 0) throw new Error(`tools/go/build.sh ${dir}: exit ${r.code}\n${r.stderr}`);
  return r.stdout.trim();
}
