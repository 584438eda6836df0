#!/usr/bin/env node
// The `nomadkit` command: loads the built CLI (dist) and exits with its status.
import { readFileSync } from "node:fs";

const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
const { exitWith, installInterruptHandlers, main } = await import("../dist/esm/index.js");
// Ctrl-C, SIGTERM and SIGHUP stop what the command started (plugins, tasks) before it exits.
installInterruptHandlers();
await exitWith(await main(process.argv, { version }));
