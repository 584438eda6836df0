// young-generation.ts in real Node processes (V8 flags and GC are per process): fixing or holding the
// young generation's size keeps it from growing under an allocation pattern that grows it otherwise
// (control runs show it does), and scavengeEvery frees dead buffers that V8 alone lets pile up.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

const packageDir = join(dirname(fileURLToPath(import.meta.url)), "..");
const built = join(packageDir, "dist/esm/runtime/young-generation.js");
const builtSession = join(packageDir, "dist/esm/exec/session.js");

/** Runs `body` as an ES module in a fresh node with the built module as `yg`; returns its JSON output. */
function inNode<T>(body: string, nodeArgs: string[] = []): T {
  if (!existsSync(built)) throw new Error(`build first: ${built} is missing (npx turbo run build)`);
  const script = `
    import { getHeapSpaceStatistics } from "node:v8";
    const yg = await import(${JSON.stringify(pathToFileURL(built).href)});
    const newSpace = () => getHeapSpaceStatistics().find((s) => s.space_name === "new_space").space_size / 1048576;
    // Objects of which many survive a scavenge: V8 grows the young generation for them.
    const churn = () => { let keep = []; for (let i = 0; i < 1.5e6; i++) { keep.push({ i, a: [i] }); if (keep.length > 2e5) keep = []; } };
    ${body}
  `;
  return JSON.parse(execFileSync(process.execPath, [...nodeArgs, "--input-type=module", "-e", script], { encoding: "utf8", cwd: packageDir })) as T;
}

describe("fixYoungGenerationSize", () => {
  it("keeps the young generation from growing, which it does without", () => {
    const control = inNode<{ before: number; after: number }>(`const before = newSpace(); churn(); console.log(JSON.stringify({ before, after: newSpace() }));`);
    expect(control.after).toBeGreaterThanOrEqual(8);
    // Both semi-spaces of the initial size (the first scavenge commits the second).
    const fixed = inNode<{ before: number; after: number }>(
      `const before = newSpace(); yg.fixYoungGenerationSize(); churn(); console.log(JSON.stringify({ before, after: newSpace() }));`,
    );
    expect(fixed.after).toBeLessThanOrEqual(Math.max(2, fixed.before * 2));
  });

  it("loads the built-ins a plugin serves with before it changes a flag (V8 then rejects Node's code cache for them)", () => {
    // The built-in modules already loaded at the moment the flag changes.
    const r = inNode<{ atChange: string[]; initially: string[] }>(`
      const v8 = (await import("node:v8")).default;
      const loaded = () => process.moduleLoadList.filter((m) => m.startsWith("NativeModule ")).map((m) => m.slice(13));
      const initially = loaded();
      const set = v8.setFlagsFromString;
      let atChange;
      v8.setFlagsFromString = (flags) => { atChange ??= loaded(); return set.call(v8, flags); };
      yg.fixYoungGenerationSize();
      console.log(JSON.stringify({ atChange, initially }));
    `);
    expect(r.initially).not.toContain("http2");
    expect(r.atChange).toEqual(expect.arrayContaining(["http2", "child_process", "net", "tls", "os", "fs/promises", "worker_threads"]));
  });

  it("puts the flag back as the process exits, so a code cache saved then matches a start (V8 stamps caches with the flags)", () => {
    const dir = mkdtempSync(join(tmpdir(), "nk-yg-cache-"));
    try {
      const cacheFile = join(dir, "cache");
      const compile = `
        const { Script } = await import("node:vm");
        const { readFileSync, writeFileSync, existsSync } = await import("node:fs");
        const cacheFile = ${JSON.stringify(cacheFile)};
        const script = new Script("(function f() { return [1, 2, 3].map((x) => x * 2); })()", {
          filename: "cached.js",
          cachedData: existsSync(cacheFile) ? readFileSync(cacheFile) : undefined,
        });
        script.runInThisContext();
      `;
      // Like a launcher's training run: the cache is saved on exit, by a listener added before the flag changes.
      inNode<null>(`
        ${compile}
        process.once("exit", () => writeFileSync(cacheFile, script.createCachedData()));
        yg.fixYoungGenerationSize();
        console.log("null");
      `);
      const start = inNode<{ rejected: boolean }>(`
        ${compile}
        yg.fixYoungGenerationSize();
        console.log(JSON.stringify({ rejected: script.cachedDataRejected }));
      `);
      expect(start.rejected).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("holdYoungGenerationSize", () => {
  it("holds the size while any hold is taken, and lets it grow once all are released", () => {
    const r = inNode<{ before: number; held: number; stillHeld: number; released: number }>(`
      const before = newSpace();
      const a = yg.holdYoungGenerationSize();
      const b = yg.holdYoungGenerationSize();
      churn();
      const held = newSpace();
      a();
      a(); // twice: must not release b's hold
      churn();
      const stillHeld = newSpace();
      b();
      // Growth follows V8's own heuristics: on a busy machine one round may not trigger it.
      for (let i = 0; i < 3 && newSpace() <= stillHeld; i++) churn();
      console.log(JSON.stringify({ before, held, stillHeld, released: newSpace() }));
    `);
    expect(r.held).toBeLessThanOrEqual(Math.max(2, r.before * 2));
    expect(r.stillHeld).toBe(r.held);
    expect(r.released).toBeGreaterThan(r.stillHeld);
  });

  it("restores the growth node started with (V8 raises a command-line 1 to 2)", () => {
    const r = inNode<{ held: number; released: number }>(
      `
      const release = yg.holdYoungGenerationSize();
      churn();
      const held = newSpace();
      release();
      churn();
      console.log(JSON.stringify({ held, released: newSpace() }));
    `,
      ["--semi-space-growth-factor=1"],
    );
    expect(r.released).toBeGreaterThan(r.held);
  });

  it("does not undo fixYoungGenerationSize when released", () => {
    const r = inNode<{ before: number; after: number }>(`
      const before = newSpace();
      const release = yg.holdYoungGenerationSize();
      yg.fixYoungGenerationSize();
      release();
      churn();
      console.log(JSON.stringify({ before, after: newSpace() }));
    `);
    expect(r.after).toBeLessThanOrEqual(Math.max(2, r.before * 2));
  });
});

describe("ExecTaskStreaming sessions", () => {
  // One session whose handler churns (and, cancelled, waits for the abort); then churn again.
  const session = (cancel: boolean) =>
    inNode<{ before: number; during: number; after: number }>(`
      const { execStreaming } = await import(${JSON.stringify(pathToFileURL(builtSession).href)});
      const { create } = await import("@bufbuild/protobuf");
      const { ExecTaskStreamingRequestSchema } = await import("@nomadkit/protocol/driver");
      // Like Nomad: setup, then the request side stays open.
      async function* requests() {
        yield create(ExecTaskStreamingRequestSchema, { setup: { taskId: "t", command: ["x"] } });
        await new Promise(() => {});
      }
      const ac = new AbortController();
      const before = newSpace();
      let during = 0;
      const responses = execStreaming(requests(), {
        exec: async (s) => {
          churn();
          during = newSpace();
          if (${cancel}) {
            ac.abort();
            await new Promise((r) => s.signal.addEventListener("abort", r));
          }
          return { exitCode: 0 };
        },
      }, { signal: ac.signal });
      try { for await (const _ of responses); } catch {}
      churn();
      console.log(JSON.stringify({ before, during, after: newSpace() }));
    `);

  it("hold the young generation while they run and release it when they end or are cancelled", () => {
    for (const cancel of [false, true]) {
      const r = session(cancel);
      expect(r.during, `cancel=${cancel}`).toBeLessThanOrEqual(Math.max(2, r.before * 2));
      // Released: the same churn grows it again.
      expect(r.after, `cancel=${cancel}`).toBeGreaterThan(r.during);
    }
  });
});

describe("scavengeEvery", () => {
  // Buffers with their own ArrayBuffer (as Node's HTTP/2 reads are), dropped soon after; the last
  // 16 stay alive like a relay's data in flight. Few JavaScript objects per byte: V8 scavenges for
  // the dead ones only when 32 MiB of them are pending.
  const relay = (scavenge: boolean) =>
    inNode<{ peakMiB: number; gcVisible: string[] }>(`
      import("node:vm").then(({ runInNewContext }) => {
        const received = ${scavenge} ? yg.scavengeEvery(4 * 1048576) : () => {};
        const inFlight = [];
        let peak = 0;
        for (let i = 0; i < 4096; i++) {
          const chunk = Buffer.allocUnsafeSlow(65536);
          chunk[0] = i;
          inFlight.push(chunk);
          if (inFlight.length > 16) inFlight.shift();
          received(chunk.length);
          if (i % 8 === 0) peak = Math.max(peak, process.memoryUsage().arrayBuffers);
        }
        // V8's gc function must not have leaked into this or later contexts.
        const gcVisible = [typeof globalThis.gc, runInNewContext("typeof gc")];
        console.log(JSON.stringify({ peakMiB: peak / 1048576, gcVisible }));
      });
    `);

  it("keeps dead read buffers to about one interval, where V8 alone lets them reach its 32 MiB limit", () => {
    const control = relay(false);
    expect(control.peakMiB).toBeGreaterThanOrEqual(24);
    const scavenged = relay(true);
    // 4 MiB interval + 1 MiB in flight, with slack for V8 sweeping freed buffers concurrently.
    expect(scavenged.peakMiB).toBeLessThanOrEqual(14);
    expect(scavenged.gcVisible).toEqual(["undefined", "undefined"]);
  });

  it("rejects a non-positive interval", () => {
    const r = inNode<{ message: string }>(`
      try { yg.scavengeEvery(0); console.log(JSON.stringify({ message: "no error" })); }
      catch (err) { console.log(JSON.stringify({ message: err.message })); }
    `);
    expect(r.message).toMatch(/intervalBytes must be > 0, got 0/);
  });
});
