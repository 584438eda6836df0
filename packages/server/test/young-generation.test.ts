// fixYoungGenerationSize in a real Node process: with it, V8's young generation stays at its initial
// size under an allocation pattern that makes it grow otherwise (the control run shows it grows).
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

const built = join(dirname(fileURLToPath(import.meta.url)), "../dist/esm/runtime/young-generation.js");

/** New-space size (MiB) after churning through objects of which many survive a scavenge. */
function newSpaceAfterChurn(fix: boolean): { before: number; after: number } {
  const script = `
    import { getHeapSpaceStatistics } from "node:v8";
    const size = () => getHeapSpaceStatistics().find((s) => s.space_name === "new_space").space_size / 1048576;
    const before = size();
    if (${fix}) (await import(${JSON.stringify(pathToFileURL(built).href)})).fixYoungGenerationSize();
    let keep = [];
    for (let i = 0; i < 1.5e6; i++) { keep.push({ i, a: [i] }); if (keep.length > 2e5) keep = []; }
    console.log(JSON.stringify({ before, after: size() }));
  `;
  return JSON.parse(execFileSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" })) as { before: number; after: number };
}

describe("fixYoungGenerationSize", () => {
  it("keeps the young generation from growing, which it does without", () => {
    if (!existsSync(built)) throw new Error(`build first: ${built} is missing (npx turbo run build)`);
    const control = newSpaceAfterChurn(false);
    expect(control.after).toBeGreaterThanOrEqual(8);
    // Both semi-spaces of the initial size (the first scavenge commits the second).
    const fixed = newSpaceAfterChurn(true);
    expect(fixed.after).toBeLessThanOrEqual(Math.max(2, fixed.before * 2));
  });
});
