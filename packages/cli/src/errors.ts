/**
 * A user-facing CLI failure: printed as `nomadkit: <message>` without a stack, exit status `exitCode`.
 *
 * @example
 * ```ts
 * throw new CliError("--config agent.json: no such file");
 * ```
 */
export class CliError extends Error {
  /** Always `"CliError"`. */
  override readonly name = "CliError";
  constructor(
    message: string,
    /** Process exit status {@link main} returns for it; default 1. */
    readonly exitCode = 1,
  ) {
    super(message);
  }
}
