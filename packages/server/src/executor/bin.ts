#!/usr/bin/env node
// Entry file of the nomadkit executor process: `node <this file> '<json config>'`.
// launchExecutor() starts it; see runExecutorMain().
import { fixYoungGenerationSize } from "../runtime/young-generation.js";

// Before the executor's modules load: their start-up would already grow the young generation.
fixYoungGenerationSize();
void import("./main.js").then(({ runExecutorMain }) => runExecutorMain());
