/**
 * JS values → HCL native-syntax expressions, for hclspec `Literal` (Nomad parses the literal with
 * `hclsyntax.ParseExpression` and evaluates it without variables).
 */

/**
 * Render `value` as an HCL expression. Throws `TypeError` for values HCL cannot express.
 *
 * @example
 * ```ts
 * toHclLiteral({ greeting: "hi ${name}", ports: [80, 443] }); // {"greeting" = "hi $${name}", "ports" = [80, 443]}
 * ```
 */
export function toHclLiteral(value: unknown): string {
  if (value === null || value === undefined) return "null";
  switch (typeof value) {
    case "string":
      return hclString(value);
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) throw new TypeError(`HCL literal cannot express ${value}`);
      return String(value);
    case "bigint":
      return value.toString();
    case "object": {
      if (Array.isArray(value)) return `[${value.map(toHclLiteral).join(", ")}]`;
      const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
      return `{${entries.map(([k, v]) => `${hclString(k)} = ${toHclLiteral(v)}`).join(", ")}}`;
    }
    default:
      throw new TypeError(`HCL literal cannot express a ${typeof value}`);
  }
}

/**
 * A quoted HCL string: HCL knows only the escapes \n \r \t \" \\ \uNNNN, and treats `${` and `%{`
 * as template sequences unless doubled.
 */
function hclString(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const ch = s[i]!;
    const code = s.charCodeAt(i);
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if ((ch === "$" || ch === "%") && s[i + 1] === "{") out += ch + ch;
    else if (code < 0x20 || code === 0x7f) out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += ch;
  }
  return out + '"';
}

/**
 * The value Nomad makes of `toHclLiteral(value)`: every string, object keys too, in NFC (cty
 * normalizes each string it holds), `undefined` properties left out and `undefined` elements null
 * (as the literal writes them); anything else as given.
 *
 * @example
 * ```ts
 * hclLiteralValue({ "cafe\u0301": ["e\u0301"] }); // { "café": ["é"] }, composed
 * ```
 */
export function hclLiteralValue<T>(value: T): T {
  if (typeof value === "string") return value.normalize("NFC") as T;
  // Array.from, not map: a hole is undefined too (the literal writes it as null).
  if (Array.isArray(value)) return Array.from(value as unknown[], (e) => (e === undefined ? null : hclLiteralValue(e))) as T;
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) if (v !== undefined) out[k.normalize("NFC")] = hclLiteralValue(v);
    return out as T;
  }
  return value;
}
