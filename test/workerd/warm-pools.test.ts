// Warm runners, against the real nats-server, the fake Gitea that hands work out as Gitea does and
// fake act_runners that boot, poll and run one job: a pool keeps its warm runners, a job starts on
// one without waiting for a boot, the one that took it is replaced, and no more runners are made
// than jobs plus the warm target.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { poolsTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
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
type Gitea = ReturnType<typeof giteaControl>;
const LABELS = ["ubuntu-latest:docker://node:20-bookworm", "small"];

async function setup(pool: Record<string, unknown>, runner: Record<string, unknown> = {}) {
  const env = poolsTestEnv(nats, backendUrl, giteaUrl, [{ name: "small", backend: "pod", labels: LABELS, ...pool }], { RETRY_DELAY_MS: 30, CAPACITY_VM: 0 });
  await provisionEnv(env);
  const gitea = giteaControl(env);
  await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
  await backendControl(env).mode({ runner: true, bootMs: 400, fetchIntervalMs: 100, jobMs: 400, ...runner });
  return { env, gitea, backend: backendControl(env) };
}

/** Delivers Gitea's webhooks and ticks until `done`. */
async function runUntil(env: Env, gitea: Gitea, done: () => Promise<boolean>, timeoutMs = 30_000) {
  const until = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > until) throw new Error("timed out");
    await gitea.deliver();
    await tick(env);
    await sleep(50);
  }
  await gitea.deliver();
}

/** Runners Gitea sees polling and idle. */
const idleInGitea = async (gitea: Gitea) => (await gitea.state()).runners.filter((r) => (r as { lastOnline?: number; task?: number }).lastOnline !== undefined && (r as { task?: number }).task === undefined).length;

describe("warm runners", () => {
  it("are kept at minIdle; a job starts on one without a boot; it is replaced; no more runners than jobs plus the target", async () => {
    const { env, gitea, backend } = await setup({ minIdle: 2 });
    await runUntil(env, gitea, async () => (await idleInGitea(gitea)) === 2);
    expect((await backend.state()).created).toBe(2);
    // Maintenance again and again changes nothing: the pool is at its target.
    for (let i = 0; i < 3; i++) await tick(env);
    expect((await backend.state()).created).toBe(2);

    const { jobs } = await gitea.queue([{ labels: ["ubuntu-latest"] }]);
    await runUntil(env, gitea, async () => (await gitea.actions()).jobs.every((j) => j.status === "completed"));
    const { taken } = await gitea.actions();
    expect(taken).toHaveLength(1);
    expect(taken[0]!.runner).toMatch(/^gdr-warm-small-/);
    // Taken within a few fetch intervals of being queued, not after a boot.
    expect(taken[0]!.at - taken[0]!.queuedAt).toBeLessThan(1_500);
    // Back at the target, and never more made than the job's one plus the target.
    await runUntil(env, gitea, async () => (await idleInGitea(gitea)) === 2);
    expect((await backend.state()).created).toBeLessThanOrEqual(jobs.length + 2);
    const view = (await (await request(env, `/v1/assignments/gitea-${jobs[0]}-1`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as { state: string; warm: boolean };
    // The job's own assignment ended without a runner, or its runner became a warm one.
    expect(view.state === "terminated" || view.warm).toBe(true);
  });
});
