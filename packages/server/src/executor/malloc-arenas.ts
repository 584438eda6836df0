/**
 * glibc's malloc arenas in the executor process. By default glibc gives threads their own arenas
 * (up to 8 per core), and V8's worker threads each keep one with pages a mostly idle executor never
 * returns: capping them at 2 (`MALLOC_ARENA_MAX`, read by glibc when the process starts) holds
 * ~1.5 MiB less private memory per executor, i.e. per task, with no measurable cost to its exec
 * streaming. Set by `launchExecutor` for the executor only: the executor takes it back out of its
 * environment first thing, so tasks and exec sessions that inherit that environment never see it.
 * An operator's own `MALLOC_ARENA_MAX` is left as it is, for the executor and its tasks alike.
 * Other C libraries ignore the variable.
 */

const CAP = "2";
/** Says the cap was set by launchExecutor (so is the executor's own), not inherited. */
const MARKER = "NOMADKIT_EXECUTOR_MALLOC_ARENA_MAX";

/**
 * Cap the malloc arenas of the executor started with `env`, unless `env` already sets a cap.
 *
 * @example
 * ```ts
 * const env = { ...process.env };
 * capMallocArenas(env); // env.MALLOC_ARENA_MAX === "2" unless it was set
 * ```
 */
export function capMallocArenas(env: NodeJS.ProcessEnv): void {
  if (env.MALLOC_ARENA_MAX !== undefined) return;
  env.MALLOC_ARENA_MAX = CAP;
  env[MARKER] = CAP;
}

/**
 * In the executor, before anything inherits its environment: remove the cap `capMallocArenas` set
 * (glibc has read it already).
 *
 * @example
 * ```ts
 * dropOwnMallocArenaCap(); // process.env.MALLOC_ARENA_MAX is the operator's, or unset
 * ```
 */
export function dropOwnMallocArenaCap(env: NodeJS.ProcessEnv = process.env): void {
  if (env[MARKER] === undefined) return;
  if (env.MALLOC_ARENA_MAX === env[MARKER]) delete env.MALLOC_ARENA_MAX;
  delete env[MARKER];
}
