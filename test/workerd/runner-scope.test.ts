// RUNNER_SCOPE: where each job's runner is registered with Gitea, and so which jobs Gitea hands it.
// Against the fake Gitea, which hands a polling runner the oldest queued job of its own scope (the
// instance, an owner, or a repository) and lets a runner be seen and deleted only from its scope
// or the instance's, as Gitea's EditableInContext does.
import { describe, expect, inject, it } from "vitest";
import { giteaTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { backendControl, bearer, type Delivery, giteaControl, logsOfEachTest, request, runUntil, tick } from "../harness/worker.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const giteaUrl = inject("giteaUrl");
const logs = logsOfEachTest();

const RUNNER = { runner: true, bootMs: 200, fetchIntervalMs: 100, jobMs: 200 };
const JOB = { labels: ["ubuntu-latest"] };

async function setup(vars: Record<string, unknown>) {
  // No sweep: a job the dispatcher is not told of stays unknown to it.
  const env = giteaTestEnv(nats, backendUrl, giteaUrl, { RETRY_DELAY_MS: 30, GITEA_JOB_PAGES: 0, ...vars });
  await provisionEnv(env);
  const gitea = giteaControl(env);
  await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
  await backendControl(env).mode(RUNNER);
  return { env, gitea, backend: backendControl(env) };
}

/** 200 jobs of acme/mono queued first, whose queued webhooks never come; then one of Bob/Fix, delivered. */
async function backlogThenFix(gitea: ReturnType<typeof giteaControl>) {
  await gitea.queue(Array.from({ length: 200 }, () => ({ ...JOB, repository: "acme/mono" })));
  await gitea.deliver(() => true);
  const [fix] = (await gitea.queue([{ ...JOB, repository: "Bob/Fix" }])).jobs as [number];
  return fix;
}

const view = async (env: Record<string, string>, id: string) =>
  (await (await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as {
    state: string;
    giteaRunnerId: number | null;
    giteaRunnerScope: string | null;
  };

describe("RUNNER_SCOPE", () => {
  it("repository: the runner made for a job runs that job, though 200 of another repository's are older; it is registered, seen and deleted there", async () => {
    const { env, gitea } = await setup({ RUNNER_SCOPE: "repository" });
    const fix = await backlogThenFix(gitea);
    await runUntil(env, gitea, async () => (await gitea.actions()).jobs.find((j) => j.id === fix)?.status === "completed");
    expect((await gitea.actions()).taken).toEqual([expect.objectContaining({ job: fix, runner: `gdr-gitea-${fix}-1` })]);
    const { requests } = await gitea.state();
    // Fetched at the repository, with the API token; names are lower case (Gitea's are case-insensitive).
    expect(requests.filter((r) => r.path.endsWith("/registration-token")).map((r) => `${r.method} ${r.path}`)).toEqual([
      "POST /api/v1/repos/bob/fix/actions/runners/registration-token",
    ]);
    await runUntil(env, gitea, async () => (await view(env, `gitea-${fix}-1`)).state === "completed");
    const v = await view(env, `gitea-${fix}-1`);
    expect(v.giteaRunnerScope).toBe("repo:bob/fix");
    // Its runner is deleted where it is registered (Gitea deletes an ephemeral one itself too).
    await runUntil(env, gitea, async () => (await gitea.state()).requests.some((r) => r.method === "DELETE"));
    expect((await gitea.state()).requests.filter((r) => r.method === "DELETE").map((r) => r.path)).toEqual([
      `/api/v1/repos/bob/fix/actions/runners/${v.giteaRunnerId}`,
    ]);
    // Not one of acme/mono's jobs ran.
    expect((await gitea.actions()).jobs.filter((j) => j.status !== "queued").map((j) => j.id)).toEqual([fix]);
  });

  it("instance: the same runner takes the oldest job of all, one of the other repository's", async () => {
    const { env, gitea } = await setup({ RUNNER_SCOPE: "instance" });
    const fix = await backlogThenFix(gitea);
    await runUntil(env, gitea, async () => (await gitea.actions()).taken.length === 1);
    const [taken] = (await gitea.actions()).taken;
    expect(taken).toMatchObject({ runner: `gdr-gitea-${fix}-1` });
    expect(taken!.job).not.toBe(fix);
    expect((await gitea.state()).requests.filter((r) => r.path.endsWith("/registration-token")).map((r) => r.path)).toEqual([
      "/api/v1/admin/actions/runners/registration-token",
    ]);
  });

  it("owner: an organisation's runner is registered at the organisation; a user's, as that user (Sudo); each runs only its owner's jobs", async () => {
    const { env, gitea } = await setup({ RUNNER_SCOPE: "owner" });
    await (await fetch(`${env.GITEA_URL}/_control/users`, { method: "POST", body: JSON.stringify(["Bob"]) })).json();
    const fix = await backlogThenFix(gitea);
    const [app] = (await gitea.queue([{ ...JOB, repository: "ACME/app" }])).jobs as [number];
    await runUntil(env, gitea, async () => (await gitea.actions()).taken.length === 2, 20_000);
    const taken = (await gitea.actions()).taken;
    // Bob's runner runs Bob's job; ACME's runner runs the oldest of ACME's, one of acme/mono's.
    expect(taken.find((t) => t.runner === `gdr-gitea-${fix}-1`)?.job).toBe(fix);
    const acme = taken.find((t) => t.runner === `gdr-gitea-${app}-1`);
    expect(acme?.job).not.toBe(app);
    expect((await gitea.actions()).jobs.find((j) => j.id === acme?.job)).toMatchObject({ status: expect.any(String) });
    const tokens = (await gitea.state()).requests.filter((r) => r.path.endsWith("/registration-token"));
    expect(tokens.map((r) => `${r.path} ${r.headers.sudo ?? "-"}`).sort()).toEqual([
      "/api/v1/orgs/acme/actions/runners/registration-token -",
      "/api/v1/orgs/bob/actions/runners/registration-token -",
      "/api/v1/user/actions/runners/registration-token bob",
    ]);
    expect((await view(env, `gitea-${fix}-1`)).giteaRunnerScope).toBe("user:bob");
    expect((await view(env, `gitea-${app}-1`)).giteaRunnerScope).toBe("org:acme");
  });

  it("a runner registered where GITEA_SCOPE's runner list does not reach: a failed teardown is kept for the tick, which deletes it there", async () => {
    const { env, gitea, backend } = await setup({ RUNNER_SCOPE: "repository", GITEA_SCOPE: "org:acme" });
    const [app] = (await gitea.queue([{ ...JOB, repository: "acme/app", runMs: 300 }])).jobs as [number];
    const id = `gitea-${app}-1`;
    // Its completed waits until the backend refuses every call.
    const held: Delivery[] = [];
    for (const end = Date.now() + 15_000; !held.some((d) => d.action === "completed") && Date.now() < end;) {
      held.push(...(await gitea.deliver((d) => d.action === "completed")));
      await tick(env);
    }
    await backend.mode({ ...RUNNER, failRate: 1 });
    await gitea.send(held);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "teardown_failed")
        .map((e) => e.assignment),
    ).toEqual([id]);
    expect((await backend.state()).runners.map((r) => r.id)).toEqual([id]);
    await backend.mode(RUNNER);
    await tick(env);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "teardown_retried")
        .map((e) => e.assignment),
    ).toEqual([id]);
    expect((await backend.state()).runners).toEqual([]);
    const runnerId = (await view(env, id)).giteaRunnerId;
    expect((await gitea.state()).requests.filter((r) => r.method === "DELETE").map((r) => r.path)).toEqual([
      `/api/v1/repos/acme/app/actions/runners/${runnerId}`,
    ]);
  });
});
