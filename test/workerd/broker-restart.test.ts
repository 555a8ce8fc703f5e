// The broker dies mid-burst: nats-server gets SIGKILL while webhooks arrive, and comes back on
// the same store. Webhooks during the outage get 503 and nothing claims to be queued; after the
// restart the sweep's Gitea job listing recovers every job whose webhook failed. Zero lost:
// every job ends with one assignment, a runner, and an ack after its claim. RESTART_N (150) jobs.
import { expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { giteaTestEnv, poolsTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { assignmentStates, assignmentViews, deliverJob as deliver, inParallel, withJob } from "../harness/jobs.ts";
import { streamState } from "../harness/nats.ts";
import { backendControl, captureLogs, giteaControl, sleep, tick, tickUntil } from "../harness/worker.ts";
import { inProgressFixture, queuedFixture } from "../harness/fixtures.ts";

const N = Number(globalThis.process?.env?.RESTART_N ?? 150);
const broker = async (what: "kill" | "start") => {
  const res = await fetch(`${inject("restartNatsControlUrl")}/${what}`, { method: "POST" });
  expect(res.status).toBe(200);
  return res.json();
};

it(`broker restart: SIGKILL mid-burst of ${N}, restart on the same store → 503s during the outage, zero lost`, { timeout: 240_000 }, async () => {
  const logs = captureLogs();
  try {
    const env = giteaTestEnv(inject("restartNatsWsUrl"), inject("backendUrl"), inject("giteaUrl"), {
      CAPACITY_POD: N,
      RETRY_DELAY_MS: 50,
      BACKEND_TIMEOUT_MS: 500,
      RECONCILE_BUDGET_MS: 3_000,
      GITEA_JOB_PAGES: 10,
      // What a crash cut off mid-pass comes back after AckWait; the pass budget stays well inside it.
      ACK_WAIT_MS: 13_000,
    });
    await provisionEnv(env);
    const gitea = giteaControl(env);
    const backend = backendControl(env);
    const jobs = Array.from({ length: N }, (_, i) => 900_000 + i);
    const ids = jobs.map((j) => `gitea-${j}-1`);
    // What Gitea itself lists as queued, whatever became of the webhooks.
    await gitea.jobs(jobs.map((j) => ({ ...withJob(queuedFixture, j).workflow_job, status: "queued" })));

    // The crash hits the deliveries in flight; new ones wait until it is over, so that the
    // outage has a known start, and the restart a known one.
    let sent = 0;
    let downAt = Infinity;
    let restartAt = Infinity;
    let changing: Promise<unknown> | undefined;
    const results: { status: number; body: Record<string, unknown>; start: number; end: number }[] = [];
    await inParallel(jobs, 16, async (job) => {
      const n = ++sent;
      if (n === Math.floor(N / 3)) changing = broker("kill").then(() => (downAt = Date.now()));
      if (n === Math.floor((2 * N) / 3)) {
        restartAt = Date.now();
        changing = broker("start");
      }
      await changing;
      const start = Date.now();
      const { status, body } = await deliver(env, withJob(queuedFixture, job));
      results.push({ status, body, start, end: Date.now() });
    });

    expect(results.filter((r) => r.status !== 202 && r.status !== 503)).toEqual([]);
    const refused = results.filter((r) => r.status === 503);
    // Each 503 says what is true: nothing was queued, or it may be and a retry is safe.
    expect(refused.every((r) => /nothing was queued|may (still|or may not) be queued.* safe/.test(String(r.body.error)))).toBe(true);
    const duringOutage = results.filter((r) => r.start > downAt && r.end < restartAt);
    expect(duringOutage.length).toBeGreaterThan(0);
    expect(duringOutage.every((r) => r.status === 503)).toBe(true);

    // The sweep finds what the outage refused; reconciliation provisions everything.
    const provisioned = async () => (await backend.state()).runners.length === N && (await assignmentStates(env, ids)).every((s) => s === "backend_ready");
    await tickUntil(env, provisioned, { timeoutMs: 120_000 });
    const byId = await assignmentViews(env, ids);
    expect([...byId.entries()].filter(([, v]) => typeof v !== "object" || v.state !== "backend_ready")).toEqual([]);
    expect((await streamState(env)).messages).toBe(N);
    expect((await backend.state()).created).toBe(N);
    expect(logs.events().filter((e) => e.event === "recovered").length).toBeGreaterThanOrEqual(refused.length > 0 ? 1 : 0);

    // Every runner Gitea knows is the one its record holds: orphans of passes the crash cut short are gone.
    const stored = new Set([...byId.values()].map((v) => (v as { giteaRunnerId: number }).giteaRunnerId));
    expect(stored.size).toBe(N);
    await tick(env);
    expect((await gitea.state()).runners.map((r) => r.id).toSorted()).toEqual([...stored].toSorted());

    await inParallel(jobs, 16, async (job) => {
      const id = `gitea-${job}-1`;
      const runnerId = (byId.get(id) as { giteaRunnerId: number }).giteaRunnerId;
      expect((await deliver(env, withJob(inProgressFixture, job, { runner_id: runnerId, runner_name: `gdr-${id}` }))).status).toBe(200);
    });
    await tickUntil(env, async () => (await streamState(env)).messages === 0);
    expect(await streamState(env)).toMatchObject({ messages: 0, ackPending: 0 });
    const acked = logs
      .events()
      .filter((e) => e.event === "acked")
      .map((e) => e.assignment);
    expect(acked.toSorted()).toEqual(ids.toSorted());
  } finally {
    await broker("start").catch(() => undefined);
    logs.restore();
  }
});

it(
  "broker restart with a warm pool and runners that poll Gitea: jobs queued during the outage run once each, the pool comes back to its target, nothing is left",
  { timeout: 180_000 },
  async () => {
    const logs = captureLogs();
    try {
      const env = poolsTestEnv(
        inject("restartNatsWsUrl"),
        inject("backendUrl"),
        inject("giteaUrl"),
        [{ name: "small", backend: "pod", labels: ["ubuntu-latest:docker://node:20-bookworm"], minIdle: 2, maxRunners: 6 }],
        {
          CAPACITY_POD: 10,
          CAPACITY_VM: 0,
          RETRY_DELAY_MS: 50,
          BACKEND_TIMEOUT_MS: 500,
          RECONCILE_BUDGET_MS: 3_000,
          GITEA_JOB_PAGES: 5,
          ACK_WAIT_MS: 13_000,
        },
      );
      await provisionEnv(env);
      const gitea = giteaControl(env);
      const backend = backendControl(env);
      await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
      await backend.mode({ runner: true, bootMs: 300, fetchIntervalMs: 100, jobMs: 300 });
      const round = async () => {
        await gitea.deliver().catch(() => undefined);
        await tick(env).catch(() => undefined);
        await sleep(50);
      };
      const warmIdle = async () =>
        (await gitea.state()).runners.filter(
          (r) => (r as { lastOnline?: number; task?: number }).lastOnline !== undefined && (r as { task?: number }).task === undefined,
        ).length;
      for (const end = Date.now() + 30_000; (await warmIdle()) < 2 && Date.now() < end;) await round();
      await broker("kill");
      // Queued while NATS is down: the warm runners take two of them at once (Gitea hands them out
      // without us); every webhook about them fails now, as Gitea's one attempt would.
      const { jobs } = await gitea.queue(Array.from({ length: 4 }, () => ({ labels: ["ubuntu-latest"] })));
      await sleep(1_000);
      await gitea.deliver();
      await broker("start");
      for (
        const end = Date.now() + 90_000;
        !(await gitea.actions()).jobs.filter((j) => jobs.includes(j.id)).every((j) => j.status === "completed") && Date.now() < end;
      )
        await round();
      const { jobs: done, taken } = await gitea.actions();
      expect(done.filter((j) => jobs.includes(j.id)).map((j) => j.conclusion)).toEqual(jobs.map(() => "success"));
      expect(
        taken
          .filter((t) => jobs.includes(t.job))
          .map((t) => t.job)
          .sort(),
      ).toEqual([...jobs].sort());
      // The two warm runners ran two of the jobs while NATS was down: their webhooks are lost, they
      // exited and Gitea deleted them, and their records still say idle. Minutes later (the clock of
      // their registration moved back) the tick finds them gone from Gitea and fills their places.
      const d = createDispatcher({ config: loadConfig(env) });
      const ghosts = await d.withState(async (s) => [...(await s.warm.list()).values()].flat().map((p) => p.id));
      for (const id of ghosts) {
        await d.withState((s) =>
          s.records.update(id, (r) =>
            r.runner ? { ...r, runner: { ...r.runner, registeredAt: new Date(Date.now() - 3 * 60_000).toISOString() } } : undefined,
          ),
        );
      }
      // Back at two warm runners, and every other workload gone.
      for (const end = Date.now() + 60_000; ((await warmIdle()) !== 2 || (await backend.state()).runners.length !== 2) && Date.now() < end;) await round();
      expect(await warmIdle()).toBe(2);
      expect((await backend.state()).runners).toHaveLength(2);
      expect(logs.events().filter((e) => e.event === "warm_gone").length).toBeGreaterThanOrEqual(1);
    } finally {
      logs.restore();
      await fetch(`${inject("restartNatsControlUrl")}/start`, { method: "POST" }).catch(() => undefined);
    }
  },
);
