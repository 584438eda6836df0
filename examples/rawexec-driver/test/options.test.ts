// raw_exec's task and plugin options (Nomad's drivers/rawexec), each through the real wire: the
// plugin_dir executable launched as Nomad launches it, tasks run as real processes.
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { encode } from "@msgpack/msgpack";
import { launchPlugin, RecoverableError, type PluginClient } from "@nomadkit/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  cleanup,
  execStream,
  isRoot,
  newTask,
  PLUGIN,
  read,
  sh,
  start,
  startPlugin,
  until,
  type TestTask,
} from "./helpers.js";

let p: PluginClient;
const started: TestTask[] = [];

beforeAll(async () => {
  p = await startPlugin();
});
afterAll(async () => {
  for (const t of started)
    await p.driver
      .destroyTask({ taskId: t.id, force: true })
      .catch(() => undefined);
  await cleanup();
});

/** Starts the task, waits for its exit and returns its stdout. */
async function runToExit(plugin: PluginClient, t: TestTask): Promise<string> {
  await start(plugin, t);
  started.push(t);
  const res = await plugin.driver.waitTask({ taskId: t.id });
  expect(res.result?.exitCode).toBe(0);
  return read(t.stdoutPath);
}

/** `id <flag> nobody`. */
function idOf(flag: string): string {
  return spawnSync("id", [flag, "nobody"]).stdout.toString().trim();
}

async function failure(
  fn: () => Promise<unknown>,
): Promise<Error & { code?: number }> {
  try {
    await fn();
  } catch (err) {
    return err as Error & { code?: number };
  }
  throw new Error("expected the call to fail");
}

/** StartTask's error for a task it must refuse; one it starts after all is left to cleanup(). */
async function refusal(
  plugin: PluginClient,
  t: TestTask,
): Promise<Error & { code?: number }> {
  try {
    await start(plugin, t);
  } catch (err) {
    return err as Error & { code?: number };
  }
  started.push(t);
  throw new Error("expected StartTask to refuse the task");
}

describe("oom_score_adj", () => {
  it("is written to the task's /proc/<pid>/oom_score_adj, 0 when unset", async () => {
    expect(
      await runToExit(
        p,
        newTask(sh("cat /proc/$$/oom_score_adj"), { cgroup: false }),
      ),
    ).toBe("0\n");
    expect(
      await runToExit(
        p,
        newTask(
          { ...sh("cat /proc/$$/oom_score_adj"), oom_score_adj: 500 },
          { cgroup: false },
        ),
      ),
    ).toBe("500\n");
  });

  it("refuses a negative value (as Nomad's raw_exec), one past 1000 and a fraction with InvalidArgument naming it", async () => {
    for (const bad of [-1, 1001, 1.5]) {
      const err = await refusal(
        p,
        newTask(
          { command: "/bin/true", oom_score_adj: bad },
          { cgroup: false },
        ),
      );
      expect(err.code, String(bad)).toBe(3);
      expect(err.message).toContain("config.oom_score_adj");
    }
  });
});

describe("work_dir", () => {
  it("runs the task, and exec into it, in that directory instead of the task directory", async () => {
    const t = newTask({ ...sh("pwd; sleep 300") }, { cgroup: false });
    const dir = join(t.taskDir, "local");
    t.config.msgpackDriverConfig = encode({
      ...sh("pwd; sleep 300"),
      work_dir: dir,
    });
    await start(p, t);
    started.push(t);
    await until(
      () => read(t.stdoutPath) === `${dir}\n`,
      "the task to print its working directory",
      30_000,
    );
    const res = await p.driver.execTask({
      taskId: t.id,
      command: ["/bin/pwd"],
      timeout: { seconds: 30n },
    });
    expect(new TextDecoder().decode(res.stdout)).toBe(`${dir}\n`);
  });

  it("refuses a relative path, and a directory that is not there, with InvalidArgument naming it", async () => {
    const relative = await refusal(
      p,
      newTask({ command: "/bin/true", work_dir: "local" }, { cgroup: false }),
    );
    expect(relative.code).toBe(3);
    expect(relative.message).toContain("config.work_dir");
    const missing = await refusal(
      p,
      newTask(
        { command: "/bin/true", work_dir: "/no/such/dir" },
        { cgroup: false },
      ),
    );
    expect(missing.code).toBe(3);
    expect(missing.message).toContain("work_dir");
    expect(missing.message).toContain("/no/such/dir");
  });
});

/** The variable names of `env` output, sorted, without those a shell sets itself (PWD, SHLVL, _). */
function names(envOutput: string): string[] {
  return envOutput
    .split("\n")
    .filter((l) => l.includes("="))
    .map((l) => l.slice(0, l.indexOf("=")))
    .filter((n) => !["PWD", "SHLVL", "_"].includes(n))
    .sort();
}

describe("denied_envvars", () => {
  // Whatever Nomad hands the task (agent variables, NOMAD_*, the job's env block).
  const env = {
    PATH: process.env.PATH!,
    AWS_SECRET_ACCESS_KEY: "s1",
    AWS_REGION: "eu-west-1",
    aws_profile: "lower case: not AWS_*",
    CONSUL_HTTP_TOKEN: "s2",
    TOKEN_NAME: "not *_TOKEN",
    JOB_ONLY: "s3",
    MIDxxDLE: "s4",
    KEEP: "k",
  };
  const kept = ["KEEP", "PATH", "TOKEN_NAME", "aws_profile"].sort();

  it("removes the variables the plugin's and the task's patterns match from the task's environment, and from exec into it", async () => {
    const plugin = await startPlugin({ denied_envvars: ["AWS_*", "*_TOKEN"] });
    const t = newTask(
      { ...sh("env; sleep 300"), denied_envvars: ["JOB_ONLY", "MID*DLE"] },
      { env, cgroup: false },
    );
    await start(plugin, t);
    started.push(t);
    await until(
      () => read(t.stdoutPath).includes("KEEP="),
      "the task to print its environment",
      30_000,
    );
    expect(names(read(t.stdoutPath))).toEqual(kept);
    const res = await plugin.driver.execTask({
      taskId: t.id,
      command: ["env"],
      timeout: { seconds: 30n },
    });
    expect(names(new TextDecoder().decode(res.stdout))).toEqual(kept);
    const streamed = await execStream(plugin, [
      { setup: { taskId: t.id, command: ["env"] } },
    ]);
    expect(names(streamed.stdout)).toEqual(kept);
  });

  it("refuses a pattern that matches no name with InvalidArgument naming it, at SetConfig and at StartTask", async () => {
    const plugin = await startPlugin();
    for (const bad of ["", "SECRET=1"]) {
      const err = await failure(() =>
        plugin.basePlugin.setConfig({
          msgpackConfig: encode({
            create_network: false,
            denied_envvars: ["AWS_*", bad],
          }),
          pluginApiVersion: "v0.1.0",
        }),
      );
      expect(err.code, JSON.stringify(bad)).toBe(3);
      expect(err.message).toContain("denied_envvars[1]");
      const refused = await refusal(
        p,
        newTask(
          { command: "/bin/true", denied_envvars: [bad] },
          { cgroup: false },
        ),
      );
      expect(refused.code, JSON.stringify(bad)).toBe(3);
      expect(refused.message).toContain("config.denied_envvars[0]");
    }
  });

  it("refuses a task whose environment it would empty (the executor would give it its own) before an executor starts", async () => {
    const t = newTask(
      { command: "/bin/true", denied_envvars: ["*"] },
      { env, cgroup: false },
    );
    const err = await refusal(p, t);
    expect(err.code).toBe(3);
    expect(err.message).toContain("denied_envvars: removes every variable");
    expect(readdirSync(t.taskDir)).not.toContain("executor.out");
  });
});

describe.skipIf(!isRoot)("denied_host_uids and denied_host_gids", () => {
  const nobody = { uid: Number(idOf("-u")), gid: Number(idOf("-g")) };

  it("refuses a task whose user has a denied uid, and one with a denied group, before it starts", async () => {
    const byUid = await startPlugin({
      denied_host_uids: `1-100,${nobody.uid}`,
    });
    const t = newTask(
      { command: "/bin/true" },
      { user: "nobody", cgroup: false },
    );
    const err = await refusal(byUid, t);
    // FailedPrecondition with RecoverableError{recoverable: false}: Nomad does not restart it.
    expect(err).toBeInstanceOf(RecoverableError);
    expect((err as RecoverableError).recoverable).toBe(false);
    expect(err.message).toContain(
      `user "nobody": running as uid ${nobody.uid} is disallowed by denied_host_uids`,
    );
    expect(readdirSync(t.taskDir)).not.toContain("executor.out"); // no executor was started
    // Root (uid 0) is outside the ranges: a task as root still runs.
    expect(
      await runToExit(
        byUid,
        newTask(sh("id -u"), { user: "root", cgroup: false }),
      ),
    ).toBe("0\n");

    const byGid = await startPlugin({ denied_host_gids: String(nobody.gid) });
    const g = await refusal(
      byGid,
      newTask({ command: "/bin/true" }, { user: "nobody", cgroup: false }),
    );
    expect(g).toBeInstanceOf(RecoverableError);
    expect(g.message).toContain(
      `running as gid ${nobody.gid} is disallowed by denied_host_gids`,
    );
  });

  it("checks a task without a user as the plugin's own user, as raw_exec checks the agent's", async () => {
    const noRoot = await startPlugin({ denied_host_uids: "0" });
    const err = await refusal(
      noRoot,
      newTask({ command: "/bin/true" }, { cgroup: false }),
    );
    expect(err).toBeInstanceOf(RecoverableError);
    expect(err.message).toContain("running as uid 0 is disallowed");
    expect(
      await runToExit(
        noRoot,
        newTask(sh("id -u"), { user: "nobody", cgroup: false }),
      ),
    ).toBe(`${nobody.uid}\n`);
  });

  it("refuses a malformed range at SetConfig with InvalidArgument naming the option, as Nomad's validators do", async () => {
    const plugin = await startPlugin();
    for (const [option, value, reason] of [
      [
        "denied_host_uids",
        "100-1",
        "lower bound cannot be greater than upper bound",
      ],
      ["denied_host_uids", "1-100,foo", "range bound not valid"],
      ["denied_host_gids", "1-100,,200-300", "range bound not valid"],
      ["denied_host_gids", "4294967296", "range bound not valid"],
    ] as const) {
      const err = await failure(() =>
        plugin.basePlugin.setConfig({
          msgpackConfig: encode({ create_network: false, [option]: value }),
          pluginApiVersion: "v0.1.0",
        }),
      );
      expect(err.code, value).toBe(3);
      expect(err.message).toContain(option);
      expect(err.message).toContain(reason);
    }
  });
});

describe.skipIf(!isRoot)("a task user's environment", () => {
  it("has the user's USER, LOGNAME and HOME over the agent's that Nomad passes, in the task and in exec", async () => {
    const home = spawnSync("getent", ["passwd", "nobody"])
      .stdout.toString()
      .trim()
      .split(":")[5];
    const env = {
      PATH: process.env.PATH!,
      USER: "root",
      LOGNAME: "root",
      HOME: "/root",
    };
    const t = newTask(sh('echo "$USER $LOGNAME $HOME"; sleep 300'), {
      user: "nobody",
      env,
      cgroup: false,
    });
    await start(p, t);
    started.push(t);
    await until(
      () => read(t.stdoutPath).endsWith("\n"),
      "the task to print its environment",
      30_000,
    );
    expect(read(t.stdoutPath)).toBe(`nobody nobody ${home}\n`);
    const res = await p.driver.execTask({
      taskId: t.id,
      command: ["/bin/sh", "-c", 'echo "$USER $LOGNAME $HOME"'],
      timeout: { seconds: 30n },
    });
    expect(new TextDecoder().decode(res.stdout)).toBe(
      `nobody nobody ${home}\n`,
    );
  });
});

describe("enabled", () => {
  it("is declared in ConfigSchema as an optional bool, so raw_exec's agent config `enabled = true` loads", async () => {
    // Nomad decodes the agent's plugin block against ConfigSchema and refuses an undeclared attribute.
    const { spec } = await p.basePlugin.configSchema({});
    const attrs = (spec?.block.value as { attributes: Record<string, { block: { case: string; value: { primary?: { block: { value: { type: string; required: boolean } } } } } }> }).attributes;
    expect(attrs.enabled?.block.case).toBe("default");
    expect(attrs.enabled?.block.value.primary?.block.value).toMatchObject({ type: "bool", required: false });
    const plugin = await startPlugin({ enabled: true });
    expect(await runToExit(plugin, newTask(sh("echo ran"), { cgroup: false }))).toBe("ran\n");
  });

  it("false reports the driver undetected and \"disabled\" without its attribute, and StartTask refuses before an executor starts, as raw_exec's", async () => {
    const plugin = await startPlugin({ enabled: false });
    const ac = new AbortController();
    for await (const fp of plugin.driver.fingerprint({}, { signal: ac.signal })) {
      expect(fp.health).toBe(0); // UNDETECTED
      expect(fp.healthDescription).toBe("disabled");
      expect(fp.attributes).toEqual({});
      break;
    }
    ac.abort();
    const t = newTask({ command: "/bin/true" }, { cgroup: false });
    const err = await refusal(plugin, t);
    expect(err.message).toContain("nomadkit-rawexec is disabled");
    expect(readdirSync(t.taskDir)).not.toContain("executor.out");
  });
});

describe("cgroup_v1_override and cgroup_v2_override", () => {
  it("refuses a task that sets both with InvalidArgument naming them, before an executor starts, as raw_exec's validate", async () => {
    const t = newTask({ command: "/bin/true", cgroup_v1_override: { freezer: "custom/app" }, cgroup_v2_override: "custom.slice/app.scope" }, { cgroup: false });
    const err = await refusal(p, t);
    expect(err.code).toBe(3);
    expect(err.message).toContain("only one of cgroup_v1_override and cgroup_v2_override may be set");
    expect(readdirSync(t.taskDir)).not.toContain("executor.out");
  });
});

describe.skipIf(!isRoot)("a task user when the plugin does not run as root", () => {
  it("refuses the task before an executor starts, as raw_exec's executor fails to set the user, instead of running it as the plugin's user", async () => {
    // The plugin as nobody, as an agent not run as root launches it.
    const sockets = mkdtempSync(join(tmpdir(), "nk-rawexec-nobody-"));
    chmodSync(sockets, 0o777);
    const plugin = await launchPlugin("setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", PLUGIN], { unixSocketDir: sockets });
    try {
      await plugin.basePlugin.setConfig({ msgpackConfig: encode({}), pluginApiVersion: "v0.1.0" });
      await plugin.driver.init({});
      const t = newTask({ command: "/bin/true" }, { user: "root", cgroup: false });
      // Its directories the plugin's user's, as an agent run as that user makes them.
      expect(spawnSync("chown", ["-R", "nobody:nogroup", dirname(t.allocDir)]).status).toBe(0);
      const err = await refusal(plugin, t);
      expect(err).toBeInstanceOf(RecoverableError);
      expect((err as RecoverableError).recoverable).toBe(false); // retrying cannot help
      expect(err.message).toContain(`task user "root" needs the plugin to run as root`);
      expect(readdirSync(t.taskDir)).not.toContain("executor.out");
    } finally {
      await plugin.kill();
      rmSync(sockets, { recursive: true, force: true });
    }
  });
});
