#!/usr/bin/env node
// Entry file of the nomadkit executor process: `node <this file> '<json config>'`.
// launchExecutor() starts it; see runExecutorMain().
import { runExecutorMain } from "./main.js";

void runExecutorMain();
