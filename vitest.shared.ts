// Shared vitest settings: tests spawn real processes and sockets, so give them room on a busy
// 2-core machine instead of racing the clock.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
  },
});
