import { checkTaskResources, PluginShutdownError } from "@nomadkit/client";
import { checkView } from "./check-view.js";
import { CHECKS, type Check } from "./checks.js";
import { cleanupOnExit } from "./exit-cleanup.js";
import { DEFAULT_MEMORY_MB, Suite, type ResolvedOptions } from "./suite.js";
import type { CheckInfo, CheckResult, ConformanceOptions, ConformanceReport } from "./types.js";
import { LostOutput, SkipCheck, describe } from "./util.js";

/**
 * The checks of the suite in run order: name, title and prerequisites.
 *
 * @example
 * ```ts
 * for (const c of listChecks()) console.log(c.name, "-", c.title);
 * ```
 */
export function listChecks(): CheckInfo[] {
  return CHECKS.map(({ name, title, needs }) => ({ name, title, needs }));
}

function resolve(options: ConformanceOptions): ResolvedOptions {
  if (!options.plugin) throw new Error("plugin: the path of the plugin executable is required");
  // What Nomad refuses in a job, refused before anything starts, naming the option.
  checkTaskResources(options, { defaultMemoryMb: DEFAULT_MEMORY_MB });
  if (options.cores !== undefined && options.cores.length > 0 && options.taskCgroup === false)
    throw new Error("cores: reserved cores need the tasks' cgroups, which taskCgroup false turns off");
  return {
    ...options,
    args: options.args ?? [],
    pluginConfig: options.pluginConfig ?? {},
    execShell: options.execShell ?? "/bin/sh",
    // The default task traps SIGHUP; a task of the caller's (`sleep 600`, a shell loop) would die of
    // it, and stop-task would then blame the driver for a task that exited before StopTask.
    signal: options.signal ?? (options.taskConfig === undefined ? "SIGHUP" : "SIGCONT"),
    callTimeoutMs: options.callTimeoutMs ?? 30_000,
    checkTimeoutMs: options.checkTimeoutMs ?? 120_000,
    fingerprintTimeoutMs: options.fingerprintTimeoutMs ?? 10_000,
    shutdownTimeoutMs: options.shutdownTimeoutMs ?? 2_000,
  };
}

/** The selected checks plus everything they depend on; undefined selects all. */
function selection(only: readonly string[] | undefined): Set<string> | undefined {
  if (!only || only.length === 0) return undefined;
  const byName = new Map(CHECKS.map((c) => [c.name, c]));
  const out = new Set<string>();
  const add = (name: string) => {
    const c = byName.get(name);
    if (!c) throw new Error(`checks: unknown check ${JSON.stringify(name)} (known: ${[...byName.keys()].join(", ")})`);
    if (out.has(name)) return;
    out.add(name);
    c.needs.forEach(add);
  };
  only.forEach(add);
  return out;
}

type Outcome = { status: "pass" | "fail" | "skip"; message: string };

/**
 * Runs one check; it fails, whatever it found otherwise, when some task's output went to a FIFO
 * after its EOF by the time it ended (its tasks destroyed): Nomad's logmon would have lost it.
 */
async function runOne(s: Suite, c: Check, stop: AbortSignal | undefined): Promise<Outcome> {
  const r = await runCheck(s, c, stop);
  const lost = s.lostOutput();
  if (!lost) return r;
  for (const f of lost.fifos) s.lateReported.add(f);
  if (r.status === "fail") return { status: "fail", message: `${lost.message}; ${r.message}` };
  return { status: "fail", message: `${lost.message} (otherwise ${r.status === "pass" ? "passed" : "skipped"}${r.message ? `: ${r.message}` : ""})` };
}

async function runCheck(s: Suite, c: Check, stop: AbortSignal | undefined): Promise<Outcome> {
  // One controller per check, aborted by its timeout, by the interruption, or as the check ends: the
  // check runs on a view of the suite whose calls carry it, so a check abandoned at its timeout
  // reaches the plugin no more. The listener on the run's signal is removed when the check ends:
  // one per check would pile up on that long-lived signal (MaxListenersExceededWarning after ten checks).
  const ac = new AbortController();
  const view = checkView(s, ac.signal);
  let finished = false;
  s.current = c.name;
  let timer: NodeJS.Timeout | undefined;
  let onStop: (() => void) | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new Error(`the check did not finish within ${s.opts.checkTimeoutMs} ms`));
      ac.abort();
    }, s.opts.checkTimeoutMs);
    if (stop) {
      onStop = () => {
        reject(new Error("interrupted"));
        ac.abort();
      };
      if (stop.aborted) onStop();
      else stop.addEventListener("abort", onStop, { once: true });
    }
  });
  // Set when the check's own promise settles, not the race: a timed-out check has not finished.
  const run = c.run(view.suite).finally(() => (finished = true));
  try {
    const msg = await Promise.race([run, timeout]);
    return { status: "pass", message: msg ?? "" };
  } catch (err) {
    if (err instanceof SkipCheck) return { status: "skip", message: err.message };
    if (err instanceof LostOutput) for (const f of err.fifos) s.lateReported.add(f);
    let message = describe(err);
    if (err instanceof PluginShutdownError) {
      // Let the exit be recorded before describing it.
      await s.run?.exited;
      message = s.whyGone(s.run);
    }
    return { status: "fail", message };
  } finally {
    clearTimeout(timer);
    if (onStop) stop?.removeEventListener("abort", onStop);
    ac.abort();
    // An interrupted run's cleanup destroys every task at once.
    if (!stop?.aborted) await s.destroyLeft(view.made, finished);
  }
}

/**
 * Runs the lifecycle suite against a driver plugin binary, launched exactly as Nomad launches it
 * (a fresh process for loading, one for validating the config, one for running tasks, and another
 * after a simulated crash). Never throws for plugin misbehaviour: every finding is a row of the
 * report. Throws only for bad options.
 *
 * @example
 * ```ts
 * import { formatReport, runConformance } from "@nomadkit/conformance";
 * const report = await runConformance({
 *   plugin: "./bin/my-driver",
 *   taskConfig: { command: "/bin/sh", args: ["-c", "sleep 600"] },
 * });
 * console.log(formatReport(report));
 * process.exitCode = report.ok ? 0 : 1;
 * ```
 */
export async function runConformance(options: ConformanceOptions): Promise<ConformanceReport> {
  const opts = resolve(options);
  const selected = selection(opts.checks);
  const t0 = performance.now();
  const suite = new Suite(opts);
  // A process ended mid-run (a test runner's timeout) runs no finally: clean up synchronously then.
  const forget = cleanupOnExit(suite);
  const results: CheckResult[] = [];
  const passed = new Set<string>();
  const stop = options.abortSignal;
  try {
    for (const c of CHECKS) {
      if (stop?.aborted) break;
      // Checks left out by `checks` do not appear in the report at all.
      if (selected && !selected.has(c.name)) continue;
      const start = performance.now();
      let r: { status: "pass" | "fail" | "skip"; message: string };
      const missing = c.needs.find((n) => !passed.has(n));
      if (missing) r = { status: "skip", message: `needs ${missing}` };
      else r = await runOne(suite, c, stop);
      await suite.releaseCgroups();
      // The check stopped by the interruption has no result.
      if (stop?.aborted) break;
      if (r.status === "pass") passed.add(c.name);
      const result: CheckResult = { name: c.name, title: c.title, status: r.status, durationMs: performance.now() - start, message: r.message };
      results.push(result);
      opts.onResult?.(result);
    }
  } finally {
    await suite.cleanup();
    forget();
  }
  const count = (st: string) => results.filter((r) => r.status === st).length;
  return {
    plugin: [opts.plugin, ...opts.args].join(" "),
    results,
    passed: count("pass"),
    failed: count("fail"),
    skipped: count("skip"),
    ok: count("fail") === 0 && stop?.aborted !== true,
    interrupted: stop?.aborted === true,
    durationMs: performance.now() - t0,
  };
}
