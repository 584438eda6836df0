import { constants } from "node:os";
import { Code, ConnectError } from "@connectrpc/connect";

/** Linux's SIGRTMAX. */
const MAX_SIGNAL = 64;
const byNumber = new Map<number, NodeJS.Signals>();
for (const [name, num] of Object.entries(constants.signals)) {
  if (!byNumber.has(num)) byNumber.set(num, name as NodeJS.Signals);
}

/**
 * Resolves a signal given by name ("SIGTERM", "TERM", "sigterm") or number to its number.
 * Throws InvalidArgument naming `field` for unknown signals.
 *
 * @example
 * ```ts
 * import { signalNumber } from "@nomadkit/server/executor";
 * signalNumber("SIGTERM"); // 15
 * ```
 */
export function signalNumber(signal: string | number, field = "signal"): number {
  if (typeof signal === "number") {
    // Any number the kernel takes, real-time signals (32..64) and 0 (a check) included, as Nomad's
    // executor passes syscall.Signal(n) on; only names must be known.
    if (Number.isInteger(signal) && signal >= 0 && signal <= MAX_SIGNAL) return signal;
    throw new ConnectError(`${field}: unknown signal ${signal}`, Code.InvalidArgument);
  }
  let name = signal.trim().toUpperCase();
  if (/^\d+$/.test(name)) return signalNumber(Number(name), field);
  if (!name.startsWith("SIG")) name = `SIG${name}`;
  const num = (constants.signals as Record<string, number>)[name];
  if (num === undefined) throw new ConnectError(`${field}: unknown signal ${JSON.stringify(signal)}`, Code.InvalidArgument);
  return num;
}

/**
 * The name of a signal number (`15` → `SIGTERM`), for logs and `process.kill`.
 *
 * @example
 * ```ts
 * import { signalName } from "@nomadkit/server/executor";
 * signalName(9); // "SIGKILL"
 * ```
 */
export function signalName(num: number): NodeJS.Signals | undefined {
  return byNumber.get(num);
}
