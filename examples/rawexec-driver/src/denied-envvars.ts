// raw_exec's denied_envvars (Nomad 1.10+, plugin and task option): variables whose names match
// one of the patterns are removed from the task's environment before the executor starts it.
// Nomad matches with github.com/ryanuber/go-glob: `*` stands for any run of characters (none
// included), everything else is literal and case-sensitive, and the whole name must match.
import { invalidArgument } from "@nomadkit/server";

/**
 * Refuses patterns that can never match a variable name, with InvalidArgument naming the entry
 * (`denied_envvars[1]: ...`): an empty one, and one holding `=` or NUL, which no name has (e.g.
 * `"SECRET=x"`, where a name was meant). Nomad takes them and scrubs nothing with them.
 *
 * @example
 * ```ts
 * checkEnvPatterns(["AWS_*", "*_TOKEN"], "denied_envvars"); // fine
 * checkEnvPatterns(["SECRET=1"], "config.denied_envvars"); // throws InvalidArgument
 * ```
 */
export function checkEnvPatterns(
  patterns: readonly string[],
  field: string,
): void {
  patterns.forEach((p, i) => {
    const where = `${field}[${i}]`;
    if (p === "")
      throw invalidArgument(where, "an empty pattern matches no variable");
    if (p.includes("="))
      throw invalidArgument(
        where,
        `${JSON.stringify(p)} holds "=", which no variable name has (give the name, not NAME=value)`,
      );
    if (p.includes("\0"))
      throw invalidArgument(
        where,
        `${JSON.stringify(p)} holds a NUL, which no variable name has`,
      );
  });
}

/**
 * Whether a variable name matches a pattern: `*` matches any run of characters, the rest is
 * literal and case-sensitive, and the pattern covers the whole name.
 *
 * @example
 * ```ts
 * envNameMatches("*_TOKEN", "CONSUL_HTTP_TOKEN"); // true
 * envNameMatches("AWS_*", "aws_region"); // false
 * ```
 */
export function envNameMatches(pattern: string, name: string): boolean {
  const parts = pattern.split("*");
  if (parts.length === 1) return pattern === name;
  const first = parts[0]!;
  const last = parts[parts.length - 1]!;
  if (!name.startsWith(first)) return false;
  // Each middle part at its leftmost place after the previous one: leaves the most for the rest.
  let pos = first.length;
  for (const part of parts.slice(1, -1)) {
    const at = name.indexOf(part, pos);
    if (at < 0) return false;
    pos = at + part.length;
  }
  return name.length - last.length >= pos && name.endsWith(last);
}

/**
 * The environment without the variables a pattern matches (the plugin's and the task's lists together).
 *
 * @example
 * ```ts
 * withoutDeniedEnv({ PATH: "/bin", AWS_SECRET_ACCESS_KEY: "x" }, ["AWS_*"]); // { PATH: "/bin" }
 * ```
 */
export function withoutDeniedEnv(
  env: Readonly<Record<string, string>>,
  patterns: readonly string[],
): Record<string, string> {
  if (patterns.length === 0) return { ...env };
  return Object.fromEntries(
    Object.entries(env).filter(
      ([name]) => !patterns.some((p) => envNameMatches(p, name)),
    ),
  );
}
