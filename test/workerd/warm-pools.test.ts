// Warm runners, against the real nats-server, the fake Gitea that hands work out as Gitea does and
// fake act_runners that boot, poll and run one job: a pool keeps its warm runners, a job starts on
// one without waiting for a boot, the one that took it is replaced, and no more runners are made
// than jobs plus the warm target.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { poolsTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import {
  backendControl,
  bearer,
  type Captured,
  captureLogs,
  type Delivery,
  giteaControl,
  idleInGitea,
  request,
  runUntil,
  sleep,
  tick,
} from "../harness/worker.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const giteaUrl = inject("giteaUrl");
let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());

type Env = Record<string, string>;
const LABELS = ["ubuntu-latest:docker://node:20-bookworm", "small"];

const poolsVar = (pool: Record<string, unknown>) => JSON.stringify([{ name: "small", backend: "pod", labels: LABELS, ...pool }]);

async function setup(pool: Record<string, unknown>, runner: Record<string, unknown> = {}, vars: Record<string, unknown> = {}) {
  const env = poolsTestEnv(nats, backendUrl, giteaUrl, [{ name: "small", backend: "pod", labels: LABELS, ...pool }], {
    RETRY_DELAY_MS: 30,
    CAPACITY_VM: 0,
    ...vars,
  });
  await provisionEnv(env);
  const gitea = giteaControl(env);
  await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
  await backendControl(env).mode({ runner: true, bootMs: 400, fetchIntervalMs: 100, jobMs: 400, ...runner });
  return { env, gitea, backend: backendControl(env) };
}

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
    // Its own runner was never made: the job waited out its grace for the warm one, which took it.
    expect((await backend.state()).created).toBe(3);
    const view = await assignmentView(env, `gitea-${jobs[0]}-1`);
    expect(view).toMatchObject({ state: "terminated", giteaRunnerId: null, warm: false });
    expect(events("warm_grace").some((e) => e.assignment === `gitea-${jobs[0]}-1`)).toBe(true);
  });

  it("without a grace the job's own runner is made, and becomes a warm runner when another took its job", async () => {
    // The job's own runner is asked for at once, and boots long after the warm one took the job.
    const { env, gitea, backend } = await setup({ minIdle: 1 }, { bootMs: 2_000 }, { WARM_GRACE_MS: 0 });
    await runUntil(env, gitea, async () => (await idleInGitea(gitea)) === 1);
    const { jobs } = await gitea.queue([{ labels: ["ubuntu-latest"] }]);
    await runUntil(env, gitea, async () => (await gitea.actions()).jobs.every((j) => j.status === "completed"));
    expect((await gitea.actions()).taken[0]!.runner).toMatch(/^gdr-warm-small-/);
    await runUntil(env, gitea, async () => (await assignmentView(env, `gitea-${jobs[0]}-1`)).warm);
    expect(events("warm_converted").map((e) => e.assignment)).toEqual([`gitea-${jobs[0]}-1`]);
    // The converted runner is the pool's one warm runner: none was made to replace the one that ran the job.
    for (let i = 0; i < 3; i++) await tick(env);
    expect((await backend.state()).created).toBe(2);
  });

  it("above the target the oldest go, all within one tick; the youngest stays", async () => {
    const { env, gitea, backend } = await setup({ minIdle: 1 });
    // Made one after another: the youngest is the last.
    for (const n of [1, 2, 3]) await runUntil({ ...env, RUNNER_POOLS: poolsVar({ minIdle: n }) }, gitea, async () => (await idleInGitea(gitea)) === n);
    const before = (await backend.state()).runners.map((r) => r.id);
    const lowered = { ...env, RUNNER_POOLS: poolsVar({ minIdle: 1 }) };
    await tick(lowered);
    const gone = events("warm_scaled_down").map((e) => e.assignment);
    expect(gone).toHaveLength(2);
    const left = (await backend.state()).runners.map((r) => r.id);
    expect(left).toHaveLength(1);
    expect(before.filter((id) => !gone.includes(id))).toEqual(left);
    expect(left).toEqual([before.at(-1)]);
    expect((await gitea.state()).runners).toHaveLength(1);
  });

  it("a warm runner that took a job as it is scaled down is left to run it: Gitea says it is busy", async () => {
    const { env, gitea, backend } = await setup({ minIdle: 1 });
    await runUntil(env, gitea, async () => (await idleInGitea(gitea)) === 1);
    const { jobs } = await gitea.queue([{ labels: ["ubuntu-latest"] }]);
    // Its in_progress is still on its way when the pool's target drops to 0.
    const held: Delivery[] = [];
    const until = Date.now() + 10_000;
    while (!(await gitea.actions()).taken.length && Date.now() < until) {
      held.push(...(await gitea.deliver((d) => d.action === "in_progress")));
      await sleep(50);
    }
    held.push(...(await gitea.deliver((d) => d.action === "in_progress")));
    await tick({ ...env, RUNNER_POOLS: poolsVar({ minIdle: 0 }) });
    expect(events("warm_busy")).toHaveLength(1);
    expect(events("warm_scaled_down")).toEqual([]);
    expect((await backend.state()).deleted ?? 0).toBe(0);
    await gitea.send(held);
    await runUntil({ ...env, RUNNER_POOLS: poolsVar({ minIdle: 0 }) }, gitea, async () => (await gitea.actions()).jobs.every((j) => j.status === "completed"));
    expect((await gitea.actions()).jobs.find((j) => j.id === jobs[0])?.conclusion).toBe("success");
  });

  it("a warm runner takes a job whose runner is busy with another: once that one's in_progress comes, the runner standing for it becomes warm, and none is made", async () => {
    const { env, gitea, backend } = await setup({ minIdle: 1 }, { jobMs: 8_000 }, { WARM_GRACE_MS: 0 });
    await runUntil(env, gitea, async () => (await idleInGitea(gitea)) === 1);
    // Only queued webhooks go through; the rest wait, as behind a slow deliverer.
    const held: Delivery[] = [];
    const until = async (done: () => Promise<boolean>) => {
      for (const end = Date.now() + 20_000; !(await done()); await sleep(50)) {
        if (Date.now() > end) throw new Error("timed out");
        held.push(...(await gitea.deliver((d) => d.action !== "queued")));
        await tick(env);
      }
      held.push(...(await gitea.deliver((d) => d.action !== "queued")));
    };
    const idle = async (name: string) =>
      (await gitea.state()).runners.some(
        (r) => r.name === name && (r as { lastOnline?: number }).lastOnline !== undefined && (r as { task?: number }).task === undefined,
      );
    const takenBy = async (job: number) => (await gitea.actions()).taken.find((t) => t.job === job)?.runner;
    // The warm runner takes job A; A's own runner, made at once, comes up idle.
    const [a] = (await gitea.queue([{ labels: ["ubuntu-latest"] }])).jobs as [number];
    await until(async () => (await takenBy(a))?.startsWith("gdr-warm-small-") === true && (await idle(`gdr-gitea-${a}-1`)));
    // Job B: A's runner takes it at once; B's own runner comes up to find nothing.
    const [b] = (await gitea.queue([{ labels: ["ubuntu-latest"] }])).jobs as [number];
    await until(async () => (await takenBy(b)) === `gdr-gitea-${a}-1` && (await idle(`gdr-gitea-${b}-1`)));
    expect((await backend.state()).created).toBe(3);
    // The warm runner's in_progress comes while A's runner's is still on its way; then that one.
    const warmTook = held.filter((d) => d.action === "in_progress" && d.job === a);
    const aTook = held.filter((d) => d.action === "in_progress" && d.job === b);
    expect([warmTook.length, aTook.length]).toEqual([1, 1]);
    const settling = gitea.send(warmTook);
    await sleep(1_000);
    await gitea.send(aTook);
    await settling;
    expect(events("warm_converted").map((e) => e.assignment)).toEqual([`gitea-${b}-1`]);
    expect(events("warm_filled")).toHaveLength(1);
    await gitea.send(held.filter((d) => !warmTook.includes(d) && !aTook.includes(d)));
    await runUntil(env, gitea, async () => (await gitea.actions()).jobs.every((j) => j.status === "completed"), 40_000);
    for (let i = 0; i < 3; i++) await tick(env);
    // Two jobs, one warm runner: three runners, B's the warm one now.
    expect((await backend.state()).created).toBe(3);
    expect(await idle(`gdr-gitea-${b}-1`)).toBe(true);
  }, 60_000);
});

describe("pools in /metrics and /v1/status", () => {
  it("show each pool's runners, warm target and job start-up times, the same from every invocation", async () => {
    const METRICS_TOKEN = "metrics-token-0123456789abcdef";
    const { env, gitea } = await setup({ minIdle: 2, maxRunners: 6 }, {}, { METRICS_TOKEN });
    const status = async () => (await (await request(env, "/v1/status", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as PoolsStatus;
    await runUntil(env, gitea, async () => (await status()).pools[0]!.idle === 2);
    await gitea.queue([{ labels: ["ubuntu-latest"] }, { labels: ["ubuntu-latest"] }]);
    // Webhooks delivered as they come, as Gitea does; no cron tick is needed for a job to start.
    for (const end = Date.now() + 20_000; !(await gitea.actions()).jobs.every((j) => j.status === "completed") && Date.now() < end;) {
      await gitea.deliver();
      await sleep(20);
    }
    await runUntil(env, gitea, async () => (await status()).pools[0]!.idle === 2);
    const { taken } = await gitea.actions();
    const scrape = async () => (await (await request(env, "/metrics", { headers: bearer(METRICS_TOKEN) })).text()).split("\n");
    const [first, second] = [await scrape(), await scrape()];
    const series = (lines: string[]) => lines.filter((l) => l.startsWith("gdr_job_startup_duration_seconds") || l.startsWith("gdr_pool_"));
    expect(series(first)).toEqual(series(second));
    expect(first).toContain('gdr_job_startup_duration_seconds_count{pool="small"} 2');
    expect(first).toContain('gdr_pool_warm_target{pool="small"} 2');
    expect(first).toContain('gdr_pool_max_runners{pool="small"} 6');
    expect(first).toContain('gdr_pool_runners{pool="small",state="idle"} 2');
    expect(first).toContain('gdr_pool_runners{pool="small",state="busy"} 0');
    // Both started within 2 s of being queued (the warm runners poll every 100 ms).
    expect(taken.every((t) => t.at - t.queuedAt < 2_000)).toBe(true);
    expect(first).toContain('gdr_job_startup_duration_seconds_bucket{pool="small",le="2"} 2');
    expect((await status()).pools).toMatchObject([{ pool: "small", idle: 2, warm: 2, target: 2, maxRunners: 6, startup: { count: 2 } }]);
  });
});

type PoolsStatus = { pools: { pool: string; idle: number; warm: number; target: number; startup: { count: number } | null }[] };
const events = (name: string) => logs.events().filter((e) => e.event === name);
const assignmentView = async (env: Env, id: string) =>
  (await (await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as {
    state: string;
    warm: boolean;
    giteaRunnerId: number | null;
  };
