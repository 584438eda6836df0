// Preloaded with NODE_OPTIONS=--require into a served process for the TaskStats memory measure:
// on SIGUSR2 it runs full garbage collections and writes process.memoryUsage() and V8's heap
// spaces ([name, size, used] in bytes) to NOMADKIT_BENCH_HEAP_DIR/heap-<pid>.json, so the bench can
// read the live V8 heap of a process it does not run itself (the reference driver is launched as
// Nomad launches it). The spaces say what RSS growth is made of (a grown young generation or live
// objects).
const dir = process.env.NOMADKIT_BENCH_HEAP_DIR;
if (dir) {
  process.on("SIGUSR2", () => {
    const v8 = require("node:v8");
    const { renameSync, writeFileSync } = require("node:fs");
    const { join } = require("node:path");
    v8.setFlagsFromString("--expose-gc");
    const gc = require("node:vm").runInNewContext("gc");
    // Twice: objects with finalizers or weak references die in the second.
    gc();
    gc();
    const spaces = v8.getHeapSpaceStatistics().map((s) => [s.space_name, s.space_size, s.space_used_size]);
    const file = join(dir, `heap-${process.pid}.json`);
    writeFileSync(`${file}.tmp`, JSON.stringify({ ...process.memoryUsage(), spaces }));
    renameSync(`${file}.tmp`, file);
  });
}
