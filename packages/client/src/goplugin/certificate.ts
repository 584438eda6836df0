import { X509Certificate, webcrypto } from "node:crypto";

/** A freshly generated self-signed certificate and its private key, as go-plugin's AutoMTLS uses. */
export interface SelfSignedCertificate {
  /** PEM certificate (`-----BEGIN CERTIFICATE-----`). */
  certPem: string;
  /** PEM PKCS#8 private key (`-----BEGIN PRIVATE KEY-----`). */
  keyPem: string;
  /** DER bytes of the certificate. */
  certDer: Uint8Array;
}

function toPem(label: string, der: Uint8Array): string {
  const b64 = Buffer.from(der).toString("base64");
  const lines = b64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}

/**
 * Generates what go-plugin's `generateCert` does for AutoMTLS: an ECDSA P-256 key and a self-signed
 * CA certificate for `localhost` usable for both server and client authentication, valid from 30 s
 * ago for 30 years. Each side trusts exactly the other side's certificate, so no PKI is involved.
 *
 * @example
 * ```ts
 * const { certPem, keyPem } = await generateSelfSignedCertificate();
 * ```
 */
export async function generateSelfSignedCertificate(): Promise<SelfSignedCertificate> {
  // Loaded on demand: it is large and only AutoMTLS needs it.
  const x509 = await import("@peculiar/x509");
  x509.cryptoProvider.set(
    webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0],
  );
  const alg = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" };
  const keys = (await webcrypto.subtle.generateKey(alg, true, [
    "sign",
    "verify",
  ])) as webcrypto.CryptoKeyPair;
  const serial = Buffer.from(webcrypto.getRandomValues(new Uint8Array(16)));
  serial[0] = serial[0]! & 0x7f; // positive INTEGER
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial.toString("hex"),
    name: "CN=localhost, O=HashiCorp",
    notBefore: new Date(now - 30_000),
    notAfter: new Date(now + 262_980 * 3600_000),
    signingAlgorithm: alg,
    keys: keys as unknown as Parameters<
      typeof x509.X509CertificateGenerator.createSelfSigned
    >[0]["keys"],
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.digitalSignature |
          x509.KeyUsageFlags.keyEncipherment |
          x509.KeyUsageFlags.keyAgreement |
          x509.KeyUsageFlags.keyCertSign,
        true,
      ),
      new x509.ExtendedKeyUsageExtension([
        x509.ExtendedKeyUsage.clientAuth,
        x509.ExtendedKeyUsage.serverAuth,
      ]),
      new x509.SubjectAlternativeNameExtension([
        { type: "dns", value: "localhost" },
      ]),
    ],
  });
  const certDer = new Uint8Array(cert.rawData);
  const pkcs8 = new Uint8Array(
    await webcrypto.subtle.exportKey("pkcs8", keys.privateKey),
  );
  return {
    certPem: toPem("CERTIFICATE", certDer),
    keyPem: toPem("PRIVATE KEY", pkcs8),
    certDer,
  };
}

/**
 * Converts the sixth handshake field (base64 DER, padding optional) to a PEM certificate,
 * throwing when it is not a parseable X.509 certificate.
 * @internal
 */
export function handshakeCertToPem(field: string): string {
  const der = Buffer.from(field, "base64");
  const pem = toPem("CERTIFICATE", der);
  new X509Certificate(pem); // validates
  return pem;
}

/** The handshake's sixth field for a DER certificate: base64 without padding, like Go's RawStdEncoding. @internal */
export function certDerToHandshakeField(der: Uint8Array): string {
  return Buffer.from(der).toString("base64").replace(/=+$/, "");
}
