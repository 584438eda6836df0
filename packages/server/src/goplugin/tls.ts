// The one AutoMTLS certificate implementation lives in @nomadkit/client (the host needs it too).
export {
  generateSelfSignedCertificate,
  certDerToHandshakeField,
} from "@nomadkit/client";
