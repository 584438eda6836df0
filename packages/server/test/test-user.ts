// A real user with supplementary groups, made for a test (root only) and removed after it.
import { execFileSync } from "node:child_process";

export interface TestUser {
  name: string;
  /** Its group ids as `id -G` reports them (primary first), sorted. */
  groups: number[];
  /** The ids of the two supplementary groups it was given. */
  supplementary: number[];
  remove(): void;
}

/** useradd/groupadd a user `nk<tag>u<pid>` with primary group and two more; `remove` deletes them all. */
export function createTestUser(tag: string): TestUser {
  const base = `nk${tag}${process.pid}`;
  const [primary, a, b, name] = [`${base}p`, `${base}a`, `${base}b`, `${base}u`];
  const made: (() => void)[] = [];
  const remove = () => {
    for (const undo of made.splice(0).reverse()) {
      try {
        undo();
      } catch {
        // already gone
      }
    }
  };
  try {
    for (const g of [primary, a, b]) {
      execFileSync("groupadd", [g]);
      made.push(() => execFileSync("groupdel", [g]));
    }
    execFileSync("useradd", ["-M", "-N", "-s", "/usr/sbin/nologin", "-g", primary, "-G", `${a},${b}`, name]);
    made.push(() => execFileSync("userdel", [name]));
  } catch (err) {
    remove();
    throw err;
  }
  const gid = (g: string) => Number(execFileSync("getent", ["group", g], { encoding: "utf8" }).split(":")[2]);
  const groups = execFileSync("id", ["-G", name], { encoding: "utf8" }).trim().split(/\s+/).map(Number).sort((x, y) => x - y);
  return { name, groups, supplementary: [gid(a), gid(b)], remove };
}

/** `id -G` output as sorted numbers. */
export function parseGroups(text: string): number[] {
  return text.trim().split(/\s+/).map(Number).sort((x, y) => x - y);
}
