/** The go-plugin handshake configuration: a "magic cookie" that tells a plugin it was started by its host. */
export interface HandshakeConfig {
  /** Environment variable holding the cookie. Nomad: `NOMAD_PLUGIN_MAGIC_COOKIE`. */
  cookieKey: string;
  /** Expected value. Nomad: `e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255`. */
  cookieValue: string;
}

/**
 * Nomad's handshake, the default of `servePlugin`. Other go-plugin hosts use their own cookie.
 *
 * @example
 * ```ts
 * await servePlugin({ handshake: { cookieKey: "MY_HOST_PLUGIN", cookieValue: "s3cr3t" }, register });
 * ```
 */
export const NOMAD_HANDSHAKE: Readonly<HandshakeConfig> = Object.freeze({
  cookieKey: "NOMAD_PLUGIN_MAGIC_COOKIE",
  cookieValue:
    "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
});

/** Variables go-plugin hosts set for a plugin: Nomad's cookie and go-plugin's `PLUGIN_*` settings. */
const GO_PLUGIN_VARIABLE = /^(NOMAD_PLUGIN_MAGIC_COOKIE|PLUGIN_[A-Z_]+)$/;

/**
 * The set variables of `env` without the ones a go-plugin host gave this plugin (Nomad's cookie,
 * `PLUGIN_PROTOCOL_VERSIONS`, the port range, AutoMTLS's `PLUGIN_CLIENT_CERT`, ...): what a process
 * the plugin starts (a task, an exec'd command, an executor) may inherit. A child that is itself a
 * go-plugin plugin would otherwise take the host's handshake for its own.
 *
 * @example
 * ```ts
 * spawn("sh", ["-c", cmd], { env: withoutGoPluginVariables(process.env) });
 * ```
 */
export function withoutGoPluginVariables(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined && !GO_PLUGIN_VARIABLE.test(k) && !hostCookieKeys.has(k)) out[k] = v;
  return out;
}

/**
 * Cookie variables of hosts other than Nomad this process was served by (left out like Nomad's).
 * Process-wide, not per module copy: the launcher's transport and the plugin's SDK may be separate
 * copies (a bundle, or the ESM and CommonJS builds).
 */
const hostCookieKeys: Set<string> = ((globalThis as Record<symbol, unknown>)[Symbol.for("@nomadkit/server.hostCookieKeys")] ??= new Set<string>()) as Set<string>;

/** Remember the cookie variable of the handshake this process serves, for {@link withoutGoPluginVariables}. */
export function noteHostCookie(h: HandshakeConfig): void {
  hostCookieKeys.add(h.cookieKey);
}

/** go-plugin's core protocol version; the first handshake field. */
export const CORE_PROTOCOL_VERSION = 1;

const environmentErrorBrand = Symbol.for("@nomadkit/server/PluginEnvironmentError");

/**
 * A start-up environment the plugin cannot work with (cookie, protocol versions, ports, socket
 * directory/group, `PLUGIN_CLIENT_CERT`). `servePlugin` prints it and exits 1, or throws it with
 * `exitProcess: false`.
 *
 * @example
 * ```ts
 * try { await servePlugin({ register, exitProcess: false }); }
 * catch (err) { if (err instanceof PluginEnvironmentError) console.error(err.message); }
 * ```
 */
export class PluginEnvironmentError extends Error {
  /** Always `"PluginEnvironmentError"`. */
  override readonly name = "PluginEnvironmentError";

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    Object.defineProperty(this, environmentErrorBrand, { value: true });
  }

  /** True for instances from either build (ESM or CommonJS) of this package. */
  static override [Symbol.hasInstance](v: unknown): boolean {
    if (this !== PluginEnvironmentError) return Function.prototype[Symbol.hasInstance].call(this, v);
    return typeof v === "object" && v !== null && (v as Record<symbol, unknown>)[environmentErrorBrand] === true;
  }
}

/** Message printed (like go-plugin's) when the binary is run by hand. */
export function notAPluginMessage(h: HandshakeConfig): string {
  return (
    "This binary is a plugin. These are not meant to be executed directly.\n" +
    "Please execute the program that consumes these plugins (Nomad), which will\n" +
    `load any plugins automatically. (The environment variable ${h.cookieKey} is missing or wrong.)\n`
  );
}

/** Whether the environment carries the expected cookie. */
export function hasCookie(env: NodeJS.ProcessEnv, h: HandshakeConfig): boolean {
  return env[h.cookieKey] === h.cookieValue;
}

/**
 * Picks the app protocol version from `PLUGIN_PROTOCOL_VERSIONS` (comma-separated, host's list):
 * the highest both speak. Without the variable (a legacy host) the plugin's lowest version, as
 * go-plugin does. Where go-plugin would skip an unparseable entry, or serve its lowest version to a
 * host that offers none of its own and let the host refuse it, this fails with an error naming the
 * variable: the plugin could not serve that host anyway.
 */
export function negotiateProtocolVersion(
  env: NodeJS.ProcessEnv,
  supported: readonly number[],
): number {
  const own = [...supported].sort((a, b) => b - a);
  const raw = env.PLUGIN_PROTOCOL_VERSIONS;
  if (raw === undefined || raw.trim() === "") return own[own.length - 1]!;
  const offered: number[] = [];
  for (const part of raw.split(",")) {
    const n = Number(part.trim());
    if (!Number.isInteger(n) || part.trim() === "") {
      throw new PluginEnvironmentError(
        `PLUGIN_PROTOCOL_VERSIONS=${JSON.stringify(raw)} is not a comma-separated list of integers`,
      );
    }
    offered.push(n);
  }
  const match = own.find((v) => offered.includes(v));
  if (match === undefined) {
    throw new PluginEnvironmentError(
      `the host offers plugin protocol version(s) ${offered.join(", ")} (PLUGIN_PROTOCOL_VERSIONS) ` +
        `but this plugin speaks ${own.join(", ")}; upgrade whichever side is older`,
    );
  }
  return match;
}

/** Parses `PLUGIN_MIN_PORT`/`PLUGIN_MAX_PORT`; 0/0 (or unset) means any free port. */
export function portRange(env: NodeJS.ProcessEnv): {
  min: number;
  max: number;
} {
  const parse = (key: string): number => {
    const raw = env[key];
    if (raw === undefined || raw === "") return 0;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < 0 || n > 65535) {
      throw new PluginEnvironmentError(
        `${key}=${JSON.stringify(raw)} is not a port number`,
      );
    }
    return n;
  };
  const min = parse("PLUGIN_MIN_PORT");
  const max = parse("PLUGIN_MAX_PORT");
  if (max < min) {
    throw new PluginEnvironmentError(
      `PLUGIN_MAX_PORT (${max}) is below PLUGIN_MIN_PORT (${min})`,
    );
  }
  return { min, max };
}
