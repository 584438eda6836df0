#!/usr/bin/env node
// Summarises V8 .cpuprofile files (from `run.mjs --profile DIR`): self time by function and by
// package, top entries first.  node tools/bench/profile-summary.mjs DIR/*.cpuprofile [--top 25]
import { readFileSync } from "node:fs";

const args = process.argv.slice(2);
const topAt = args.indexOf("--top");
const top = topAt >= 0 ? Number(args.splice(topAt, 2)[1]) : 25;

function where(url) {
  if (!url) return "(native/vm)";
  const nm = url.lastIndexOf("node_modules/");
  if (nm >= 0) {
    const rest = url.slice(nm + 13).split("/");
    return rest[0].startsWith("@") ? `${rest[0]}/${rest[1]}` : rest[0];
  }
  if (url.startsWith("node:")) return url;
  const m = /\/(packages|examples|tools)\/([^/]+)\//.exec(url);
  return m ? `${m[1]}/${m[2]}` : url;
}

for (const file of args) {
  const p = JSON.parse(readFileSync(file, "utf8"));
  const dt = new Map();
  // Sample i lasted timeDeltas[i+1].
  for (let i = 0; i < p.samples.length; i++) dt.set(p.samples[i], (dt.get(p.samples[i]) ?? 0) + (p.timeDeltas[i + 1] ?? 0));
  const byFn = new Map();
  const byPkg = new Map();
  let total = 0;
  for (const n of p.nodes) {
    const t = (dt.get(n.id) ?? 0) / 1000;
    if (!t) continue;
    total += t;
    const cf = n.callFrame;
    const fn = `${cf.functionName || "(anonymous)"} ${cf.url ? cf.url.replace(/^.*node_modules\//, "").replace(/^file:\/\/.*?\/(packages|tools|examples)\//, "$1/") : ""}:${cf.lineNumber + 1}`;
    byFn.set(fn, (byFn.get(fn) ?? 0) + t);
    const pkg = ["(idle)", "(program)", "(garbage collector)"].includes(cf.functionName) ? cf.functionName : where(cf.url);
    byPkg.set(pkg, (byPkg.get(pkg) ?? 0) + t);
  }
  const show = (m) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, v]) => `  ${v.toFixed(0).padStart(7)} ms ${((v / total) * 100).toFixed(1).padStart(5)}%  ${k}`)
      .join("\n");
  process.stdout.write(`\n== ${file} (${total.toFixed(0)} ms sampled)\n-- by package\n${show(byPkg)}\n-- by function (self)\n${show(byFn)}\n`);
}
