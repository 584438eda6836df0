import { fileURLToPath } from "node:url";
import { defineConfig, mergeConfig } from "vitest/config";
import shared from "../../vitest.shared.ts";

// Generated code that test/generated.test.ts runs imports the runtimes (`@nomadkit/client/runtime`,
// `@nomadkit/server/runtime`): take them, and what they import, from the workspace packages' sources,
// so these tests do not depend on the other packages being built.
const packages = fileURLToPath(new URL("..", import.meta.url));
export default mergeConfig(
  shared,
  defineConfig({
    resolve: {
      alias: [{ find: /^@nomadkit\/(protocol|client|server)\/(.*)$/, replacement: `${packages}$1/src/$2` }],
    },
  }),
);
