// Entry point of the nomadkit-rawexec plugin binary (bin/nomadkit-rawexec loads the built copy).
import { serveDriver } from "@nomadkit/server";
import { createRawExecDriver } from "./driver.js";

void serveDriver(createRawExecDriver());
