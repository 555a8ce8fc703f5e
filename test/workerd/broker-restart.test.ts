// The broker dies mid-burst: nats-server gets SIGKILL while webhooks arrive, and comes back on
// the same store. Webhooks during the outage get 503 and nothing claims to be queued; after the
// restart the sweep's Gitea job listing recovers every job whose webhook failed. Zero lost:
// every job ends with one assignment, a runner, and an ack after its claim. RESTART_N (150) jobs.
import { expect, inject, it } from "vitest";
import { giteaTestEnv, provisionEnv } from "../harness/env.ts";
import { assignmentStates, assignmentViews, deliverJob as deliver, inParallel, withJob } from "../harness/jobs.ts";
import { streamState } from "../harness/nats.ts";
import { backendControl, captureLogs, giteaControl, tick, tickUntil } from "../harness/worker.ts";
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
      CAPACITY_POD: N, RETRY_DELAY_MS: 50, BACKEND_TIMEOUT_MS: 500, RECONCILE_BUDGET_MS: 3_000, GITEA_JOB_PAGES: 10,
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
    const acked = logs.events().filter((e) => e.event === "acked").map((e) => e.assignment);
    expect(acked.toSorted()).toEqual(ids.toSorted());
  } finally {
    await broker("start").catch(() => undefined);
    logs.restore();
  }
});
