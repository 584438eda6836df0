/**
 * Delays for Node's timers from durations a host sends (deadlines, intervals, grace periods,
 * timeouts). Those can be anything a Go `time.Duration` holds, but a Node timer takes whole
 * milliseconds up to 2^31-1 (~24.8 days): a longer delay fires after 1 ms instead (a 30-day stats
 * interval became ~800 samples a second, a 30-day stop grace an immediate SIGKILL), and
 * `AbortSignal.timeout` throws on a fraction. So every timer armed from a host's duration goes
 * through {@link timerDelayMs}: a longer wait is cut to ~24.8 days, which for these is "not soon".
 */

/** The longest delay a Node timer honours, in ms (2^31-1, ~24.8 days). */
export const MAX_TIMER_DELAY_MS = 2 ** 31 - 1;

/**
 * `ms` as a delay a Node timer honours: whole milliseconds (rounded up, so a timer never fires
 * before the duration), 0 for zero, negative or NaN, at most {@link MAX_TIMER_DELAY_MS}.
 *
 * @example
 * ```ts
 * timerDelayMs(1000.000001); // 1001
 * timerDelayMs(30 * 86_400_000); // 2147483647
 * ```
 */
export function timerDelayMs(ms: number): number {
  if (!(ms > 0)) return 0;
  return ms >= MAX_TIMER_DELAY_MS ? MAX_TIMER_DELAY_MS : Math.ceil(ms);
}
