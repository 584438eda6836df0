/**
 * Decoding Nomad's msgpack config bytes (`SetConfigRequest.msgpack_config`,
 * `TaskConfig.msgpack_driver_config`) into typed values checked against a schema.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { Decoder } from "@msgpack/msgpack";
import type { HclSpec } from "./spec.js";
import { ConfigFieldError } from "./values.js";
import { errorText } from "../runtime/error-text.js";

/**
 * Decode msgpack `bytes` with `schema`. Empty bytes mean "no config block" (every field absent, so
 * defaults apply). Nulls (Nomad's encoding of unset attributes) become absent fields; a required
 * attribute written as null (Nomad sends it) its type's zero value, as a Go driver sees it.
 *
 * Any problem — malformed msgpack, a wrong type, a missing required field — throws a `ConnectError`
 * with code InvalidArgument whose message starts with `label` and names the field, e.g.
 * `task config: field "args[1]": expected string, got number`. Nothing else is thrown.
 *
 * @example
 * ```ts
 * const cfg = decodeConfig(taskConfig, req.task.msgpackDriverConfig, "task config");
 * ```
 */
export function decodeConfig<T>(schema: HclSpec<T, boolean>, bytes: Uint8Array, label = "config"): T {
  // Nothing sent (no config block): every node, the root too, gets undefined; null is a value sent as null.
  let raw: unknown = undefined;
  if (bytes.byteLength > 0) {
    try {
      // Every element takes at least one byte, so no honest length exceeds the input size.
      const limit = bytes.byteLength;
      // 64-bit integers as bigint, so one a JavaScript number cannot hold exactly is refused, not rounded.
      raw = new Decoder({ useBigInt64: true, maxStrLength: limit, maxBinLength: limit, maxArrayLength: limit, maxMapLength: limit, maxExtLength: limit }).decode(bytes);
    } catch (err) {
      const message = errorText(err);
      // Well-formed, but the decoder refuses the key (it would set an object's prototype).
      if (message.includes("__proto__")) throw new ConnectError(`${label}: a map key "__proto__" is not supported`, Code.InvalidArgument);
      throw new ConnectError(`${label}: malformed msgpack: ${message}`, Code.InvalidArgument);
    }
  }
  try {
    const v = schema.decode(raw, []);
    if (v === undefined) throw new ConfigFieldError([], "required value is missing");
    return v;
  } catch (err) {
    if (err instanceof ConfigFieldError) throw new ConnectError(`${label}: ${err.message}`, Code.InvalidArgument);
    // Anything else (e.g. a RangeError from hostile nesting) is still the caller's bad input.
    throw new ConnectError(`${label}: ${errorText(err)}`, Code.InvalidArgument);
  }
}
