// bundle: make a plugin directory Nomad starts quickly (see ../bundle/bundle.ts).
import { isAbsolute, relative } from "node:path";
import { bundlePlugin } from "../bundle/bundle.js";
import { parseStartTimeout, type GlobalOptions } from "../plugin.js";

export async function bundleCommand(
  entry: string,
  opts: {
    out: string;
    name?: string;
    external: string[];
    executor?: boolean;
    codeCache: boolean;
    loadRecording: boolean;
  },
  g: GlobalOptions,
): Promise<void> {
  const result = await bundlePlugin({
    entry,
    outDir: opts.out,
    name: opts.name,
    external: opts.external,
    executor: opts.executor,
    codeCache: opts.codeCache,
    loadRecording: opts.loadRecording,
    startTimeoutMs: parseStartTimeout(g),
  });
  for (const w of result.warnings)
    process.stderr.write(`nomadkit: warning: ${w}\n`);
  const rel = (f: string) => {
    const r = relative(process.cwd(), f);
    return r && !r.startsWith("..") && !isAbsolute(r) ? r : f;
  };
  const lines = result.files.map((f) => `  ${rel(f)}`);
  const info = result.pluginInfo
    ? ` (PluginInfo: ${result.pluginInfo.name} ${result.pluginInfo.version})`
    : "";
  const outside = Object.keys(result.externals);
  const optional = new Set(Object.keys(result.optionalExternals));
  process.stdout.write(
    [
      `bundled ${entry} → ${rel(result.launcher)}${info}`,
      ...lines,
      outside.length
        ? `left outside the bundle (in its package.json; \`npm install --omit=dev\` in a copy of the directory): ${outside.map((p) => (optional.has(p) ? `${p} (optional)` : p)).join(", ")}`
        : "nothing left outside the bundle",
      "",
    ].join("\n"),
  );
}
