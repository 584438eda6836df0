/** A parsed go-plugin handshake line `CORE|APP|NETWORK|ADDRESS|PROTOCOL|SERVER_CERT`. */
export interface Handshake {
  /** go-plugin core protocol version; always 1. */
  coreVersion: number;
  /** Negotiated app protocol version (Nomad: 2). */
  protocolVersion: number;
  /** Transport the plugin listens on. */
  network: "unix" | "tcp";
  /** Socket path, or `host:port`. */
  address: string;
  /** Always `grpc` (net/rpc plugins are rejected). */
  protocol: "grpc";
  /** The plugin's AutoMTLS certificate as base64 DER, or "" without TLS. */
  serverCert: string;
}

const launchErrorBrand = Symbol.for("@nomadkit/client/PluginLaunchError");

/**
 * Why a plugin could not be launched or reattached; `stderr` holds the plugin's recent stderr, and
 * `exit` how the plugin ended when it exited before the handshake.
 *
 * @example
 * ```ts
 * try {
 *   await launchPlugin("./my-driver");
 * } catch (err) {
 *   if (err instanceof PluginLaunchError && err.exit?.signal === "SIGINT") console.log("interrupted");
 * }
 * ```
 */
export class PluginLaunchError extends Error {
  /** Always `"PluginLaunchError"`. */
  override readonly name = "PluginLaunchError";
  constructor(
    message: string,
    /** The last lines the plugin wrote to stderr (may be empty). */
    readonly stderr = "",
    /** How the plugin process ended, when it exited before completing the handshake. */
    readonly exit?: {
      /** Its exit status, or null when a signal ended it. */
      code: number | null;
      /** The signal that ended it, or null. */
      signal: NodeJS.Signals | null;
    },
  ) {
    super(
      stderr
        ? `${message}\n--- plugin stderr (most recent last) ---\n${stderr}`
        : message,
    );
    Object.defineProperty(this, launchErrorBrand, { value: true });
  }

  /** True for instances from either build (ESM or CommonJS) of this package. */
  static override [Symbol.hasInstance](v: unknown): boolean {
    if (this !== PluginLaunchError) return Function.prototype[Symbol.hasInstance].call(this, v);
    return typeof v === "object" && v !== null && (v as Record<symbol, unknown>)[launchErrorBrand] === true;
  }
}

/**
 * Parses and validates a handshake line. Throws {@link PluginLaunchError} naming what is wrong:
 * not a handshake at all, core version other than 1, an app version the host did not offer, an
 * unknown network, or a protocol other than grpc.
 *
 * @example
 * ```ts
 * const hs = parseHandshake("1|2|unix|/tmp/plugin-x/plugin.sock|grpc|", [2]);
 * hs.network; // "unix"
 * ```
 */
export function parseHandshake(
  line: string,
  acceptedVersions: readonly number[],
  plugin = "plugin",
): Handshake {
  const trimmed = line.replace(/\r?\n$/, "").trim();
  const parts = trimmed.split("|");
  if (parts.length < 4) {
    throw new PluginLaunchError(
      `${plugin} wrote ${JSON.stringify(truncate(trimmed))} to stdout, which is not a go-plugin handshake ` +
        `("CORE|APP|NETWORK|ADDRESS|PROTOCOL"). Nothing may be printed to stdout before the handshake; ` +
        `also check that the binary is a go-plugin plugin built for this machine`,
    );
  }
  const [core, app, network, address, protocol = "netrpc", cert = ""] =
    parts as [string, string, string, string, string?, string?];
  if (core !== "1") {
    throw new PluginLaunchError(
      `${plugin} speaks go-plugin core protocol version ${JSON.stringify(core)}, this host speaks 1 (incompatible go-plugin versions)`,
    );
  }
  const appVersion = Number(app);
  if (!/^\d+$/.test(app) || !acceptedVersions.includes(appVersion)) {
    throw new PluginLaunchError(
      `${plugin} negotiated plugin protocol version ${JSON.stringify(app)}, but this host accepts ${acceptedVersions.join(", ")} ` +
        `(the plugin was built for a different Nomad plugin API)`,
    );
  }
  if (network !== "unix" && network !== "tcp") {
    throw new PluginLaunchError(
      `${plugin} listens on unsupported network ${JSON.stringify(network)} (expected unix or tcp)`,
    );
  }
  if (!address)
    throw new PluginLaunchError(
      `${plugin} sent a handshake without an address`,
    );
  if (network === "tcp" && tcpTarget(address) === undefined)
    throw new PluginLaunchError(
      `${plugin} sent a handshake with an invalid tcp address ${JSON.stringify(truncate(address))} (expected host:port)`,
    );
  if (protocol !== "grpc") {
    throw new PluginLaunchError(
      `${plugin} speaks go-plugin protocol ${JSON.stringify(protocol)}; only grpc is supported (net/rpc plugins are not)`,
    );
  }
  return {
    coreVersion: 1,
    protocolVersion: appVersion,
    network,
    address,
    protocol: "grpc",
    serverCert: cert,
  };
}

/**
 * Host and port of a go-plugin tcp address (`127.0.0.1:1234`, `[::1]:1234`); undefined when it is
 * not one.
 *
 * @example
 * ```ts
 * tcpTarget("[::1]:1234"); // { host: "::1", port: 1234 }
 * ```
 */
export function tcpTarget(address: string): { host: string; port: number } | undefined {
  const i = address.lastIndexOf(":");
  const portText = address.slice(i + 1);
  const port = Number(portText);
  if (i <= 0 || !/^\d+$/.test(portText) || port < 1 || port > 65535) return undefined;
  return { host: address.slice(0, i).replace(/^\[|\]$/g, ""), port };
}

function truncate(s: string): string {
  return s.length > 200 ? s.slice(0, 200) + "…" : s;
}
