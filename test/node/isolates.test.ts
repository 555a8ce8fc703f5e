// Many isolates at once: four Workers (separate `wrangler dev` processes, so separate workerd
// instances) share one NATS. Signed queued webhooks are spread over them, cron ticks fire on all
// four at the same moment, and the fake backend's runners claim and then complete a while later.
// The backend counts the runners alive at any instant: never more than CAPACITY_POD. Every job
// gets one assignment, registration and runner; no compare-and-set gives up. ISOLATES_N (40).
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { startWorker } from "../../bench/lib.mjs";
import { giteaSignature } from "../../src/forge/gitea/signature.ts";
import { queuedFixture } from "../harness/fixtures.ts";
import { giteaTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";

const N = Number(process.env.ISOLATES_N ?? 40);
const CAPACITY = 5;
const ISOLATES = 4;
type Worker = Awaited<ReturnType<typeof startWorker>>;

const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"), {
  CAPACITY_POD: CAPACITY,
  GITEA_JOB_PAGES: 10,
  RECONCILE_BUDGET_MS: 4_000,
  ACK_WAIT_MS: 14_000,
});
// Each Worker's own URL: the runners it provisions claim and complete there.
delete (env as Record<string, string | undefined>).PUBLIC_URL;
const workers: Worker[] = [];
const control = (what: string, body?: unknown) =>
  fetch(`${env.POD_BACKEND_URL}/_control/${what}`, body ? { method: "POST", body: JSON.stringify(body) } : {}).then((r) => r.json());

beforeAll(async () => {
  await provisionEnv({ ...env, PUBLIC_URL: "http://127.0.0.1:1" });
  await control("mode", { token: TEST_SECRETS.BACKEND_TOKEN, autoClaimMs: 100, autoCompleteMs: 1_500 });
  for (let i = 0; i < ISOLATES; i++) workers.push(await startWorker(env));
}, 120_000);
afterAll(() => {
  for (const w of workers) w.stop();
});

async function deliver(worker: Worker, job: number): Promise<number> {
  const payload = structuredClone(queuedFixture);
  payload.workflow_job.id = job;
  const raw = JSON.stringify(payload);
  const signature = await giteaSignature(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(raw));
  const res = await fetch(`${worker.url}/v1/gitea/webhook`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-gitea-event-type": "workflow_job", "x-gitea-signature": signature },
    body: raw,
  });
  await res.arrayBuffer();
  return res.status;
}

const stateOf = async (id: string) => {
  const res = await fetch(`${workers[0]!.url}/v1/assignments/${id}`, { headers: { authorization: `Bearer ${TEST_SECRETS.DISPATCH_TOKEN}` } });
  return res.status === 200 ? ((await res.json()) as { state: string }).state : `http ${res.status}`;
};

describe(`${ISOLATES} isolates, one NATS`, () => {
  it(`${N} jobs at capacity ${CAPACITY}: never more live runners than capacity, each job once, no compare-and-set give-up`, { timeout: 300_000 }, async () => {
    const jobs = Array.from({ length: N }, (_, i) => 810_000 + i);
    const ids = jobs.map((j) => `gitea-${j}-1`);
    let ticking = true;
    // Cron fires on every isolate at the same moment.
    const ticks = (async () => {
      while (ticking) {
        await Promise.all(workers.map((w) => w.tick().catch(() => undefined)));
        await new Promise((r) => setTimeout(r, 1_000));
      }
    })();
    const statuses: number[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < N) {
          const i = next++;
          statuses.push(await deliver(workers[i % ISOLATES]!, jobs[i]!));
        }
      }),
    );
    const deadline = Date.now() + 200_000;
    let states: string[] = [];
    while (Date.now() < deadline) {
      states = await Promise.all(ids.map(stateOf));
      if (states.every((s) => s === "completed")) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    ticking = false;
    await ticks;

    expect(statuses.filter((s) => s !== 202)).toEqual([]);
    expect(states.filter((s) => s !== "completed")).toEqual([]);
    const backend = (await control("state")) as { created: number; maxLive: number };
    expect(backend.maxLive, "runners alive at once").toBeLessThanOrEqual(CAPACITY);
    expect(backend.maxLive).toBeGreaterThan(1);
    expect(backend.created, "runners created").toBe(N);
    const gitea = (await (await fetch(`${env.GITEA_URL}/_control/state`)).json()) as { registrations: number };
    expect(gitea.registrations, "Gitea registrations").toBe(N);
    const events = workers.flatMap((w) => w.events as { event: string; reason?: string; message?: string }[]);
    expect(events.filter((e) => /gave up/.test(`${e.reason ?? ""} ${e.message ?? ""}`))).toEqual([]);
    // Work really was spread: every isolate published some of the jobs.
    for (const w of workers) expect((w.events as { event: string }[]).some((e) => e.event === "published")).toBe(true);
  });
});
