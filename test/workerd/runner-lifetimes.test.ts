// Runner lifetimes, against the real nats-server, the fake Gitea and fake act_runners: a runner that
// never boots is asked for again with a back-off, then given up on (the job stays queued in Gitea
// and is published again later); a runner at its pool's maxLifetimeMs is taken away mid-job. Time
// is moved by rewriting the record's clock fields, as the cron would find them hours later.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
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
const LABELS = ["ubuntu-latest:docker://node:20-bookworm"];
const events = (name: string) => logs.events().filter((e) => e.event === name);

async function setup(pool: Record<string, unknown>, runner: Record<string, unknown>) {
  const env = poolsTestEnv(nats, backendUrl, giteaUrl, [{ name: "small", backend: "pod", labels: LABELS, ...pool }], {
    RETRY_DELAY_MS: 30,
    CAPACITY_VM: 0,
    METRICS_TOKEN,
  });
  await provisionEnv(env);
  const gitea = giteaControl(env);
  await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
  await backendControl(env).mode({ runner: true, fetchIntervalMs: 100, ...runner });
  return { env, gitea, backend: backendControl(env) };
}

const record = (env: Env, id: string) => createDispatcher({ config: loadConfig(env) }).withState((s) => s.records.get(id));
/** Moves a record's clocks back: what the cron would find that much later. */
const travel = (env: Env, id: string, change: (r: AssignmentRecord) => AssignmentRecord) =>
  createDispatcher({ config: loadConfig(env) }).withState((s) => s.records.update(id, change));
const METRICS_TOKEN = "metrics-token-0123456789abcdef";
const ago = (ms: number) => new Date(Date.now() - ms).toISOString();

async function until(done: () => Promise<boolean>, step: () => Promise<unknown>, timeoutMs = 20_000) {
  const end = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > end) throw new Error("timed out");
    await step();
    await sleep(50);
  }
}

describe("runner lifetimes", () => {
  it("a runner that never boots is torn down and asked for again, then given up on; the job is published again later", async () => {
    const { env, gitea, backend } = await setup({ bootTimeoutMs: 10_000 }, { bootMs: 1e9 });
    const { jobs } = await gitea.queue([{ labels: ["ubuntu-latest"] }]);
    const id = `gitea-${jobs[0]}-1`;
    const step = async () => {
      await gitea.deliver();
      await tick(env);
    };
    for (const attempt of [1, 2, 3]) {
      await until(async () => (await backend.state()).created === attempt && (await record(env, id))?.askedAt !== undefined, step);
      // Not yet: 10 s is the pool's boot timeout, and 9 s have passed.
      await travel(env, id, (r) => ({ ...r, askedAt: ago(9_000) }));
      await tick(env);
      expect(events("boot_timeout")).toHaveLength(attempt - 1);
      await travel(env, id, (r) => ({ ...r, askedAt: ago(10_500) }));
      await until(async () => events("boot_timeout").length === attempt, step);
      expect((await backend.state()).deleted).toBe(attempt);
    }
    expect(events("boot_gave_up").map((e) => e.assignment)).toEqual([id]);
    const given = (await record(env, id))!;
    expect(given).toMatchObject({ state: "terminated", bootAttempts: 3, reason: "its runner did not boot in 3 attempts" });
    const metrics = await (await request(env, "/metrics", { headers: bearer(METRICS_TOKEN) })).text();
    expect(metrics).toContain('gdr_pool_boot_give_ups_total{pool="small"} 1');
    // Its Gitea runner goes with the sweep; the job is still queued there.
    await tick(env);
    expect((await gitea.state()).runners).toEqual([]);
    expect((await gitea.actions()).jobs[0]!.status).toBe("queued");
    // Fourteen minutes on, the sweep leaves it; fifteen, it publishes the job again, afresh.
    await travel(env, id, (r) => ({ ...r, gaveUpAt: ago(14 * 60_000) }));
    await tick(env);
    expect((await record(env, id))!.state).toBe("terminated");
    await travel(env, id, (r) => ({ ...r, gaveUpAt: ago(15 * 60_000 + 1_000) }));
    await until(async () => (await backend.state()).created === 4, step);
    const again = (await record(env, id))!;
    expect(again.state).not.toBe("terminated");
    expect(again.bootAttempts).toBeUndefined();
    expect(again.receivedAt > given.receivedAt).toBe(true);
  });

  it("a runner at its pool's maxLifetimeMs is taken away mid-job, from the backend and from Gitea", async () => {
    const { env, gitea, backend } = await setup({ maxLifetimeMs: 60_000, bootTimeoutMs: 10_000 }, { bootMs: 100, jobMs: 1e9 });
    const { jobs } = await gitea.queue([{ labels: ["ubuntu-latest"] }]);
    const id = `gitea-${jobs[0]}-1`;
    await until(
      async () => (await record(env, id))?.state === "claimed",
      async () => {
        await gitea.deliver();
        await tick(env);
      },
    );
    await travel(env, id, (r) => ({ ...r, runner: { ...r.runner!, registeredAt: ago(59_000) } }));
    await tick(env);
    expect(events("lifetime_reached")).toEqual([]);
    await travel(env, id, (r) => ({ ...r, runner: { ...r.runner!, registeredAt: ago(61_000) } }));
    await tick(env);
    expect(events("lifetime_reached").map((e) => e.assignment)).toEqual([id]);
    expect((await record(env, id))!.state).toBe("terminated");
    expect((await backend.state()).runners).toEqual([]);
    expect((await gitea.state()).runners).toEqual([]);
  });
});
