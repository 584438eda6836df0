// Signal names as Nomad's executor takes them (consul-template's SignalLookup), numbers as the kernel does.
import { constants } from "node:os";
import { describe, expect, it } from "vitest";
import { signalName, signalNumber } from "../src/executor/signals.js";

describe("signalNumber", () => {
  it("takes names with or without SIG, in any case, and numbers that have a name", () => {
    expect(signalNumber("SIGTERM")).toBe(15);
    expect(signalNumber("term")).toBe(15);
    expect(signalNumber(" sigkill ")).toBe(9);
    expect(signalNumber("9")).toBe(9);
    expect(signalNumber(1)).toBe(1);
  });

  it("knows the aliases Nomad accepts that Node's table lacks, as the signals they alias", () => {
    expect(signalNumber("SIGCLD")).toBe(constants.signals.SIGCHLD);
    expect(signalNumber("cld")).toBe(constants.signals.SIGCHLD);
    expect(signalName(signalNumber("SIGCLD"))).toBe("SIGCHLD");
    if (process.platform === "linux") {
      expect(signalNumber("SIGUNUSED")).toBe(31);
      expect(signalName(signalNumber("SIGUNUSED"))).toBe("SIGSYS");
    }
  });

  it("refuses unknown names and unnamed numbers, naming the field", () => {
    expect(() => signalNumber("SIGFOO", "kill_signal")).toThrow(
      'kill_signal: unknown signal "SIGFOO"',
    );
    expect(() => signalNumber(34, "signal")).toThrow(
      "signal: unknown signal 34",
    );
    expect(signalNumber(34, "signal", { anyNumber: true })).toBe(34);
    expect(() => signalNumber(65, "signal", { anyNumber: true })).toThrow(
      "signal: unknown signal 65",
    );
  });
});
