// The released-contract baseline's record (tools/gates/baseline/): the HISTORY.md line format that
// `npm run baseline` writes, and whether a change records a break the way the breaking-change policy
// in README.md asks (a new line appended, the image rebuilt, both in the same diff).
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { bin, capture, run } from "./exec.mjs";

export const BASELINE = "tools/gates/baseline/released.binpb";
export const HISTORY = "tools/gates/baseline/HISTORY.md";

// `- YYYY-MM-DD (from <short sha, or "uncommitted" before the first commit>): <reason>`
const ENTRY =
  /^- (\d{4}-\d{2}-\d{2}) \(from (?:[0-9a-f]{7,40}|uncommitted)\): \S/;

/**
 * The HISTORY.md line recording a baseline rebuilt at `date` from commit `head` for `reason`
 * (whitespace, newlines included, collapsed so the record stays one line).
 * @example
 *   historyLine(new Date("2026-12-01"), "af71824", "Nomad 2.1 adds X") // "- 2026-12-01 (from af71824): Nomad 2.1 adds X\n"
 */
export function historyLine(date, head, reason) {
  return `- ${date.toISOString().slice(0, 10)} (from ${head}): ${reason.replace(/\s+/g, " ").trim()}\n`;
}

const isDate = (d) => {
  const t = Date.parse(`${d}T00:00:00Z`);
  return !Number.isNaN(t) && new Date(t).toISOString().startsWith(d);
};

const lines = (text) => {
  const all = text.split("\n");
  while (all.length && all.at(-1).trim() === "") all.pop();
  return all;
};

/**
 * Whether the working tree records a break against commit `base`: HISTORY.md keeps every line it
 * had at `base` and appends at least one well-formed entry, and released.binpb was rebuilt (it
 * differs from `base`'s, or it is already what a rebuild of proto/ writes: a break of something
 * added since the release leaves the released image as it was).
 * Returns `{ changed, problems }`: changed is false when HISTORY.md was not touched at all; the
 * break is recorded when changed and problems is empty.
 * @example
 *   const { changed, problems } = recordedSince(base);
 *   const recorded = changed && problems.length === 0;
 */
export function recordedSince(base) {
  if (!capture("git", ["diff", "--name-only", base, "--", HISTORY]))
    return { changed: false, problems: [] };
  const before = lines(capture("git", ["show", `${base}:${HISTORY}`]) ?? "");
  const after = lines(existsSync(HISTORY) ? readFileSync(HISTORY, "utf8") : "");
  const problems = [];
  const edited = before.findIndex((line, i) => after[i] !== line);
  if (edited !== -1)
    problems.push(
      `line ${edited + 1} of the base's ${HISTORY} was changed or removed; a record appends a line and keeps the others as they are`,
    );
  const appended = after
    .slice(before.length)
    .map((line, i) => ({ line, n: before.length + i + 1 }));
  for (const { line, n } of appended) {
    const m = ENTRY.exec(line);
    if (line.trim() && !(m && isDate(m[1])))
      problems.push(
        `${HISTORY} line ${n} is not a record like \`- YYYY-MM-DD (from <sha>): <reason>\`: ${JSON.stringify(line)}`,
      );
  }
  if (edited === -1 && !appended.some(({ line }) => line.trim()))
    problems.push(`${HISTORY} appends no record`);
  if (
    !capture("git", ["diff", "--name-only", base, "--", BASELINE]) &&
    !isBuildOfProto(BASELINE)
  )
    problems.push(
      `${BASELINE} is the base's, not an image of proto/ as changed; \`npm run baseline\` rebuilds it with the record, commit both`,
    );
  return { changed: true, problems };
}

/**
 * Builds proto/ into the baseline image format at `out` (no source info: comments do not change it);
 * returns buf's exit status.
 * @example
 *   if (buildImage(BASELINE) !== 0) process.exit(1);
 */
export function buildImage(out) {
  return run(bin("buf"), [
    "build",
    "proto",
    "--exclude-source-info",
    "-o",
    out,
  ]);
}

/** Whether `image` holds exactly what buildImage writes now. */
function isBuildOfProto(image) {
  const dir = mkdtempSync(path.join(tmpdir(), "nomadkit-baseline-"));
  try {
    const fresh = path.join(dir, "image.binpb");
    if (buildImage(fresh) !== 0) return false;
    return existsSync(image) && readFileSync(fresh).equals(readFileSync(image));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
