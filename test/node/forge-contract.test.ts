// What policy asks of a forge (domain/forge.ts), answered by each forge: whose list the cron
// tick's cleanup reads, which runner may stand as a pool's warm runner, what the forge says of
// one runner and of one job. pools/ and reconcile/ reach Gitea and Forgejo through these only.
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createGiteaForge } from "../../src/forge/gitea/forge.ts";
import { createForgejoForge } from "../../src/forge/forgejo/forge.ts";
import type { ForgejoClient } from "../../src/forge/forgejo/client.ts";
import { forgejoTestEnv, giteaTestEnv } from "../harness/env.ts";
import { stubGitea } from "../harness/gitea-stub.ts";

const gitea = (env: Record<string, unknown> = {}, client = stubGitea()) => {
  const { GITEA_API_TOKEN, ...rest } = giteaTestEnv("ws://x:1", "http://b", "https://git.example.com", env);
  const config = loadConfig(env.GITEA_API_TOKEN === "" ? { ...rest, GITEA_RUNNER_REGISTRATION_TOKEN: "reg" } : { ...rest, GITEA_API_TOKEN });
  return createGiteaForge(config.gitea!, client, Date.now);
};

describe("Gitea's answers", () => {
  it("its cleanup lists GITEA_SCOPE's runners: at an organisation, that organisation's only (near miss: a name one letter off); as administrator, all", () => {
    const org = gitea({ GITEA_SCOPE: "org:acme" });
    expect(org.listsAtHome(undefined)).toBe(true);
    expect(org.listsAtHome("org:acme")).toBe(true);
    expect(org.listsAtHome("org:acmf")).toBe(false);
    expect(org.listsAtHome("repo:acme/widgets")).toBe(false);
    expect(gitea().listsAtHome("repo:acme/widgets")).toBe(true);
  });

  it("hands the drivers a launch for its runner: the .runner file and claim token as files, the runner's command (gitea-runner, else act_runner) with no secret in it; no fields for another forge's identity", () => {
    const file = { WARNING: "w", id: 7, uuid: "u", name: "gdr-a1", token: "runner-token-secret", address: "https://g", labels: ["l"], ephemeral: true };
    const fields = gitea().runnerFields(
      { forge: "gitea", file },
      { claimToken: "claim-secret", completeUrl: "https://d/complete", handleUrl: "https://d/handle" },
    );
    expect(fields.runner).toEqual(file);
    expect(fields.handleUrl).toBeUndefined();
    expect(fields.launch?.files).toEqual({ ".runner": JSON.stringify(file), "claim-token": "claim-secret" });
    expect(JSON.stringify(fields.launch?.command)).not.toMatch(/runner-token-secret|claim-secret/);
    expect(fields.launch?.userData).toContain(`"$R" daemon`);
    expect(fields.launch?.userData).toContain("command -v gitea-runner || command -v act_runner");
    const other = { forge: "forgejo" as const, runner: { url: "https://f", uuid: "u", token: "t", labels: ["l"], handle: "h" } };
    expect(gitea().runnerFields(other, { claimToken: "c", completeUrl: "x", handleUrl: "y" })).toEqual({});
  });

  it("is not polled: webhooks bring its jobs, and no poll health is kept", () => {
    expect(gitea().polled).toBe(false);
  });

  it("a runner may stand as a warm runner only where the pool's warm runners are registered", () => {
    const org = gitea({ GITEA_SCOPE: "org:acme" });
    expect(org.fitsWarm(undefined, undefined)).toBe(true);
    expect(org.fitsWarm("org:acme", undefined)).toBe(true);
    expect(org.fitsWarm("repo:acme/widgets", undefined)).toBe(false);
    expect(org.fitsWarm(undefined, "org:other")).toBe(false);
    expect(org.fitsWarm("org:other", "org:other")).toBe(true);
  });

  it("reads its runner list page by page, and says nothing of a list longer than GITEA_JOB_PAGES", async () => {
    const runners = Array.from({ length: 120 }, (_, i) => ({ id: i + 1, name: `r${i + 1}` }));
    const client = {
      ...stubGitea(),
      listRunners: async (page: number, limit: number) => ({ total: 120, items: runners.slice((page - 1) * limit, page * limit) }),
    };
    const three = await gitea({ GITEA_JOB_PAGES: 3 }, client).runners!.list!(undefined);
    expect([...three!].sort((a, b) => a - b)).toEqual(runners.map((r) => r.id));
    expect(await gitea({ GITEA_JOB_PAGES: 2 }, client).runners!.list!(undefined)).toBeUndefined();
  });

  it("gives no runner list to read without GITEA_API_TOKEN or with GITEA_JOB_PAGES=0, and no job status without the token", () => {
    expect(gitea().runners?.list).toBeTypeOf("function");
    expect(gitea({ GITEA_API_TOKEN: "" }).runners?.list).toBeUndefined();
    expect(gitea({ GITEA_JOB_PAGES: 0 }).runners?.list).toBeUndefined();
    expect(gitea().jobWaiting).toBeTypeOf("function");
    expect(gitea({ GITEA_API_TOKEN: "" }).jobWaiting).toBeUndefined();
  });

  it("a job still waits while Gitea has it queued, waiting or blocked (or has it not), and not once it runs or ended", async () => {
    const status = new Map<number, string>([
      [1, "queued"],
      [2, "waiting"],
      [3, "blocked"],
      [4, "in_progress"],
      [5, "completed"],
    ]);
    const client = { ...stubGitea(), getJob: async (_repo: string, id: number) => (status.has(id) ? ({ id, status: status.get(id) } as never) : null) };
    const waiting = gitea({}, client).jobWaiting!;
    expect(await Promise.all([1, 2, 3, 4, 5, 6].map((id) => waiting("acme/widgets", id)))).toEqual([true, true, true, false, false, true]);
  });

  it("asks Gitea about one runner, and disables it where Gitea can", async () => {
    const client = {
      ...stubGitea(),
      getRunner: async ({ id }: { id: number }) => (id === 7 ? { id, name: "r", busy: true } : null),
      disableRunner: async () => true,
    };
    const forge = gitea({}, client);
    expect(await forge.runners!.get({ id: 7 })).toMatchObject({ busy: true });
    expect(await forge.runners!.get({ id: 8 })).toBeNull();
    expect(await forge.runners!.disable({ id: 7 })).toBe(true);
  });
});

describe("Forgejo's answers", () => {
  const forge = createForgejoForge(loadConfig(forgejoTestEnv("ws://x:1", "http://b", "https://forgejo.example.com")).forgejo!, {} as ForgejoClient, Date.now);

  it("hands the drivers a launch for its runner: its token and the claim token as files, one-job bound to the handle; a runner with no job yet asks at handleUrl", () => {
    const runner = { url: "https://forgejo.example.com", uuid: "u", token: "runner-token-secret", labels: ["l"], handle: "h-1" };
    const input = { claimToken: "claim-secret", completeUrl: "https://d/complete", handleUrl: "https://d/handle" };
    const bound = forge.runnerFields({ forge: "forgejo", runner }, input);
    expect(bound.forgejo).toEqual(runner);
    expect(bound.handleUrl).toBeUndefined();
    expect(bound.launch?.files).toEqual({ token: "runner-token-secret", "claim-token": "claim-secret" });
    expect(bound.launch?.command).toEqual(expect.arrayContaining(["--handle", "h-1"]));
    expect(JSON.stringify(bound.launch?.command)).not.toMatch(/runner-token-secret|claim-secret/);
    const { handle: _h, ...warm } = runner;
    const waiting = forge.runnerFields({ forge: "forgejo", runner: warm }, input);
    expect(waiting.handleUrl).toBe("https://d/handle");
    expect(waiting.launch?.userData).toContain("GDR_HANDLE_URL='https://d/handle'");
    expect(bound.launch?.userData).not.toContain("export GDR_HANDLE_URL");
  });

  it("its cleanup lists GITEA_SCOPE only: a runner registered at its job's repository is not there", () => {
    expect(forge.listsAtHome(undefined)).toBe(true);
    expect(forge.listsAtHome("repo:acme/widgets")).toBe(false);
  });

  it("is polled (its poll health is kept); says nothing of single runners or jobs; any runner may stand as a warm one (the poller matches places)", () => {
    expect(forge.polled).toBe(true);
    expect(forge.runners).toBeUndefined();
    expect(forge.jobWaiting).toBeUndefined();
    expect(forge.fitsWarm("repo:acme/widgets", "org:other")).toBe(true);
  });
});
