// A flaky backend: 30 % of PUTs and DELETEs fail with 503 or answer only after the Worker's timeout
// (having done the work). Every assignment still ends ready and claimed, with one runner and one
// registration each, every slot is released after completion and every runner is torn down.
// FLAKY_N (60) jobs, FLAKY_SEED (7) for the fake's PRNG.
import { expect, inject, it } from "vitest";
import { giteaTestEnv, provisionEnv } from "../harness/env.ts";
import { assignmentStates, deliverJob, inParallel, withJob } from "../harness/jobs.ts";
import { admissionState, streamState } from "../harness/nats.ts";
import { backendControl, captureLogs, giteaControl, tickUntil } from "../harness/worker.ts";
import { completedFixture, inProgressFixture, queuedFixture } from "../harness/fixtures.ts";

const N = Number(globalThis.process?.env?.FLAKY_N ?? 60);
const SEED = Number(globalThis.process?.env?.FLAKY_SEED ?? 7);

it(`flaky backend: ${N} jobs, 30 % of backend calls fail or hang → all ready, claimed, released, torn down once`, { timeout: 240_000 }, async () => {
  const logs = captureLogs();
  try {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"), { CAPACITY_POD: N, RETRY_DELAY_MS: 50, BACKEND_TIMEOUT_MS: 250 });
    await provisionEnv(env);
    const backend = backendControl(env);
    const gitea = giteaControl(env);
    await backend.mode({ failRate: 0.15, hangRate: 0.15, hangMs: 1_000, seed: SEED });
    const jobs = Array.from({ length: N }, (_, i) => 800_000 + i);
    const ids = jobs.map((j) => `gitea-${j}-1`);

    const statuses: number[] = [];
    await inParallel(jobs, 8, async (job) => void statuses.push((await deliverJob(env, withJob(queuedFixture, job))).status));
    expect(statuses.filter((s) => s !== 202)).toEqual([]);

    await tickUntil(env, async () => (await assignmentStates(env, ids)).every((s) => s === "backend_ready"), { pauseMs: 50 });
    expect((await assignmentStates(env, ids)).filter((s) => s !== "backend_ready")).toEqual([]);
    const afterProvisioning = await backend.state();
    expect(afterProvisioning.failed).toBeGreaterThan(0);
    expect(afterProvisioning.hung).toBeGreaterThan(0);
    expect(afterProvisioning.created).toBe(N); // a retried or timed-out PUT never made a second runner
    expect(afterProvisioning.runners).toHaveLength(N);
    expect(logs.events().filter((e) => e.event === "backend_retry").length).toBeGreaterThan(0);
    const registered = (await gitea.state()).runners;
    expect((await gitea.state()).registrations).toBe(N);

    const runnerOf = new Map(registered.map((r) => [r.name, r.id]));
    await inParallel(jobs, 8, async (job) => {
      const name = `gdr-gitea-${job}-1`;
      expect((await deliverJob(env, withJob(inProgressFixture, job, { runner_id: runnerOf.get(name), runner_name: name }))).status).toBe(200);
    });
    await tickUntil(env, async () => (await streamState(env)).messages === 0, { pauseMs: 50 });
    expect(await streamState(env)).toMatchObject({ messages: 0, ackPending: 0 });
    expect((await assignmentStates(env, ids)).every((s) => s === "claimed")).toBe(true);
    const acked = logs
      .events()
      .filter((e) => e.event === "acked")
      .map((e) => e.assignment);
    expect(acked.toSorted()).toEqual(ids.toSorted());

    await inParallel(jobs, 8, async (job) => {
      const name = `gdr-gitea-${job}-1`;
      expect((await deliverJob(env, withJob(completedFixture, job, { runner_id: runnerOf.get(name), runner_name: name }))).status).toBe(200);
    });
    expect(await admissionState(env)).toEqual({ leases: [], registering: [] });
    expect((await assignmentStates(env, ids)).every((s) => s === "completed")).toBe(true);

    // Teardowns that failed leave the Gitea runner listed; the sweep retries until both are gone.
    await tickUntil(env, async () => (await backend.state()).runners.length === 0 && (await gitea.state()).runners.length === 0, { pauseMs: 50 });
    const final = await backend.state();
    expect(final.runners).toHaveLength(0);
    expect((await gitea.state()).runners).toHaveLength(0);
    expect(final.created).toBe(N);
    expect(final.deleted).toBe(N);
  } finally {
    logs.restore();
  }
});
