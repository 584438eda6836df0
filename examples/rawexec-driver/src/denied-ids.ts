// raw_exec's denied_host_uids / denied_host_gids: the syntax and checks of Nomad's
// drivers/shared/validators, refusing a task whose user has a denied uid or group.
import { invalidArgument, unrecoverable } from "@nomadkit/server";

/** One inclusive range of ids. */
export interface IdRange {
  /** Lowest id in the range. */
  lower: number;
  /** Highest id in the range. */
  upper: number;
}

/** The largest id: Nomad parses the bounds as 32-bit unsigned. */
const MAX_ID = 2 ** 32 - 1;

/** A bound as Nomad's strconv.ParseUint(s, 10, 32) takes it: decimal digits only, at most 2^32-1. */
function bound(text: string): number | undefined {
  if (!/^\d+$/.test(text)) return undefined;
  const n = Number(text);
  return n <= MAX_ID ? n : undefined;
}

/**
 * Parses a list like `"0-100,200"` (comma-separated ids and inclusive `lower-upper` ranges; empty:
 * none). Throws InvalidArgument naming `field` with Nomad's reasons: "range bound not valid",
 * "lower bound cannot be greater than upper bound". Nomad lets `1-2-3` through unchecked; it is
 * refused here too.
 *
 * @example
 * ```ts
 * parseIdRanges("0-100,200", "denied_host_uids"); // [{ lower: 0, upper: 100 }, { lower: 200, upper: 200 }]
 * ```
 */
export function parseIdRanges(text: string, field: string): IdRange[] {
  if (text === "") return [];
  return text.split(",").map((part) => {
    const bounds = part.split("-");
    const [lower, upper] =
      bounds.length === 1
        ? [bound(part), bound(part)]
        : bounds.length === 2
          ? [bound(bounds[0]!), bound(bounds[1]!)]
          : [undefined, undefined];
    if (lower === undefined || upper === undefined)
      throw invalidArgument(
        field,
        `invalid range ${JSON.stringify(part)}: range bound not valid`,
      );
    if (lower > upper)
      throw invalidArgument(
        field,
        `invalid range ${JSON.stringify(part)}: lower bound cannot be greater than upper bound`,
      );
    return { lower, upper };
  });
}

/** The ids a task would run with: its uid and every group id (the primary one included). */
export interface TaskIds {
  /** Who, for the error: the task's `user`, or the plugin's own user. */
  who: string;
  uid: number;
  gids: readonly number[];
}

/**
 * Refuses (unrecoverable: a restart cannot change it) a task whose uid or any group id is in the
 * denied ranges, as Nomad's validator does before the task starts ("running as uid N is disallowed").
 *
 * @example
 * ```ts
 * checkTaskIds({ who: "user \"nobody\"", uid: 65534, gids: [65534] }, parseIdRanges("65534", "denied_host_uids"), []);
 * // throws: user "nobody": running as uid 65534 is disallowed by denied_host_uids
 * ```
 */
export function checkTaskIds(
  ids: TaskIds,
  deniedUids: readonly IdRange[],
  deniedGids: readonly IdRange[],
): void {
  const denied = (ranges: readonly IdRange[], id: number) =>
    ranges.some((r) => id >= r.lower && id <= r.upper);
  if (denied(deniedUids, ids.uid))
    throw unrecoverable(
      `${ids.who}: running as uid ${ids.uid} is disallowed by denied_host_uids`,
    );
  const gid = ids.gids.find((g) => denied(deniedGids, g));
  if (gid !== undefined)
    throw unrecoverable(
      `${ids.who}: running as gid ${gid} is disallowed by denied_host_gids`,
    );
}
