// Fair share of a full backend (FAIR_SHARE=on), against the real nats-server, the fake Gitea that
// hands each polling runner the oldest job of its own repository (RUNNER_SCOPE=repository) and
// fake act_runners: a one-job fix queued behind a 200-job backlog gets the first slot freed after
// it, a third repository's jobs the next ones, and every job runs exactly once.
import { GITEA_RELEASES } from "../harness/fixtures.ts";
import { describe, expect, inject, it } from "vitest";
import { giteaTestEnv, poolsTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { backendControl, bearer, giteaControl, logsOfEachTest, request, sleep, tick } from "../harness/worker.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const giteaUrl = inject("giteaUrl");
const logs = logsOfEachTest();

const CAPACITY = 10;
const METRICS_TOKEN = "metrics-token-0123456789abcdef";
/** a/mono's first ten run this long: everything is queued and delivered before a slot frees. */
const LONG_MS = 40_000;
const runMs = () => 2_000 + Math.floor(Math.random() * 2_000);

/** `release`: the Gitea the fake plays (its attempt numbering reaches the Worker through its webhooks). */
async function setup(vars: Record<string, unknown>, release = "1.27.0") {
  const env = giteaTestEnv(nats, backendUrl, giteaUrl, { RETRY_DELAY_MS: 50, CAPACITY_POD: CAPACITY, RUNNER_SCOPE: "repository", GITEA_JOB_PAGES: 0, ...vars });
  await provisionEnv(env);
  const gitea = giteaControl(env);
  await gitea.version(release);
  await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
  await backendControl(env).mode({ runner: true, bootMs: 100, fetchIntervalMs: 200, jobMs: 2_000 });
  return { env, gitea, backend: backendControl(env) };
}

/** Delivers Gitea's webhooks as they come and ticks now and then, until every job completed. */
async function runAll(env: Record<string, string>, gitea: ReturnType<typeof giteaControl>, timeoutMs: number) {
  const end = Date.now() + timeoutMs;
  const sending: Promise<void>[] = [];
  for (let i = 0; ; i++) {
    const { jobs } = await gitea.actions();
    if (jobs.every((j) => j.status === "completed")) return void (await Promise.all(sending));
    if (Date.now() > end) throw new Error(`timed out: ${jobs.filter((j) => j.status !== "completed").length} jobs left`);
    // Gitea's deliverer sends from a queue, in the background: a delivery does not wait for the last.
    for (const d of await gitea.deliver(() => true)) sending.push(gitea.send([d]));
    if (i % 20 === 0) await tick(env);
    await sleep(20);
  }
}

const stateOf = async (env: Record<string, string>, id: string) =>
  ((await (await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as { state?: string }).state;
async function until(done: () => Promise<boolean>, timeoutMs: number) {
  for (const end = Date.now() + timeoutMs; !(await done()); await sleep(100)) if (Date.now() > end) throw new Error("timed out");
}

describe("fair share of a full backend", () => {
  it("200 jobs of a/mono, then 1 of b/fix, then 5 of c/app: b/fix gets the next slot, c/app the ones after; each job runs once", async () => {
    const { env, gitea, backend } = await setup({ FAIR_SHARE: "on" });
    const t0 = Date.now();
    // The first ten of a/mono's hold the backend while everything is queued and delivered.
    const mono = (
      await gitea.queue(
        Array.from({ length: 200 }, (_, i) => ({ labels: ["ubuntu-latest"], repository: "a/mono", runMs: i < CAPACITY ? LONG_MS + 400 * i : runMs() })),
      )
    ).jobs;
    await gitea.deliver();
    const [fix] = (await gitea.queue([{ labels: ["ubuntu-latest"], repository: "b/fix", runMs: runMs() }])).jobs as [number];
    await gitea.deliver();
    const app = (await gitea.queue(Array.from({ length: 5 }, () => ({ labels: ["ubuntu-latest"], repository: "c/app", runMs: runMs() })))).jobs;
    await gitea.deliver();
    const ids = [fix, ...app].map((id) => `gitea-${id}-1`);
    // Webhooks delivered and the cron ticking meanwhile, as Gitea and Cloudflare would.
    await until(async () => {
      await gitea.deliver();
      await tick(env);
      return (await Promise.all(ids.map((id) => stateOf(env, id)))).every((s) => s === "capacity_wait");
    }, LONG_MS - 5_000);
    console.info(JSON.stringify({ scenario: "fair share", queuedAndWaitingMs: Date.now() - t0 }));
    expect((await gitea.actions()).taken).toHaveLength(CAPACITY);
    const waiting = logs().events().length;
    const started = Date.now();
    await runAll(env, gitea, 150_000);
    const wallMs = Date.now() - started;
    const turns = logs()
      .events()
      .slice(waiting)
      .filter((e) => e.event === "turn_given")
      .map((e) => String(e.assignment));
    // The first slot freed goes to the fix (b holds none, and waited longer than c). c/app's
    // five come interleaved with a/mono's as their holdings even out, not after a/mono's backlog
    // of 190 (first come, first served). How soon depends on when slots free: at best c takes
    // the next five; when passes lag on a loaded machine and a/mono's runners all end at once
    // while c/app's still run, a/mono holds fewer and rightly gets turns until it holds as many
    // (a tie goes to a/mono, which waited longer). A run of a/mono's turns ends once it holds
    // more than c/app (at most 4 of c/app's run at once), about five turns; 25 turns leave c/app's
    // fifth that room four times over, and are still a small part of a/mono's 190.
    const repoOf = new Map([...mono.map((j) => [`gitea-${j}-1`, "a"]), [ids[0], "b"], ...ids.slice(1).map((id) => [id, "c"])] as [string, string][]);
    console.info(
      JSON.stringify({
        scenario: "fair share",
        turns: turns
          .slice(0, 26)
          .map((id) => repoOf.get(id) ?? id)
          .join(""),
      }),
    );
    expect(turns[0]).toBe(ids[0]);
    expect(
      turns
        .slice(1, 26)
        .filter((id) => ids.slice(1).includes(id))
        .sort(),
    ).toEqual(ids.slice(1).sort());
    // Every job ran once, each on the runner of its own repository.
    const { jobs, taken } = await gitea.actions();
    expect(jobs.filter((j) => j.conclusion === "success")).toHaveLength(206);
    expect(taken).toHaveLength(206);
    expect(new Set(taken.map((t) => t.job)).size).toBe(206);
    expect((await backend.state()).created).toBe(206);
    // Utilisation: the slots' time spent running jobs, over the time from the first start to the last end.
    const times = jobs as unknown as { startedMs: number; completedMs: number }[];
    const runTime = times.reduce((sum, j) => sum + (j.completedMs - j.startedMs), 0);
    const span = Math.max(...times.map((j) => j.completedMs)) - Math.min(...times.map((j) => j.startedMs));
    const utilisation = runTime / (CAPACITY * span);
    console.info(JSON.stringify({ scenario: "fair share", wallMs, utilisation, mono: mono.length }));
    // Runners that boot in 0.1 s and poll every 0.2 s, on 2 cores shared with the rest of the
    // suite (the fake Gitea serves every test): 0.8 and more here; first come first served
    // measures about the same. The goal of 0.9 is the bench's to show; this guards the gross
    // misses, such as turns given only once per cron tick.
    expect(utilisation).toBeGreaterThanOrEqual(0.7);
  }, 240_000);

  it.each(GITEA_RELEASES)(
    "on Gitea %s: a job cancelled while it waits its turn is never provisioned, and leaves the wait set; the others run once; no message is redelivered while waiting",
    async (release) => {
      const { env, gitea, backend } = await setup({ FAIR_SHARE: "on", CAPACITY_POD: 1 }, release);
      const [first, second, third] = (
        await gitea.queue(["a/one", "b/two", "c/three"].map((repository) => ({ labels: ["ubuntu-latest"], repository, runMs: 1_500 })))
      ).jobs as [number, number, number];
      await gitea.deliver();
      await until(async () => {
        await gitea.deliver();
        await tick(env);
        return (await stateOf(env, `gitea-${third}-1`)) === "capacity_wait" && (await stateOf(env, `gitea-${second}-1`)) === "capacity_wait";
      }, 15_000);
      // Both wait their turn, out of the consumer: /v1/status counts them.
      const status = async () =>
        (await (await request(env, "/v1/status", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as {
          backends: { waitingForCapacity: number; redelivered: number }[];
        };
      expect((await status()).backends[0]!.waitingForCapacity).toBe(2);
      await gitea.cancel(second);
      await runAll(env, gitea, 30_000);
      expect(await stateOf(env, `gitea-${second}-1`)).toBe("terminated");
      await until(async () => {
        await gitea.deliver();
        await tick(env);
        return (await backend.state()).runners.length === 0;
      }, 15_000);
      expect((await backend.state()).created).toBe(2);
      expect((await gitea.actions()).taken.map((t) => t.job).sort()).toEqual([first, third].sort());
      // The cancelled one's entry is gone once a pass gives turns again; nothing waits.
      await tick(env);
      expect((await status()).backends[0]!.redelivered).toBe(0);
      expect((await status()).backends[0]!.waitingForCapacity).toBe(0);
      expect(
        logs()
          .events()
          .filter((e) => e.event === "turn_given")
          .map((e) => e.assignment),
      ).toEqual([`gitea-${third}-1`]);
    },
    60_000,
  );

  it("QUOTAS: an owner at its limit waits (quota_wait) while others run; a lowered limit ends no runner, and admits none until under it", async () => {
    const quotas = (limit: number) => JSON.stringify({ owners: { A: { limit } } });
    const { env, gitea, backend } = await setup({ QUOTAS: quotas(2), METRICS_TOKEN });
    const a = (await gitea.queue(Array.from({ length: 6 }, (_, i) => ({ labels: ["ubuntu-latest"], repository: i % 2 ? "a/one" : "A/two", runMs: 1_500 }))))
      .jobs;
    const b = (await gitea.queue(Array.from({ length: 2 }, () => ({ labels: ["ubuntu-latest"], repository: "b/x", runMs: 1_500 })))).jobs;
    const running = async (ids: number[]) => (await gitea.actions()).jobs.filter((j) => ids.includes(j.id) && j.status === "in_progress").length;
    // Once two of a's run, every Worker sees the limit drop to 1 (webhooks and ticks alike).
    const low = { ...env, QUOTAS: quotas(1) };
    const giteaLow = giteaControl(low);
    let most = 0;
    let lowered = false;
    let under = false;
    let mostUnder = 0;
    // What the operator sees while a's wait at the limit and b's run: a's as quota_wait.
    type Owners = {
      owners: { owner: string; runners: number; waitingForCapacity: number; waitingForQuota: number }[];
      backends: { waitingForQuota: number }[];
    };
    let seen: { status: Owners; metrics: string } | undefined;
    // Looked at every 0.1 s apart from the delivering and ticking: a cron tick holds a ready
    // runner's message up to 3 s for its claim, and a's jobs, woken by releases, run 1.5 s.
    const look = async () => {
      const now = await running(a);
      most = Math.max(most, now);
      if (lowered && now <= 1) under = true;
      if (under) mostUnder = Math.max(mostUnder, now);
      if (!lowered && now === 2) {
        // The status and the scrape compared only when nothing moved between them.
        const status = async () => (await (await request(env, "/v1/status", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as Owners;
        const before = await status();
        const metrics = await (await request(env, "/metrics", { headers: bearer(METRICS_TOKEN) })).text();
        const after = await status();
        const owner = after.owners.find((o) => o.owner === "a");
        const still = JSON.stringify(before.owners.find((o) => o.owner === "a")) === JSON.stringify(owner);
        if (!seen && still && owner && owner.runners === 2 && owner.waitingForQuota > 0) seen = { status: after, metrics };
        lowered = seen !== undefined;
      }
    };
    let done = false;
    const looking = (async () => {
      while (!done) await Promise.all([look(), sleep(100)]);
    })();
    try {
      await until(async () => {
        await (lowered ? giteaLow : gitea).deliver();
        await tick(lowered ? low : env);
        return (await gitea.actions()).jobs.every((j) => j.status === "completed");
      }, 45_000);
    } finally {
      done = true;
      await looking;
    }
    expect(most).toBe(2);
    // a's jobs (owner A and a, one owner) wait at the quota; none of them for capacity.
    const a1 = seen!.status.owners.find((o) => o.owner === "a")!;
    expect(a1.waitingForCapacity).toBe(0);
    expect(seen!.status.backends[0]!.waitingForQuota).toBe(a1.waitingForQuota);
    expect(seen!.status.owners.map((o) => o.owner)).not.toContain("A");
    expect(seen!.metrics).toContain(`gdr_owner_runners{owner="a"} 2`);
    expect(seen!.metrics).toContain(`gdr_owner_waiting_jobs{owner="a",state="quota_wait"} ${a1.waitingForQuota}`);
    expect(seen!.metrics).toContain(`gdr_assignments{backend="pod",state="quota_wait"} ${a1.waitingForQuota}`);
    expect(
      logs()
        .events()
        .some((e) => e.event === "quota_wait"),
    ).toBe(true);
    // b's ran though a's waited; every job ran once, none cut short.
    const { jobs } = await gitea.actions();
    expect(
      jobs
        .filter((j) => j.conclusion === "success")
        .map((j) => j.id)
        .sort(),
    ).toEqual([...a, ...b].sort());
    expect((await backend.state()).created).toBe(8);
    // Lowered with two running: both ran to the end; once under the new limit, never above it.
    expect(lowered && under).toBe(true);
    expect(mostUnder).toBe(1);
  }, 60_000);

  it.each(GITEA_RELEASES)(
    "on Gitea %s: a job at its owner's QUOTAS limit gets the place its owner's finished runner gives back at once, without a cron tick, though the backend was never full",
    async (release) => {
      const { env, gitea } = await setup({ QUOTAS: JSON.stringify({ owners: { a: { limit: 1 } } }) }, release);
      const [first, second] = (await gitea.queue([1, 2].map(() => ({ labels: ["ubuntu-latest"], repository: "a/x", runMs: 1_500 })))).jobs as [number, number];
      // Webhooks only: the queued ones' passes, the runner's claim, its completion's release.
      await until(async () => {
        await gitea.deliver();
        return (await stateOf(env, `gitea-${second}-1`)) === "quota_wait";
      }, 15_000);
      await until(async () => {
        await gitea.deliver();
        return (await gitea.actions()).jobs.every((j) => j.status === "completed");
      }, 20_000);
      const { taken } = await gitea.actions();
      expect(taken.map((t) => t.job)).toEqual([first, second]);
      expect(
        logs()
          .events()
          .filter((e) => e.event === "turn_given")
          .map((e) => e.assignment),
      ).toEqual([`gitea-${second}-1`]);
    },
    60_000,
  );

  it("a pool at its maxRunners holds back its own jobs, not the backend's other pools' waiting behind them", async () => {
    const pools = [
      { name: "small", backend: "pod", labels: ["small"], maxRunners: 1 },
      { name: "big", backend: "pod", labels: ["ubuntu-latest:docker://node:20-bookworm"] },
    ];
    const env = poolsTestEnv(nats, backendUrl, giteaUrl, pools, {
      RETRY_DELAY_MS: 50,
      CAPACITY_POD: CAPACITY,
      CAPACITY_VM: 0,
      RUNNER_SCOPE: "repository",
      GITEA_JOB_PAGES: 0,
    });
    await provisionEnv(env);
    const gitea = giteaControl(env);
    await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
    await backendControl(env).mode({ runner: true, bootMs: 100, fetchIntervalMs: 100, jobMs: 1_000 });
    // small's first job runs 12 s; its others and b/y wait for small's one place; c's jobs, of
    // the big pool, queued after them all, find them waiting and wait their turn too.
    const small = (await gitea.queue([12_000, 500, 500].map((runMs) => ({ labels: ["small"], repository: "a/x", runMs })))).jobs;
    const [by] = (await gitea.queue([{ labels: ["small"], repository: "b/y", runMs: 500 }])).jobs as [number];
    await gitea.deliver();
    await until(async () => {
      await gitea.deliver();
      await tick(env);
      return (await stateOf(env, `gitea-${by}-1`)) === "capacity_wait";
    }, 10_000);
    const big = (await gitea.queue([1, 2].map(() => ({ labels: ["ubuntu-latest"], repository: "c/z", runMs: 500 })))).jobs;
    await until(async () => {
      await gitea.deliver();
      await tick(env);
      return (await gitea.actions()).jobs.filter((j) => big.includes(j.id)).every((j) => j.status === "completed");
    }, 10_000);
    // The big pool's jobs ran while small's first still held its one place.
    const { jobs } = await gitea.actions();
    expect(jobs.find((j) => j.id === small[0])!.status).toBe("in_progress");
    await runAll(env, gitea, 40_000);
    // Every job ran once; small never ran two at once.
    const times = ((await gitea.actions()).jobs as unknown as { id: number; startedMs: number; completedMs: number; conclusion: string }[]).filter((j) =>
      [...small, by].includes(j.id),
    );
    expect(times.every((j) => j.conclusion === "success")).toBe(true);
    const sorted = [...times].sort((a, b) => a.startedMs - b.startedMs);
    for (let i = 1; i < sorted.length; i++) expect(sorted[i]!.startedMs).toBeGreaterThanOrEqual(sorted[i - 1]!.completedMs);
  }, 90_000);
});
