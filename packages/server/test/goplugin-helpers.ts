// Helpers for the go-plugin tests: the fixture plugin, raw spawning with full stdout capture, and
// waiting for log entries (log lines are the synchronisation points, never sleeps).
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import {
  launchPlugin,
  type LaunchPluginOptions,
  type PluginClient,
  type PluginLogEntry,
} from "@nomadkit/client";

export const NOMAD_COOKIE = {
  NOMAD_PLUGIN_MAGIC_COOKIE:
    "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
};

export const fixture = (name: string): string =>
  fileURLToPath(new URL(`./fixtures/goplugin/${name}`, import.meta.url));

export const testDriver = fixture("test-driver.mjs");

/** Collects a plugin's parsed log entries and lets tests wait for one. */
export class LogCollector {
  readonly entries: PluginLogEntry[] = [];
  private waiters: {
    match: (e: PluginLogEntry) => boolean;
    resolve: (e: PluginLogEntry) => void;
  }[] = [];

  readonly logger = (e: PluginLogEntry): void => {
    this.entries.push(e);
    this.waiters = this.waiters.filter((w) => {
      if (!w.match(e)) return true;
      w.resolve(e);
      return false;
    });
  };

  waitFor(match: (e: PluginLogEntry) => boolean): Promise<PluginLogEntry> {
    const found = this.entries.find(match);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => this.waiters.push({ match, resolve }));
  }
}

/** Launches the fixture test driver with `TEST_PLUGIN_MODE=mode`. */
export async function launchTestDriver(
  mode = "",
  options: LaunchPluginOptions = {},
): Promise<{ plugin: PluginClient; logs: LogCollector }> {
  const logs = new LogCollector();
  const plugin = await launchPlugin(process.execPath, [testDriver], {
    ...options,
    env: { TEST_PLUGIN_MODE: mode, ...options.env },
    logger: logs.logger,
  });
  return { plugin, logs };
}

/** A plugin process spawned directly, with every stdout/stderr byte recorded. */
export interface RawPlugin {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the first stdout line. */
  firstLine: Promise<string>;
  /** Resolves when stderr contains `text`. */
  stderrContains(text: string): Promise<void>;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export function spawnRaw(script: string, env: NodeJS.ProcessEnv): RawPlugin {
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  const errWaiters: { text: string; resolve: () => void; reject: (e: Error) => void }[] = [];
  let resolveFirst!: (l: string) => void;
  let rejectFirst!: (e: Error) => void;
  const firstLine = new Promise<string>((res, rej) => {
    resolveFirst = res;
    rejectFirst = rej;
  });
  firstLine.catch(() => {}); // only awaited by some tests
  child.stdout!.on("data", (d: Buffer) => {
    out += d.toString();
    const nl = out.indexOf("\n");
    if (nl >= 0) resolveFirst(out.slice(0, nl));
  });
  child.stderr!.on("data", (d: Buffer) => {
    err += d.toString();
    for (const w of errWaiters.splice(0)) {
      if (err.includes(w.text)) w.resolve();
      else errWaiters.push(w);
    }
  });
  // A plugin that dies before printing a line fails the wait instead of hanging the test.
  child.once("close", (code) => {
    const e = new Error(`plugin exited (${code}); stderr:\n${err}`);
    rejectFirst(e);
    for (const w of errWaiters.splice(0)) w.reject(e);
  });
  // "close": all output has been read too.
  const exit = new Promise<{
    code: number | null;
    signal: NodeJS.Signals | null;
  }>((resolve) =>
    child.once("close", (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    firstLine,
    stderrContains: (text) =>
      err.includes(text)
        ? Promise.resolve()
        : new Promise((resolve, reject) => errWaiters.push({ text, resolve, reject })),
    exit,
  };
}
