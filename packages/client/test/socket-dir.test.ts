// The leftovers of a plugin that died hard: removePluginSocketDir removes its socket and the
// directory made for it, and nothing that may belong to anyone else.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { removePluginSocketDir } from "../src/index.js";

const root = mkdtempSync(join(tmpdir(), "nomadkit-socket-dir-test-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("removePluginSocketDir", () => {
  it("is only removed when it holds nothing but the dead plugin's socket and changed since the launch", () => {
    const since = Date.now() - 1000;
    const leftover = (name: string): { dir: string; sock: string } => {
      const dir = join(mkdtempSync(join(root, `${name}-`)), "plugin-x");
      mkdirSync(dir);
      const sock = join(dir, "plugin.sock");
      // A unix socket left behind by a process that died without closing it.
      const r = spawnSync(process.execPath, ["-e", `require("node:net").createServer().listen(${JSON.stringify(sock)}, () => process.kill(process.pid, "SIGKILL"))`]);
      expect(r.signal).toBe("SIGKILL");
      return { dir, sock };
    };

    const only = leftover("only");
    expect(removePluginSocketDir(only.sock, since)).toBe(true);
    expect(existsSync(only.dir)).toBe(false);

    const shared = leftover("shared");
    writeFileSync(join(shared.dir, "other"), "");
    expect(removePluginSocketDir(shared.sock, since)).toBe(false);
    expect(readdirSync(shared.dir).sort()).toEqual(["other", "plugin.sock"]);

    const old = leftover("old");
    const long = new Date(Date.now() - 3_600_000);
    utimesSync(old.dir, long, long);
    expect(removePluginSocketDir(old.sock, since)).toBe(false);
    expect(readdirSync(old.dir)).toEqual(["plugin.sock"]);

    const notSocket = join(mkdtempSync(join(root, "file-")), "plugin-y");
    mkdirSync(notSocket);
    writeFileSync(join(notSocket, "plugin.sock"), "");
    expect(removePluginSocketDir(join(notSocket, "plugin.sock"), since)).toBe(false);
    expect(existsSync(join(notSocket, "plugin.sock"))).toBe(true);

    const empty = join(mkdtempSync(join(root, "empty-")), "plugin-z");
    mkdirSync(empty);
    expect(removePluginSocketDir(join(empty, "plugin.sock"), since)).toBe(true);
    expect(existsSync(empty)).toBe(false);

    // A Go plugin's socket (plugin<digits>) sits straight in its $TMPDIR: that directory is not
    // the plugin's to lose, even when the plugin left it empty or holding only its socket.
    const goTmp = mkdtempSync(join(root, "go-tmpdir-"));
    expect(removePluginSocketDir(join(goTmp, "plugin1517633340"), since)).toBe(false);
    expect(existsSync(goTmp)).toBe(true);

    // Never the configured base directory or the temp dir itself.
    expect(removePluginSocketDir(join(tmpdir(), "plugin.sock"), since)).toBe(false);
    expect(existsSync(tmpdir())).toBe(true);
  });
});
