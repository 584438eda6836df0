import { existsSync, readFileSync } from "node:fs";
import type { Spec } from "@nomadkit/protocol/hclspec";
import { CliError } from "./errors.js";

/** Reads a JSON object from `path`, naming the flag and file in every error. */
export function readJsonObject(
  flag: string,
  path: string,
): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === "ENOENT"
        ? "no such file"
        : code === "EISDIR"
          ? "is a directory"
          : (err as Error).message;
    throw new CliError(`${flag} ${path}: ${why}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new CliError(
      `${flag} ${path}: not valid JSON (${(err as Error).message})`,
    );
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new CliError(
      `${flag} ${path}: expected a JSON object, got ${Array.isArray(value) ? "an array" : JSON.stringify(value)}`,
    );
  }
  return value as Record<string, unknown>;
}

/** A JSON object given to a flag, and how messages name it. */
export interface JsonOption {
  /** The object. */
  value: Record<string, unknown>;
  /** The flag and the file (`--config agent.json`), or the flag alone for inline JSON. */
  source: string;
}

/**
 * A flag's JSON object, given inline (`--config '{"enabled":true}'`: a value starting with `{` or
 * `[` that names no file) or as a file path; every error names the flag (and the file). The one
 * reader of the config flags of every command (`--config`, `--task-config`, `--plugin-config`).
 */
export function readJsonOption(flag: string, text: string): JsonOption {
  if (text.trim() === "") throw new CliError(`${flag}: empty; give a JSON object or the path of a JSON file`);
  if (!/^\s*[{[]/.test(text) || existsSync(text))
    return { value: readJsonObject(flag, text), source: `${flag} ${text}` };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    // It may have been meant as a file: say both.
    throw new CliError(`${flag}: ${JSON.stringify(text)} is neither a file nor valid JSON (${(err as Error).message})`);
  }
  // It starts with `{` or `[`: an object or an array.
  if (Array.isArray(value)) throw new CliError(`${flag}: expected a JSON object, got an array`);
  return { value: value as Record<string, unknown>, source: flag };
}

/**
 * An operator's JSON config as Nomad sends it to the plugin: refused where Nomad's HCL decoder
 * refuses it (keys the plugin's schema does not declare, required attributes missing), naming
 * `source` (the flag and file) and the keys; then shaped by the schema (declared defaults, null for
 * the rest) and encoded as msgpack.
 */
export async function encodeOperatorConfig(
  source: string,
  spec: Spec | undefined,
  value: Record<string, unknown>,
): Promise<Uint8Array> {
  // The conformance kit is loaded only by the commands that need it.
  const { encodeCheckedConfig, ConfigRefusedError } = await import("@nomadkit/conformance");
  try {
    return encodeCheckedConfig(spec, value, source);
  } catch (err) {
    if (err instanceof ConfigRefusedError) throw new CliError(err.message);
    throw err;
  }
}

/** Parses `500ms`, `2s`, `1m` or a plain number of milliseconds. */
export function parseDurationMs(flag: string, text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim());
  if (!m)
    throw new CliError(
      `${flag} ${JSON.stringify(text)}: expected a duration like 500ms, 2s or 1m`,
    );
  const n = Number(m[1]);
  const ms = m[2] === "s" ? n * 1000 : m[2] === "m" ? n * 60_000 : n;
  if (ms <= 0)
    throw new CliError(`${flag} ${JSON.stringify(text)}: must be positive`);
  // What a protobuf Duration holds (Go's ptypes.Duration refuses more).
  if (ms > MAX_DURATION_MS)
    throw new CliError(`${flag} ${JSON.stringify(text)}: must be at most 315576000000s`);
  return ms;
}

const MAX_DURATION_MS = 315_576_000_000 * 1000;

/**
 * `ms` as a protobuf Duration: whole nanoseconds, `nanos` always below one second (an interval
 * like 1.9999999999s rounds to 2 s, not 1 s and 1,000,000,000 ns, which Go refuses).
 */
export function durationOfMs(ms: number): { seconds: bigint; nanos: number } {
  const ns = BigInt(Math.round(ms * 1e6));
  return { seconds: ns / 1_000_000_000n, nanos: Number(ns % 1_000_000_000n) };
}

/** Parses repeated `KEY=VALUE` options. */
export function parseEnvPairs(
  flag: string,
  pairs: readonly string[],
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const p of pairs) {
    const i = p.indexOf("=");
    if (i <= 0)
      throw new CliError(`${flag} ${JSON.stringify(p)}: expected KEY=VALUE`);
    env[p.slice(0, i)] = p.slice(i + 1);
  }
  return env;
}
