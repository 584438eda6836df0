/**
 * A user-facing CLI failure: printed as `nomadkit: <message>` without a stack, exit status `exitCode`.
 *
 * @example
 * ```ts
 * throw new CliError("--config agent.json: no such file");
 * ```
 */
export class CliError extends Error {
  override readonly name = "CliError";
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}
