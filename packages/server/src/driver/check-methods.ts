/**
 * The methods of a driver, checked where it is defined and served: a plain JS driver that leaves
 * out a required one would otherwise start fine and fail only on Nomad's first call of it.
 */
/** What Nomad calls for every task: the methods `Driver` requires. */
const REQUIRED = ["startTask", "waitTask", "stopTask", "destroyTask"] as const;

/** The optional methods: left out, they answer the way Nomad expects; given, they must be functions. */
const OPTIONAL = [
  "setConfig",
  "init",
  "shutdown",
  "fingerprint",
  "inspectTask",
  "recoverTask",
  "signalTask",
  "execTask",
  "execTaskStreaming",
  "execTaskStreamingRaw",
  "taskStats",
  "createNetwork",
  "destroyNetwork",
] as const;

/** Throws a TypeError naming `driver.<method>` for a required method missing or any method that is not a function. */
export function checkDriverMethods(driver: object): void {
  const d = driver as Record<string, unknown>;
  for (const m of REQUIRED) {
    if (typeof d[m] !== "function")
      throw new TypeError(
        `driver.${m} is required: Nomad calls it for every task; got ${shown(d[m])}`,
      );
  }
  for (const m of OPTIONAL) {
    if (d[m] !== undefined && typeof d[m] !== "function")
      throw new TypeError(
        `driver.${m} must be a function when given; got ${shown(d[m])}`,
      );
  }
}

function shown(v: unknown): string {
  if (v === undefined) return "undefined";
  try {
    return JSON.stringify(v)?.slice(0, 100) ?? String(v);
  } catch {
    return String(v);
  }
}
