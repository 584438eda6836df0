/**
 * Strings a process is started with — its executable, arguments and environment — reach the
 * kernel NUL-terminated. A NUL inside one makes Node's `spawn` throw a TypeError naming its own
 * parameter (`args[0]`, which the host never sent), and node-pty silently cuts the string there
 * (`echo a\0b` ran as `echo a`). Requests are checked with {@link checkProcessStrings} first, so the
 * host gets InvalidArgument naming its own field.
 */
import { Code, ConnectError } from "@connectrpc/connect";

/**
 * Throws InvalidArgument naming `field(i)` for the first of `values` with a NUL byte.
 *
 * @example
 * ```ts
 * checkProcessStrings(req.command, (i) => `command[${i}]`);
 * ```
 */
export function checkProcessStrings(values: readonly string[], field: (i: number) => string): void {
  for (let i = 0; i < values.length; i++) {
    if (values[i]!.includes("\0")) throw nulError(field(i));
  }
}

/**
 * Throws InvalidArgument naming `field(key)` for the first variable of `env` (an object) whose
 * name or value has a NUL byte.
 *
 * @example
 * ```ts
 * checkProcessEnv(task.env, (k) => `task.env[${JSON.stringify(k)}]`);
 * ```
 */
export function checkProcessEnv(env: Readonly<Record<string, string>>, field: (key: string) => string): void {
  for (const key in env) {
    if (key.includes("\0") || env[key]!.includes("\0")) throw nulError(field(key));
  }
}

function nulError(field: string): ConnectError {
  return new ConnectError(`${field}: contains a NUL byte, which a command, argument or environment variable cannot hold`, Code.InvalidArgument);
}
