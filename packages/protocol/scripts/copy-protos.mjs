// Ships the contracts with the package so downstream repos can `buf generate` against the
// installed copy (see README). The repo's proto/ stays the single source; this copy is a build output.
import { cpSync, rmSync, writeFileSync } from "node:fs";

rmSync("proto", { recursive: true, force: true });
cpSync("../../proto", "proto", { recursive: true });
writeFileSync(
  "buf.yaml",
  "# Module root for downstream codegen: `buf generate node_modules/@nomadkit/protocol/proto` or\n" +
    "# add this directory to your buf.yaml modules.\nversion: v2\nmodules:\n  - path: proto\n",
);
