import { fileURLToPath } from "node:url";

/**
 * The file this module was loaded from: in the SDK's build, a file of `@nomadkit/server`'s own
 * directory; in a bundle, the bundle. Undefined when it cannot be told.
 */
export function ownFile(): string | undefined {
  // CommonJS build: __filename is defined. ESM build (no import.meta allowed): our own frame.
  if (typeof __filename === "string") return __filename;
  const stack = new Error().stack ?? "";
  const m =
    /(file:\/\/\/[^\s)]+?):\d+:\d+/.exec(stack) ??
    /\((\/[^\s)]+?):\d+:\d+\)/.exec(stack);
  if (!m) return undefined;
  return m[1]!.startsWith("file:") ? fileURLToPath(m[1]!) : m[1];
}
