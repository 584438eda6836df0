// Bundles the plugin (dist/main.js and everything it imports) into one CommonJS file,
// dist/nomadkit-rawexec.cjs, which bin/nomadkit-rawexec loads. Nomad starts and kills a driver
// several times while an agent boots; one file loads in about half the time of the ~240 ES modules
// it replaces. Kept external, resolved from node_modules when first used: node-pty (native) and
// @peculiar/x509 (AutoMTLS only). Task executors still run from the installed @nomadkit/server.
// Without esbuild (a build tool, not a runtime dependency) the bundle is skipped and the bin loads
// dist/main.js.
let esbuild;
try {
  esbuild = await import("esbuild");
} catch {
  console.warn("bundle: esbuild is not installed; bin/nomadkit-rawexec will load dist/main.js");
  process.exit(0);
}
await esbuild.build({
  entryPoints: ["dist/main.js"],
  outfile: "dist/nomadkit-rawexec.cjs",
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
