// Preloaded with NODE_OPTIONS=--require (where --cpu-prof is not allowed): profiles the process
// and writes NOMADKIT_BENCH_PROFILE_DIR/<name>-<pid>.cpuprofile when it exits.
// NOMADKIT_BENCH_PROFILE_INTERVAL sets the sampling interval in µs (default 500; start-up needs ~100).
const inspector = require("node:inspector");
const { writeFileSync } = require("node:fs");
const { basename, join } = require("node:path");

const dir = process.env.NOMADKIT_BENCH_PROFILE_DIR;
if (dir) {
  const session = new inspector.Session();
  session.connect();
  session.post("Profiler.enable");
  session.post("Profiler.setSamplingInterval", { interval: Number(process.env.NOMADKIT_BENCH_PROFILE_INTERVAL ?? 500) });
  session.post("Profiler.start");
  process.once("exit", () => {
    session.post("Profiler.stop", (err, res) => {
      if (err) return;
      const name = basename(process.argv[1] || "node").replace(/\W+/g, "_");
      writeFileSync(join(dir, `${name}-${process.pid}.cpuprofile`), JSON.stringify(res.profile));
    });
  });
}
