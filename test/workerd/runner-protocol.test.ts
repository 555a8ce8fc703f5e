// The dispatcher against a Gitea that hands work out the way real Gitea does: registered runners
// poll FetchTask, each is given the oldest queued job its labels cover (not necessarily the job it
// was made for), and Gitea sends in_progress and completed with that runner's id and name. Against
// the real nats-server, the fake Gitea (fake-gitea-actions.mjs) and fake act_runners booted by the
// fake backend (fake-runner.mjs).
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { giteaTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { backendControl, bearer, captureLogs, giteaControl, request, sleep, tick, type Captured } from "../harness/worker.ts";

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

/** Delivers Gitea's webhooks and ticks until `done`, as Gitea and the cron would. */
async function runUntil(env: Env, gitea: ReturnType<typeof giteaControl>, done: () => Promise<boolean>, timeoutMs = 30_000) {
  const until = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > until) throw new Error("timed out");
    await gitea.deliver();
    await tick(env);
    await sleep(50);
  }
  await gitea.deliver();
}

const state = async (env: Env, id: string) => ((await (await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as { state: string }).state;

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
});
