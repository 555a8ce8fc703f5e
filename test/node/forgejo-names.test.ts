// Forgejo repository names (forge/forgejo/names.ts): looked up by id once per repository, kept ten
// minutes so a rename shows within minutes; a lookup that fails costs no job its runner.
import { describe, expect, it } from "vitest";
import type { ForgejoJob, ForgejoScope } from "../../src/forge/forgejo/client.ts";
import { FAILED_RETRY_MS, memoryNames, NAME_TTL_MS, repositoryNames } from "../../src/forge/forgejo/names.ts";

const job = (id: number, owner: number, repo: number): ForgejoJob => ({
  id,
  attempt: 1,
  handle: `h${id}`,
  name: "build",
  owner_id: owner,
  repo_id: repo,
  runs_on: ["x"],
  status: "waiting",
  task_id: 0,
});
const ADMIN: ForgejoScope = { kind: "admin" };

function forgejo(names: Record<number, string | Error | null>) {
  const asked: number[] = [];
  return {
    asked,
    repositoryName: async (id: number) => {
      asked.push(id);
      const n = names[id];
      if (n instanceof Error) throw n;
      return n ?? null;
    },
  };
}

describe("Forgejo repository names", () => {
  it("are asked once per repository and kept: four jobs of two repositories cost two requests, the next poll none", async () => {
    const client = forgejo({ 7: "acme/widgets", 8: "beta/app.js" });
    const store = memoryNames();
    const errors: string[] = [];
    const sink = { event: () => undefined, summary: () => undefined, error: (m: string) => void errors.push(m) };
    const jobs = [job(1, 2, 7), job(2, 2, 7), job(3, 2, 7), job(4, 3, 8)];
    expect(Object.fromEntries(await repositoryNames(jobs, ADMIN, client, store, 0, sink))).toEqual({ 7: "acme/widgets", 8: "beta/app.js" });
    expect(client.asked.sort()).toEqual([7, 8]);
    await repositoryNames(jobs, ADMIN, client, store, NAME_TTL_MS - 1, sink);
    expect(client.asked).toHaveLength(2);
    expect(errors).toEqual([]);
  });

  it("follow a rename once the name is older than NAME_TTL_MS", async () => {
    const names: Record<number, string> = { 7: "acme/widgets" };
    const client = forgejo(names);
    const store = memoryNames();
    const sink = { event: () => undefined, summary: () => undefined, error: () => undefined };
    await repositoryNames([job(1, 2, 7)], ADMIN, client, store, 0, sink);
    names[7] = "acme/gadgets";
    expect((await repositoryNames([job(2, 2, 7)], ADMIN, client, store, NAME_TTL_MS - 1, sink)).get(7)).toBe("acme/widgets");
    expect((await repositoryNames([job(3, 2, 7)], ADMIN, client, store, NAME_TTL_MS + 1, sink)).get(7)).toBe("acme/gadgets");
  });

  it.each([
    ["404", null],
    ["403", new Error("Forgejo answered 403 to GET /repositories/7")],
    ["no answer", new Error("Forgejo did not answer GET /repositories/7: TimeoutError")],
    ["a name no store can key", "acme/wid gets"],
  ] as const)("a lookup that fails (%s) names the job by ids, says so once, and is asked again after FAILED_RETRY_MS", async (_what, answer) => {
    const client = forgejo({ 7: answer });
    const store = memoryNames();
    const errors: string[] = [];
    const sink = { event: () => undefined, summary: () => undefined, error: (m: string) => void errors.push(m) };
    expect((await repositoryNames([job(1, 2, 7)], ADMIN, client, store, 0, sink)).get(7)).toBe("id-2/id-7");
    expect((await repositoryNames([job(2, 2, 7)], ADMIN, client, store, FAILED_RETRY_MS - 1, sink)).get(7)).toBe("id-2/id-7");
    expect(client.asked).toEqual([7]);
    await repositoryNames([job(3, 2, 7)], ADMIN, client, store, FAILED_RETRY_MS + 1, sink);
    expect(client.asked).toEqual([7, 7]);
    expect(errors).toEqual(["forgejo repository name lookup failed"]);
  });

  it("a failed lookup keeps the name known before; an organisation's scope still asks; a repository's scope never does", async () => {
    const names: Record<number, string | Error> = { 7: "acme/widgets" };
    const client = forgejo(names);
    const store = memoryNames();
    const sink = { event: () => undefined, summary: () => undefined, error: () => undefined };
    await repositoryNames([job(1, 2, 7)], { kind: "org", org: "acme" }, client, store, 0, sink);
    names[7] = new Error("Forgejo did not answer");
    expect((await repositoryNames([job(2, 2, 7)], { kind: "org", org: "acme" }, client, store, NAME_TTL_MS + 1, sink)).get(7)).toBe("acme/widgets");
    const repoScoped = forgejo({});
    expect((await repositoryNames([job(3, 2, 9)], { kind: "repo", owner: "acme", repo: "tools" }, repoScoped, memoryNames(), 0, sink)).get(9)).toBe(
      "acme/tools",
    );
    expect(repoScoped.asked).toEqual([]);
  });
});
