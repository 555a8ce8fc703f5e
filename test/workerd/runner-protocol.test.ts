// The dispatcher against a Gitea that hands work out the way real Gitea does: registered runners
// poll FetchTask, each is given the oldest queued job its labels cover (not necessarily the job it
// was made for), and Gitea sends in_progress and completed with that runner's id and name. Against
// the real nats-server, the fake Gitea (fake-gitea-actions.mjs) and fake act_runners booted by the
// fake backend (fake-runner.mjs).
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { giteaTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { backendControl, bearer, type Captured, captureLogs, giteaControl, request, runUntil, sleep, tick } from "../harness/worker.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const giteaUrl = inject("giteaUrl");
let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());

type Env = Record<string, string>;
const RUNNER = { runner: true, bootMs: 300, fetchIntervalMs: 100, jobMs: 300 };

async function setup(overrides: Record<string, unknown> = {}) {
  const env = giteaTestEnv(nats, backendUrl, giteaUrl, { RETRY_DELAY_MS: 30, ...overrides });
  await provisionEnv(env);
  const gitea = giteaControl(env);
  await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
  await backendControl(env).mode(RUNNER);
  return { env, gitea, backend: backendControl(env) };
}

const state = async (env: Env, id: string) =>
  ((await (await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as { state: string }).state;

describe("runners that poll Gitea for work", () => {
  it("run a burst of jobs once each, one runner per job, whichever job each runner is handed; nothing is left behind", async () => {
    const { env, gitea, backend } = await setup();
    const { jobs } = await gitea.queue(Array.from({ length: 5 }, () => ({ labels: ["ubuntu-latest"] })));
    await runUntil(env, gitea, async () => (await gitea.actions()).jobs.every((j) => j.status === "completed"));
    const { jobs: done, taken } = await gitea.actions();
    expect(done.map((j) => j.conclusion)).toEqual(jobs.map(() => "success"));
    // Five runners, each ran one job: no job twice, no runner twice.
    expect(new Set(taken.map((t) => t.runner)).size).toBe(5);
    expect(new Set(taken.map((t) => t.job)).size).toBe(5);
    expect((await backend.state()).created).toBe(5);
    expect((await gitea.state()).registrations).toBe(5);
    // Each runner's own assignment ends with its job, whichever job that was.
    await runUntil(env, gitea, async () => (await Promise.all(jobs.map((id) => state(env, `gitea-${id}-1`)))).every((s) => s === "completed"));
    // Gitea deleted its ephemeral runners; the backend's workloads are gone (exited, then torn down).
    expect((await gitea.state()).runners).toEqual([]);
    const b = await backend.state();
    expect(b.runners).toEqual([]);
    expect(b.deleted).toBe(5);
  });

  it("a job cancelled before a runner took it: its runner goes; the other job still runs once; nothing is left", async () => {
    const { env, gitea, backend } = await setup();
    await backend.mode({ ...RUNNER, bootMs: 1_500 });
    const { jobs } = await gitea.queue([{ labels: ["ubuntu-latest"] }, { labels: ["ubuntu-latest"] }]);
    await runUntil(env, gitea, async () => (await backend.state()).created === 2);
    await gitea.cancel(jobs[1]!);
    await runUntil(env, gitea, async () => (await gitea.actions()).jobs.every((j) => j.status === "completed"));
    const done = (await gitea.actions()).jobs;
    expect(done.map((j) => j.conclusion)).toEqual(["success", "cancelled"]);
    expect((await gitea.actions()).taken.map((t) => t.job)).toEqual([jobs[0]]);
    // Its assignment ends, and whichever runner is left over goes too: none stays behind.
    await runUntil(env, gitea, async () => (await backend.state()).runners.length === 0 && (await gitea.state()).runners.length === 0);
    expect(await state(env, `gitea-${jobs[1]}-1`)).toBe("terminated");
  });

  it("a missed queued webhook: the sweep finds the job, and it runs once", async () => {
    const { env, gitea, backend } = await setup({ GITEA_JOB_PAGES: 1 });
    const { jobs } = await gitea.queue([{ labels: ["ubuntu-latest"] }]);
    // Gitea's one delivery attempt failed: the Worker never hears this queued.
    await gitea.deliver((d) => d.action === "queued");
    await runUntil(env, gitea, async () => (await gitea.actions()).jobs.every((j) => j.status === "completed"));
    expect(
      logs
        .events()
        .filter((e) => e.event === "recovered")
        .map((e) => e.assignment),
    ).toEqual([`gitea-${jobs[0]}-1`]);
    expect((await backend.state()).created).toBe(1);
    expect(await state(env, `gitea-${jobs[0]}-1`)).toBe("completed");
  });

  it("a job cancelled after another job's runner took its place: the runner standing for it goes", async () => {
    // No sweep: the first job's queued must stay unheard until it is sent.
    const { env, gitea, backend } = await setup({ GITEA_JOB_PAGES: 0 });
    await backend.mode({ ...RUNNER, bootMs: 300, jobMs: 5_000 });
    const { jobs } = await gitea.queue([{ labels: ["ubuntu-latest"] }, { labels: ["ubuntu-latest"] }]);
    const [first, second] = jobs as [number, number];
    // The first job's queued is slow to come: the second's runner is made first, and Gitea hands
    // it the oldest job, the first.
    const held = await gitea.deliver((d) => d.job === first);
    await runUntil(env, gitea, async () => (await gitea.actions()).taken.length === 1, 20_000);
    expect((await gitea.actions()).taken[0]).toMatchObject({ job: first, runner: `gdr-gitea-${second}-1` });
    await backend.mode({ ...RUNNER, bootMs: 60_000, jobMs: 5_000 });
    await gitea.send(held);
    await runUntil(env, gitea, async () => (await backend.state()).created === 2);
    // The second job is cancelled before the first job's runner (its stand-in) boots.
    await gitea.cancel(second);
    await gitea.deliver();
    expect(await state(env, `gitea-${first}-1`)).toBe("terminated");
    await runUntil(env, gitea, async () => (await backend.state()).runners.length === 1);
    expect((await backend.state()).runners.map((r) => r.id)).toEqual([`gitea-${second}-1`]);
  });

  it("at its claim timeout, a job's runner whose job Gitea no longer lists as queued is ended, not asked for again", async () => {
    for (const status of ["in_progress", "queued"] as const) {
      logs.restore();
      logs = captureLogs();
      const { env, gitea, backend } = await setup({ CLAIM_TIMEOUT_MS: 1_000, GITEA_JOB_PAGES: 0 });
      await backend.mode({ readyAfter: 0 }); // up at once, and never claims: as if its job went elsewhere
      const { jobs } = await gitea.queue([{ labels: ["ubuntu-latest"] }]);
      const id = `gitea-${jobs[0]}-1`;
      await runUntil(env, gitea, async () => (await state(env, id)) === "backend_ready");
      // What Gitea says of the job now: another runner took it (a settling that was lost), or not.
      const listed = (await gitea.actions()).jobs.map((j) => ({ ...j, status }));
      await gitea.jobs(listed);
      await runUntil(env, gitea, async () => logs.events().some((e) => e.event === "claim_timeout" && e.assignment === id));
      await sleep(200);
      await tick(env);
      const ended = logs
        .events()
        .filter((e) => e.event === "job_started_elsewhere")
        .map((e) => e.assignment);
      if (status === "in_progress") {
        expect(ended).toEqual([id]);
        expect(await state(env, id)).toBe("terminated");
        expect((await backend.state()).runners).toEqual([]);
      } else {
        // Still queued: torn down and asked for again, as before.
        expect(ended).toEqual([]);
        expect(await state(env, id)).not.toBe("terminated");
      }
    }
  });
});
