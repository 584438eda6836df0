/**
 * Whether a bundled plugin answers as its load recording says, checked where it runs. `nomadkit
 * bundle` records PluginInfo and ConfigSchema on the machine and in the environment it runs in,
 * and checks only that two runs there agree; a plugin whose answers follow the host or the
 * environment (a hostname, an environment variable) answers otherwise under Nomad, whose load
 * launch still gets the recorded answers. Every other launch of the bundle loads the plugin and
 * hands it the fast path's transport: the plugin then asks itself the recorded requests once, over
 * its own socket, and warns when an answer differs.
 * @module
 */
import * as http2 from "node:http2";
import { connect } from "node:net";
import type { Logger } from "../log/index.js";
import type { PluginTransport, RecordedAnswer } from "./transport.js";

/**
 * Sends each of `answers`' requests to the plugin serving on `transport` and compares the
 * response body with the recorded one; logs a warning naming the first that differs, and a debug
 * line when all were checked. Never throws. Skipped under AutoMTLS (only the host holds a client
 * certificate).
 *
 * @example
 * ```ts
 * void checkRecordedAnswers(transport, answers, logger); // after the plugin serves on transport
 * ```
 */
export async function checkRecordedAnswers(
  transport: PluginTransport,
  answers: readonly RecordedAnswer[],
  logger: Logger,
): Promise<void> {
  if (transport.tls || answers.length === 0) return;
  const { network, address } = transport;
  const session = http2.connect(
    network === "unix" ? "http://localhost" : `http://${address}`,
    network === "unix" ? { createConnection: () => connect(address) } : {},
  );
  session.on("error", () => undefined);
  try {
    for (const recorded of answers) {
      const got = await call(session, recorded.path, recorded.request);
      if (got.status !== "0" || !got.body.equals(recorded.body)) {
        logger.warn(
          "the load recording's answer differs from this plugin's: Nomad's load launch got the recorded one. Do the plugin's answers depend on the host or the environment? Bundle where it runs, or with --no-load-recording",
          { method: recorded.path, status: got.status },
        );
        return;
      }
    }
    logger.debug("the plugin answers as its load recording", {
      calls: answers.length,
    });
  } catch (err) {
    logger.debug("could not check the load recording's answers", {
      error: (err as Error).message,
    });
  } finally {
    session.close();
  }
}

/** One unary call with exactly `request` (gRPC envelope included): the response body and grpc-status. */
function call(
  session: http2.ClientHttp2Session,
  path: string,
  request: Buffer,
): Promise<{ body: Buffer; status: string }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
    });
    const chunks: Buffer[] = [];
    let status: string | undefined;
    const take = (h: http2.IncomingHttpHeaders) => {
      const s = h["grpc-status"];
      if (typeof s === "string") status = s;
    };
    stream.on("response", take);
    stream.on("trailers", take);
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("error", reject);
    stream.on("end", () =>
      resolve({ body: Buffer.concat(chunks), status: status ?? "missing" }),
    );
    stream.end(request);
  });
}
