// Preloaded with NODE_OPTIONS=--require into the "reference driver + fixYoungGenerationSize"
// variant: what a driver gets by calling @nomadkit/server's fixYoungGenerationSize() first thing in
// its entry file (the setting is per process, so the built copy here has the same effect as the
// bundle's own).
require("../../../packages/server/dist/cjs/runtime/young-generation.js").fixYoungGenerationSize();
