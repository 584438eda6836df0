import { constants } from "node:os";
import { Code, ConnectError } from "@connectrpc/connect";

/** Linux's SIGRTMAX. */
const MAX_SIGNAL = 64;
const byNumber = new Map<number, NodeJS.Signals>();
for (const [name, num] of Object.entries(constants.signals)) {
  if (!byNumber.has(num)) byNumber.set(num, name as NodeJS.Signals);
}
/**
 * Names Nomad accepts (consul-template's SignalLookup, which Nomad's executor uses for kill_signal
 * and friends) that Node's table lacks: glibc's aliases of SIGCHLD and, on Linux, SIGSYS.
 */
const aliases: Record<string, number> = {
  SIGCLD: constants.signals.SIGCHLD,
  ...(process.platform === "linux" ? { SIGUNUSED: constants.signals.SIGSYS } : {}),
};

/**
 * Resolves a signal given by name ("SIGTERM", "TERM", "sigterm") or number to its number.
 * Throws InvalidArgument naming `field` for unknown signals; `anyNumber` lets through any number
 * from 0 to 64 (real-time signals have no name).
 *
 * @example
 * ```ts
 * import { signalNumber } from "@nomadkit/server/executor";
 * signalNumber("SIGTERM"); // 15
 * ```
 */
export function signalNumber(signal: string | number, field = "signal", options: { anyNumber?: boolean } = {}): number {
  if (typeof signal === "number") {
    if (Number.isInteger(signal) && byNumber.has(signal)) return signal;
    // With anyNumber (the executor's Signal RPC, as Nomad's passes syscall.Signal(n) on): any number
    // the kernel takes, the real-time signals and 0 (a check) included. Elsewhere a number must have
    // a name: drivers get canonical names, and Node's kill() knows no other.
    if (options.anyNumber === true && Number.isInteger(signal) && signal >= 0 && signal <= MAX_SIGNAL) return signal;
    throw new ConnectError(`${field}: unknown signal ${signal}`, Code.InvalidArgument);
  }
  let name = signal.trim().toUpperCase();
  if (/^\d+$/.test(name)) return signalNumber(Number(name), field);
  if (!name.startsWith("SIG")) name = `SIG${name}`;
  const num = (constants.signals as Record<string, number>)[name] ?? aliases[name];
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
