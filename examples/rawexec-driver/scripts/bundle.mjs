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

// V8 code cache for the bundle: start the plugin the way Nomad does, answer one PluginInfo call,
// shut it down with SIGTERM, and let the bin save what V8 compiled on the way
// (NOMADKIT_RAWEXEC_CODE_CACHE=write). The bin uses it only with the bundle and the Node.js it was
// made with; anything else compiles as usual, so a failed training run only costs start-up time.
const { spawn } = await import("node:child_process");
const { rmSync } = await import("node:fs");
const http2 = await import("node:http2");
const net = await import("node:net");
const cacheFile = "dist/nomadkit-rawexec.cjs.v8cache";
rmSync(cacheFile, { force: true });
try {
  await train();
} catch (err) {
  rmSync(cacheFile, { force: true });
  console.warn(`bundle: no code cache (${err.message}); the plugin starts without it`);
}

async function train() {
  const child = spawn(process.execPath, ["bin/nomadkit-rawexec"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      NOMAD_PLUGIN_MAGIC_COOKIE: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
      PLUGIN_PROTOCOL_VERSIONS: "2",
      PLUGIN_MIN_PORT: "0",
      PLUGIN_MAX_PORT: "0",
      NOMADKIT_RAWEXEC_CODE_CACHE: "write",
    },
  });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  try {
    const line = await new Promise((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (d) => {
        out += d;
        if (out.includes("\n")) resolve(out.slice(0, out.indexOf("\n")));
      });
      exited.then(({ code, signal }) => reject(new Error(`plugin exited (${code ?? signal}) before its handshake: ${stderr.trim()}`)));
    });
    const [, , network, address] = line.split("|");
    if (network !== "unix") throw new Error(`unexpected handshake ${JSON.stringify(line)}`);
    await pluginInfo(address);
    child.kill("SIGTERM");
    const { code, signal } = await exited;
    if (code !== 0) throw new Error(`plugin exited with ${code ?? signal} after SIGTERM: ${stderr.trim()}`);
  } finally {
    clearTimeout(timer);
    child.kill("SIGKILL");
  }
}

/** One gRPC PluginInfo call (empty request) over h2c on the plugin's unix socket. */
function pluginInfo(socketPath) {
  return new Promise((resolve, reject) => {
    const session = http2.connect("http://localhost", { createConnection: () => net.connect(socketPath) });
    session.once("error", reject);
    const req = session.request({
      ":method": "POST",
      ":path": "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo",
      "content-type": "application/grpc",
      te: "trailers",
    });
    req.on("trailers", (h) => (h["grpc-status"] === "0" ? resolve() : reject(new Error(`PluginInfo: grpc-status ${h["grpc-status"]}`))));
    req.on("error", reject);
    req.on("close", () => session.close());
    req.resume();
    req.end(Buffer.alloc(5));
  });
}
