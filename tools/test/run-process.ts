// Shared by the tools tests that run a command to its end and look at what it printed.
import { spawn, type SpawnOptions } from "node:child_process";

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
