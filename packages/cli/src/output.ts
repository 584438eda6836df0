/** Renders a JSON value as indented `key: value` lines for humans. */
export function renderTree(value: unknown, indent = ""): string {
  if (value === null || typeof value !== "object")
    return `${indent}${formatScalar(value)}\n`;
  if (
    Array.isArray(value) &&
    value.every((v) => v === null || typeof v !== "object")
  ) {
    return `${indent}${value.map(formatScalar).join(", ")}\n`;
  }
  const lines: string[] = [];
  const entries = Array.isArray(value)
    ? value.map((v, i) => [`[${i}]`, v] as const)
    : Object.entries(value);
  if (entries.length === 0)
    return `${indent}${Array.isArray(value) ? "[]" : "{}"}\n`;
  for (const [k, v] of entries) {
    if (
      Array.isArray(v) &&
      v.length > 0 &&
      v.every((x) => x === null || typeof x !== "object")
    ) {
      lines.push(`${indent}${k}: ${v.map(formatScalar).join(", ")}\n`);
    } else if (
      v !== null &&
      typeof v === "object" &&
      Object.keys(v).length > 0
    ) {
      lines.push(`${indent}${k}:\n${renderTree(v, indent + "  ")}`);
    } else {
      lines.push(
        `${indent}${k}: ${v !== null && typeof v === "object" ? (Array.isArray(v) ? "[]" : "{}") : formatScalar(v)}\n`,
      );
    }
  }
  return lines.join("");
}

function formatScalar(v: unknown): string {
  return typeof v === "string" ? v : JSON.stringify(v);
}

/** Writes JSON (pretty) or the human tree. */
export function print(value: unknown, json: boolean): void {
  process.stdout.write(
    json ? JSON.stringify(value, null, 2) + "\n" : renderTree(value),
  );
}

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/** 10485760 -> "10.0 MiB". */
export function formatBytes(n: number | bigint): string {
  let v = Number(n);
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(1)} ${UNITS[u]}`;
}
