// Shared by the tests that hold the repo's config code to tools/hcldec-go (what a Nomad client does
// with a driver's hclspec schema and a task's config): when it can run, and one run of it.
import { existsSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { toJson } from "@bufbuild/protobuf";
import { SpecSchema, type Spec } from "@nomadkit/protocol/hclspec";
import fc from "fast-check";

/** Why the Go decoder cannot be built here, or undefined when it can. */
export const hcldecSkip =
  process.platform !== "linux" || !existsSync("/usr/bin/dpkg")
    ? "the Go decoder is built from Debian's Go packages (Linux with dpkg)"
    : undefined;

/** One schema and a task's config for it, as the job holds it (JSON). */
export interface HcldecCase {
  spec: Spec;
  config: unknown;
}

/** What a Nomad client makes of a case: cty msgpack (base64), cty JSON and type; or why not. */
export interface HcldecResult {
  msgpack?: string;
  json?: unknown;
  type?: unknown;
  error?: string;
  panic?: string;
}

/**
 * Runs the built hcldec-go binary `bin` on `cases`, one result per case.
 *
 * @example
 * const [r] = runHcldec(bin, [{ spec: schema.toProto(), config: { a: 1 } }]);
 */
export function runHcldec(
  bin: string,
  cases: readonly HcldecCase[],
): HcldecResult[] {
  const input = cases.map((c) => ({
    spec: toJson(SpecSchema, c.spec),
    config: c.config,
  }));
  const r = spawnSync(bin, [], {
    input: JSON.stringify(input),
    encoding: "utf8",
    maxBuffer: 256 << 20,
  });
  if (r.status !== 0)
    throw new Error(`hcldec-go: exit ${r.status}\n${r.stderr}`);
  return JSON.parse(r.stdout) as HcldecResult[];
}

/**
 * A generated config for generated fields: each one mostly written with one of its values, now and
 * then null or left out, and once in a while beside a key no schema declares.
 *
 * @example
 * const config = configOf([{ name: "a", value: fc.integer() }]);
 */
export function configOf(
  fields: readonly { name: string; value: fc.Arbitrary<unknown> }[],
): fc.Arbitrary<Record<string, unknown>> {
  const entry = (f: { name: string; value: fc.Arbitrary<unknown> }) =>
    fc.oneof(
      { weight: 6, arbitrary: f.value.map((v) => [[f.name, v]]) },
      { weight: 1, arbitrary: fc.constant([[f.name, null]]) },
      { weight: 2, arbitrary: fc.constant([]) },
    );
  return fc
    .tuple(
      fc.tuple(...fields.map(entry)),
      fc.oneof(
        { weight: 9, arbitrary: fc.constant([]) },
        { weight: 1, arbitrary: fc.constant([["bogus", 1]]) },
      ),
    )
    .map(([entries, extra]) =>
      Object.fromEntries([...entries.flat(), ...extra] as Array<
        [string, unknown]
      >),
    );
}
