// go-plugin AutoMTLS: the plugin trusts exactly the host's certificate and vice versa.
import { X509Certificate } from "node:crypto";
import * as net from "node:net";
import * as tls from "node:tls";
import { afterEach, describe, expect, it } from "vitest";
import {
  createGrpcTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import {
  HealthClient,
  generateSelfSignedCertificate,
  type PluginClient,
} from "@nomadkit/client";
import { HealthCheckResponse_ServingStatus as ServingStatus } from "@nomadkit/protocol/health";
import { launchTestDriver } from "./goplugin-helpers.js";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function serverCertPem(plugin: PluginClient): string {
  const b64 = plugin.handshake.serverCert;
  return new X509Certificate(Buffer.from(b64, "base64")).toString();
}

/** A health check over a connection made by `connect`; resolves with the status or rejects. */
async function healthOver(connect: () => net.Socket): Promise<ServingStatus> {
  const sessions = new Http2SessionManager(
    "https://localhost",
    {},
    { createConnection: connect },
  );
  try {
    const transport = createGrpcTransport({
      baseUrl: "https://localhost",
      sessionManager: sessions,
    });
    const res = await new HealthClient(transport).check(
      { service: "plugin" },
      { timeoutMs: 10_000 },
    );
    return res.status;
  } finally {
    sessions.abort();
  }
}

describe("AutoMTLS", () => {
  it("serves TLS with its own certificate in handshake field 6 and accepts the host's client", async () => {
    const { plugin } = await launchTestDriver("", { autoMTLS: true });
    cleanups.push(() => plugin.kill());
    const field = plugin.handshake.serverCert;
    expect(field).not.toBe("");
    expect(field).not.toMatch(/=$/); // base64 without padding, like Go's RawStdEncoding
    const cert = new X509Certificate(Buffer.from(field, "base64"));
    expect(cert.subjectAltName).toContain("DNS:localhost");
    expect(cert.checkHost("localhost")).toBe("localhost");
    expect(cert.publicKey.asymmetricKeyDetails?.namedCurve).toBe("prime256v1");
    expect((await plugin.basePlugin.pluginInfo({})).name).toBe("test-driver");
    expect((await plugin.health.check({ service: "plugin" })).status).toBe(
      ServingStatus.SERVING,
    );
    expect((await plugin.kill()).code).toBe(0);
  });

  it("rejects a client without a certificate, and one from another CA", async () => {
    const { plugin, logs } = await launchTestDriver("", { autoMTLS: true });
    cleanups.push(() => plugin.kill());
    const rejections = () =>
      logs.entries.filter((e) => e.message === "rejected TLS client").length;
    const ca = serverCertPem(plugin);
    const target = { path: plugin.address };
    const base = {
      ...target,
      servername: "localhost",
      ca,
      ALPNProtocols: ["h2"],
      minVersion: "TLSv1.2" as const,
    };

    // No client certificate at all.
    await expect(healthOver(() => tls.connect(base))).rejects.toThrow(
      /certificate required|handshake|alert/i,
    );
    await logs.waitFor((e) => e.message === "rejected TLS client");

    // A certificate the plugin was not told to trust.
    const stranger = await generateSelfSignedCertificate();
    await expect(
      healthOver(() =>
        tls.connect({ ...base, cert: stranger.certPem, key: stranger.keyPem }),
      ),
    ).rejects.toThrow();
    await logs.waitFor(() => rejections() >= 2);

    // Plain h2c to the TLS socket fails too.
    const plain = new Http2SessionManager(
      "http://localhost",
      {},
      { createConnection: () => net.connect(target) },
    );
    try {
      const transport = createGrpcTransport({
        baseUrl: "http://localhost",
        sessionManager: plain,
      });
      await expect(
        new HealthClient(transport).check(
          { service: "plugin" },
          { timeoutMs: 10_000 },
        ),
      ).rejects.toThrow();
    } finally {
      plain.abort();
    }

    // The launcher's own client still works.
    expect((await plugin.health.check({ service: "plugin" })).status).toBe(
      ServingStatus.SERVING,
    );
  });

  it("rejects a PLUGIN_CLIENT_CERT that is not a certificate, naming the variable", async () => {
    const { spawnRaw, NOMAD_COOKIE, testDriver } =
      await import("./goplugin-helpers.js");
    const raw = spawnRaw(testDriver, {
      ...NOMAD_COOKIE,
      PLUGIN_PROTOCOL_VERSIONS: "2",
      PLUGIN_CLIENT_CERT: "garbage",
    });
    expect((await raw.exit).code).toBe(1);
    expect(raw.stdout()).toBe("");
    expect(raw.stderr()).toContain("PLUGIN_CLIENT_CERT");
  });
});
