#!/usr/bin/env node
// The `nomadkit` command: loads the built CLI (dist) and exits with its status.
import { readFileSync } from "node:fs";

const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
const { main } = await import("../dist/esm/index.js");
const code = await main(process.argv, { version });
process.exit(code);
