// A burst of queued webhooks, 10 % delivered twice, shuffled, 32 at once: exactly one assignment,
// one registration and one runner per job, every one acked once after its claim. BURST_N (1000).
import { expect, inject, it } from "vitest";
import { giteaTestEnv, provisionEnv } from "../harness/env.ts";
import { deliverJob, inParallel, withJob } from "../harness/jobs.ts";
import { streamState } from "../harness/nats.ts";
import { backendControl, captureLogs, giteaControl, request, tickUntil } from "../harness/worker.ts";
import { queuedFixture } from "../harness/fixtures.ts";

const N = Number(globalThis.process?.env?.BURST_N ?? 1000);

it(`burst: ${N} jobs, 10 % duplicate deliveries, concurrency 32 → none lost, none provisioned twice`, { timeout: 300_000 }, async () => {
  const logs = captureLogs();
  try {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"), { CAPACITY_POD: N, RETRY_DELAY_MS: 50 });
    await provisionEnv(env);
    const jobs = Array.from({ length: N }, (_, i) => 700_000 + i);
    const deliveries = [...jobs, ...jobs.filter((_, i) => i % 10 === 0)];
    for (let i = deliveries.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [deliveries[i], deliveries[j]] = [deliveries[j]!, deliveries[i]!];
    }
    const statuses: number[] = [];
    await inParallel(deliveries, 32, async (job) => void statuses.push((await deliverJob(env, withJob(queuedFixture, job))).status));
    expect(statuses.every((s) => s === 202)).toBe(true);
    expect((await streamState(env)).messages).toBe(N);

    // Whatever the eager passes left is provisioned by the cron ticks (a parked message is back
    // within 5 s, a dead registration reservation within 60 s).
    const backend = backendControl(env);
    await tickUntil(env, async () => (await backend.state()).runners.length >= N, { timeoutMs: 90_000 });
    const runners = (await backend.state()).runners;
    expect(runners).toHaveLength(N);
    expect((await backend.state()).created).toBe(N);
    expect((await giteaControl(env).state()).registrations).toBe(N);

    await inParallel(runners, 32, async (r) => {
      const res = await request(env, `/v1/assignments/${r.id}/claim`, { method: "POST", headers: { authorization: `Bearer ${r.claimToken}` } });
      expect(res.status).toBe(200);
    });
    await tickUntil(env, async () => (await streamState(env)).messages === 0, { timeoutMs: 90_000 });
    expect(await streamState(env)).toMatchObject({ messages: 0, ackPending: 0 });
    const acked = logs
      .events()
      .filter((e) => e.event === "acked")
      .map((e) => e.assignment);
    expect(acked).toHaveLength(N);
    expect(new Set(acked).size).toBe(N);
  } finally {
    logs.restore();
  }
});
