import { execFile, execFileSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { promisify } from "node:util";
import { Code, ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { NetworkIsolationSpecSchema, NetworkIsolationSpec_NetworkIsolationMode } from "@nomadkit/protocol/driver";
import { afterAll, describe, expect, it } from "vitest";
import { LinuxNetnsManager, assertNetnsUsable, isNamespaceMount, netnsCommand, validateAllocId } from "../src/network.js";

const run = promisify(execFile);
const isRoot = process.getuid?.() === 0;
const hasIp = (() => {
  try {
    execFileSync("ip", ["-V"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();
// Unique per run so concurrent test runs on one host do not collide.
const prefix = `nk-test-${process.pid}`;
const made: string[] = [];
const nets = new LinuxNetnsManager();

afterAll(async () => {
  for (const id of made) await nets.destroy(id).catch(() => undefined);
});

function invalidArg(fn: () => unknown, field: string) {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    expect((err as ConnectError).rawMessage).toContain(field);
    return;
  }
  throw new Error("expected InvalidArgument");
}

describe("alloc id validation", () => {
  it("rejects traversal and separators, naming the field", async () => {
    for (const bad of ["", "../etc", "a/b", ".hidden", "x".repeat(201), "a\0b"]) invalidArg(() => validateAllocId(bad), "alloc_id");
    validateAllocId("9f1c2a7e-2f4b-4c1d-8f0e-123456789abc");
    await expect(nets.create("../../etc/passwd", "h")).rejects.toMatchObject({ code: Code.InvalidArgument });
    await expect(nets.destroy("a/b")).rejects.toMatchObject({ code: Code.InvalidArgument });
  });

  it("refuses to destroy a path that is not the allocation's namespace", async () => {
    await expect(nets.destroy("abc", { path: "/var/run/netns/other" })).rejects.toMatchObject({
      code: Code.InvalidArgument,
      rawMessage: expect.stringContaining("isolation_spec.path"),
    });
  });
});

describe.runIf(isRoot)("assertNetnsUsable", () => {
  it("refuses a namespace file of another kind, naming the field (nsenter --net would fail in the task's place)", async () => {
    await expect(assertNetnsUsable({ path: "/proc/self/ns/net" }, "spec.path")).resolves.toBeUndefined();
    await expect(assertNetnsUsable({ path: "/proc/self/ns/uts" }, "spec.path")).rejects.toMatchObject({
      code: Code.InvalidArgument,
      rawMessage: expect.stringMatching(/^spec\.path: "\/proc\/self\/ns\/uts" is not a network namespace \(nsenter: .*Invalid argument\)$/),
    });
  });
});

describe("netnsCommand", () => {
  it("leaves the command alone without a namespace and wraps it with nsenter otherwise", () => {
    expect(netnsCommand(undefined, "sh", ["-c", "x"])).toEqual({ file: "sh", args: ["-c", "x"] });
    expect(netnsCommand({ path: "" }, "sh", [])).toEqual({ file: "sh", args: [] });
    // nsenter keeps group root without --setgid.
    expect(() => netnsCommand({ path: "/var/run/netns/x" }, "sh", [], { uid: 1 })).toThrow(/options\.uid needs options\.gid/);
    const w = netnsCommand({ path: "/var/run/netns/x" }, "sh", ["-c", "x"], { uid: 1, gid: 2, nsenter: "/usr/bin/nsenter" });
    expect(w).toEqual({ file: "/usr/bin/nsenter", args: ["--net=/var/run/netns/x", "--setgid=2", "--setuid=1", "--", "sh", "-c", "x"] });
  });
});

describe.runIf(isRoot && hasIp)("LinuxNetnsManager (root)", () => {
  it("creates a namespace with only lo, runs a process in it, and destroys it idempotently", async () => {
    const id = `${prefix}-a`;
    made.push(id);
    const first = await nets.create(id, "web-1");
    expect(first.created).toBe(true);
    expect(first.spec).toMatchObject({
      mode: NetworkIsolationSpec_NetworkIsolationMode.GROUP,
      path: `/var/run/netns/${id}`,
      hostsConfig: { hostname: "web-1", address: "127.0.0.1" },
    });
    expect(first.spec.labels["nomadkit.netns"]).toBe(id);
    expect(await isNamespaceMount(first.spec.path)).toBe(true);
    // The spec converts to the protobuf message as is.
    expect(create(NetworkIsolationSpecSchema, first.spec).path).toBe(first.spec.path);

    // Idempotent create.
    const again = await nets.create(id, "web-1");
    expect(again.created).toBe(false);
    expect(again.spec.path).toBe(first.spec.path);

    // A process inside sees only lo, and lo is up.
    const links = netnsCommand(first.spec, "ip", ["-o", "link"]);
    const { stdout } = await run(links.file, links.args);
    const names = stdout.trim().split("\n").map((l) => l.split(":")[1]!.trim());
    expect(names).toEqual(["lo"]);
    expect(stdout).toContain("UP");
    const dev = netnsCommand(first.spec, "cat", ["/proc/net/dev"], { uid: 65534, gid: 65534 });
    const devOut = (await run(dev.file, dev.args)).stdout;
    const ifaces = devOut.split("\n").slice(2).filter(Boolean).map((l) => l.split(":")[0]!.trim());
    expect(ifaces).toEqual(["lo"]);
    const idCmd = netnsCommand(first.spec, "id", ["-u"], { uid: 65534, gid: 65534 });
    expect((await run(idCmd.file, idCmd.args)).stdout.trim()).toBe("65534");

    await nets.destroy(id, first.spec);
    expect(existsSync(first.spec.path)).toBe(false);
    // Destroying a missing namespace succeeds.
    await nets.destroy(id, first.spec);
    await nets.destroy(id);
  });

  it("accepts the protobuf message as the spec, and replaces a stale namespace file", async () => {
    const id = `${prefix}-b`;
    made.push(id);
    // A stale plain file (left by a crash) is not a namespace: create replaces it.
    execFileSync("mkdir", ["-p", "/var/run/netns"]);
    writeFileSync(`/var/run/netns/${id}`, "");
    const r = await nets.create(id, "");
    expect(r.created).toBe(true);
    expect(r.spec.hostsConfig).toBeUndefined();
    await nets.destroy(id, create(NetworkIsolationSpecSchema, r.spec));
    expect(await isNamespaceMount(`/var/run/netns/${id}`)).toBe(false);
  });

  it("finds ip in the system directories when the plugin's PATH lacks them (a root shell from plain su keeps a PATH without /usr/sbin)", async () => {
    const id = `${prefix}-d`;
    made.push(id);
    const saved = process.env.PATH;
    // Nomad itself needs no ip (netlink), so nothing else tells the operator it is missing.
    process.env.PATH = "/nonexistent";
    try {
      const r = await new LinuxNetnsManager().create(id, "");
      expect(r.created).toBe(true);
      expect(await isNamespaceMount(r.spec.path)).toBe(true);
      await new LinuxNetnsManager().destroy(id, r.spec);
    } finally {
      process.env.PATH = saved;
    }
    expect(existsSync(`/var/run/netns/${id}`)).toBe(false);
  });

  it("serialises concurrent creates of one allocation", async () => {
    const id = `${prefix}-c`;
    made.push(id);
    const results = await Promise.all([nets.create(id, "h"), nets.create(id, "h"), nets.create(id, "h")]);
    expect(results.filter((r) => r.created)).toHaveLength(1);
    await Promise.all([nets.destroy(id), nets.destroy(id)]);
    expect(await isNamespaceMount(`/var/run/netns/${id}`)).toBe(false);
  });
});
