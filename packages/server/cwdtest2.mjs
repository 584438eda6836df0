import { runExecCommand } from "@nomadkit/server";
import { PassThrough } from "node:stream";
const io = { stdin: new PassThrough(), stdout: new PassThrough(), stderr: new PassThrough() };
io.stdout.on("data", d => console.error("out", JSON.stringify(String(d))));
const t = setTimeout(() => console.error("still pending after 3s"), 3000);
try { console.error(await runExecCommand({ command: ["/bin/true"], tty: true, cwd: "/nonexistent-dir" }, io)); } catch (e) { console.error(e.message); }
clearTimeout(t);
