// Bundles the plugin (dist/main.js and everything it imports) into one CommonJS file,
// dist/nomadkit-rawexec.cjs, which bin/nomadkit-rawexec loads, and the task executor into
// dist/nomadkit-rawexec-executor.cjs. Nomad starts and kills a driver several times while an agent
// boots; one file loads in about half the time of the ~240 ES modules it replaces. Kept external,
// resolved from node_modules when first used: node-pty (native) and @peculiar/x509 (AutoMTLS only).
// Without esbuild (a build tool, not a runtime dependency) the bundle is skipped and the bin loads
// dist/main.js.
let esbuild;
try {
  esbuild = await import("esbuild");
} catch {
  console.warn("bundle: esbuild is not installed; bin/nomadkit-rawexec will load dist/main.js");
  process.exit(0);
}
const bundle = (entry, outfile) =>
  esbuild.build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: "node",
    target: "node20",
    format: "cjs",
    // import() becomes require(): no ES module loader at start-up.
    supported: { "dynamic-import": false },
    external: ["node-pty", "@peculiar/x509"],
    // Smaller to parse; identifiers (and so stack traces) stay readable.
    minifyWhitespace: true,
    minifySyntax: true,
    legalComments: "none",
    logLevel: "warning",
  });
await bundle("dist/main.js", "dist/nomadkit-rawexec.cjs");

// The task executor, which StartTask launches once per task: @nomadkit/server's executor entry
// (its package's "bin") as one file too, ~100 ms less per task start than ~200 modules. The bin
// points launchExecutor at it (NOMADKIT_EXECUTOR_PATH) when it runs the bundle.
{
  const { createRequire } = await import("node:module");
  const { dirname, join } = await import("node:path");
  const require = createRequire(import.meta.url);
  const serverPkg = require.resolve("@nomadkit/server/package.json");
  const entry = join(dirname(serverPkg), require(serverPkg).bin["nomadkit-executor"]);
  await bundle(entry, "dist/nomadkit-rawexec-executor.cjs");
}

// V8 code cache for the bundle: launch the plugin the way Nomad does (launchPlugin: handshake,
// health check), ask PluginInfo, shut it down (GRPCController.Shutdown), and let the bin save what
// V8 compiled on the way (NOMADKIT_RAWEXEC_CODE_CACHE=write, written as the process exits). The bin
// uses it only with the bundle and the Node.js it was made with; anything else compiles as usual,
// so a failed training run only costs start-up time.
const { rmSync } = await import("node:fs");
const cacheFile = "dist/nomadkit-rawexec.cjs.v8cache";
rmSync(cacheFile, { force: true });
try {
  const { launchPlugin } = await import("@nomadkit/client");
  const plugin = await launchPlugin(process.execPath, ["bin/nomadkit-rawexec"], {
    env: { NOMADKIT_RAWEXEC_CODE_CACHE: "write" },
    startTimeoutMs: 30_000,
  });
  try {
    await plugin.basePlugin.pluginInfo({});
  } finally {
    const exit = await plugin.kill();
    if (exit.code !== 0) throw new Error(`plugin exited with ${exit.code ?? exit.signal} on shutdown`);
  }
} catch (err) {
  rmSync(cacheFile, { force: true });
  console.warn(`bundle: no code cache (${err.message}); the plugin starts without it`);
}
