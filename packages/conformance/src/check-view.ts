import type { Suite, SuiteTask } from "./suite.js";

/** What one check runs against: its own view of the suite, and the tasks it made through it. */
export interface CheckView {
  /** The suite as the check sees it: shared state, with `signal` the check's own. */
  suite: Suite;
  /** The tasks the check made (`newTask`), for the runner to destroy what the check leaves. */
  made: SuiteTask[];
}

/**
 * A check's view of the suite: every field and method is the suite's (what the check sets is set on
 * the suite, so later checks see it), except `signal`, which is the check's own. Methods called on
 * the view read `this.signal` through it, so their calls (`co()`, launches, StartTask, waits) carry
 * the check's signal, and after it fired refuse to start anything: an abandoned check cannot reach
 * the plugin during a later check, as it could when the suite held one signal that the next check
 * replaced. `newTask` also records the task in `made`.
 *
 * @example
 * ```ts
 * const ac = new AbortController();
 * const { suite: view, made } = checkView(suite, ac.signal);
 * await check.run(view); // later: ac.abort(); then destroy what `made` holds and the check left
 * ```
 */
export function checkView(suite: Suite, signal: AbortSignal): CheckView {
  const made: SuiteTask[] = [];
  const view: Suite = new Proxy(suite, {
    get(target, prop) {
      if (prop === "signal") return signal;
      if (prop === "newTask") {
        return (...args: Parameters<Suite["newTask"]>) => {
          const task = target.newTask.apply(view, args);
          made.push(task);
          return task;
        };
      }
      // Not with the view as receiver: a getter would then read the view's own state, which it has none of.
      return Reflect.get(target, prop, target) as unknown;
    },
    set(target, prop, value) {
      if (prop === "signal") return false;
      return Reflect.set(target, prop, value, target);
    },
  });
  return { suite: view, made };
}
