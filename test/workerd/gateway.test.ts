// The NATS gateway (src/gateway/): the request path on one warm connection held by a Durable
// Object, and the faults it must survive: a reset mid-burst, a silent hang, an eviction, and the
// object being unreachable. NATS goes through the counting proxy, which also makes the faults.
import { createExecutionContext, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { env as bindings } from "cloudflare:workers";
import { describe, expect, inject, it } from "vitest";
import worker from "../../src/index.ts";
import { GATEWAY_BINDING, gatewayName } from "../../src/gateway/client.ts";
import { giteaTestEnv, provisionEnv, uniqueName } from "../harness/env.ts";
import { assignmentViews, deliverJob, deliverJobTimed, inParallel, withJob, type JobView } from "../harness/jobs.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { loadConfig } from "../../src/app/config.ts";
import { streamState } from "../harness/nats.ts";
import { backendControl, captureLogs, giteaControl, request, sleep, tickUntil } from "../harness/worker.ts";
import { inProgressFixture, queuedFixture } from "../harness/fixtures.ts";

const proxy = inject("natsProxyUrl");
const control = proxy.replace("ws://", "http://");
const proxyCounts = async (tag: string) => (await (await fetch(`${control}/_counts/${tag}`)).json()) as { connections: number; pub: number };
const fault = async (what: "reset" | "hang" | "resume", tag: string, newToo = false) =>
  void (await fetch(`${control}/_${what}/${tag}${newToo ? "?new=1" : ""}`, { method: "POST" })).arrayBuffer();

/** An environment whose NATS goes through the proxy under `tag`; provisioned directly. */
async function proxiedEnv(tag: string, overrides: Record<string, unknown> = {}) {
  const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"), { RETRY_DELAY_MS: 50, CAPACITY_POD: 200, ...overrides });
  await provisionEnv(env);
  return { ...env, NATS_URL: `${proxy}/${tag}` };
}

/** Delivers queued webhooks for `jobs`, `concurrency` at once; status and latency per job. */
async function deliverAll(env: Record<string, string>, jobs: number[], concurrency: number, onAnswer?: (done: number) => Promise<void>) {
  const answers = new Map<number, { status: number; ms: number }>();
  await inParallel(jobs, concurrency, async (job) => {
    // The time to the answer: the work a webhook leaves in the background (an eager pass) is not waited for.
    const { status, answerMs: ms } = await deliverJobTimed(env, withJob(queuedFixture, job));
    answers.set(job, { status, ms });
    await onAnswer?.(answers.size);
  });
  return answers;
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

describe("NATS gateway", () => {
  it("writes a job's start-up time after answering its in_progress, on its one connection; without it, the invocation does", { timeout: 60_000 }, async () => {
    for (const gateway of ["on", "off"] as const) {
      const tag = uniqueName(`gwstart${gateway}`);
      const env = await proxiedEnv(tag, { NATS_GATEWAY: gateway });
      const jobs = range(gateway === "on" ? 812_000 : 813_000, 3);
      await deliverAll(env, jobs, 1);
      const ids = jobs.map((j) => `gitea-${j}-1`);
      let views = await assignmentViews(env, ids);
      for (let i = 0; i < 100 && [...views.values()].some((v) => typeof v !== "object" || !v.giteaRunnerId); i++) {
        await sleep(100);
        views = await assignmentViews(env, ids);
      }
      const connections = (await proxyCounts(tag)).connections;
      for (const job of jobs) {
        const v = views.get(`gitea-${job}-1`) as JobView;
        expect((await deliverJob(env, withJob(inProgressFixture, job, { runner_id: v.giteaRunnerId, runner_name: `gdr-gitea-${job}-1` }))).status).toBe(200);
      }
      const direct = createDispatcher({ config: loadConfig({ ...env, NATS_URL: inject("natsWsUrl") }) });
      const count = async () => (await direct.withState(({ startups }) => startups.read(["route-0"]))).get("route-0")?.count ?? 0;
      for (let i = 0; i < 50 && (await count()) < 3; i++) await sleep(100);
      expect(await count(), `start-ups counted, gateway ${gateway}`).toBe(3);
      // On: the gateway's connection only. Off: each in_progress's invocation opens its own.
      if (gateway === "on") expect((await proxyCounts(tag)).connections).toBe(connections);
      else expect((await proxyCounts(tag)).connections).toBeGreaterThanOrEqual(connections + 3);
    }
  });

  it("serves webhooks, eager passes, claims and completes on one connection; without it, each request opens one", { timeout: 60_000 }, async () => {
    const logs = captureLogs();
    try {
      const tag = uniqueName("gw");
      const env = await proxiedEnv(tag);
      const answers = await deliverAll(env, range(810_000, 20), 4);
      expect([...answers.values()].every((a) => a.status === 202)).toBe(true);
      const backend = backendControl(env);
      // The passes right after each webhook, run in the gateway, provision every runner: no cron tick.
      for (let i = 0; i < 100 && (await backend.state()).runners.length < 20; i++) await sleep(100);
      const runners = (await backend.state()).runners;
      expect(runners).toHaveLength(20);
      for (const r of runners) {
        const auth = { method: "POST", headers: { authorization: `Bearer ${r.claimToken}` } };
        expect((await request(env, `/v1/assignments/${r.id}/claim`, auth)).status).toBe(200);
        expect((await request(env, `/v1/assignments/${r.id}/complete`, auth)).status).toBe(200);
      }
      expect((await proxyCounts(tag)).connections).toBe(1);
      expect(logs.events().filter((e) => e.event === "gateway_fallback")).toEqual([]);
      // The events the gateway's calls produced are written by the invocation that made them.
      expect(logs.events().filter((e) => e.event === "published")).toHaveLength(20);
      // The passes in the object share one registration token: one fetch for 20 registrations.
      const tokenFetches = async (e: Record<string, string>) =>
        (await giteaControl(e).state()).requests.filter((r) => r.path.endsWith("/runners/registration-token")).length;
      expect((await giteaControl(env).state()).registrations).toBe(20);
      expect(await tokenFetches(env)).toBe(1);

      const offTag = uniqueName("gwoff");
      const off = await proxiedEnv(offTag, { NATS_GATEWAY: "off" });
      await deliverAll(off, range(811_000, 5), 1);
      expect((await proxyCounts(offTag)).connections).toBeGreaterThanOrEqual(5);
      // Without the object, each invocation fetches its own.
      expect(await tokenFetches(off)).toBe(5);
    } finally {
      logs.restore();
    }
  });

  it("webhooks in flight together share their eager passes, and every job still gets its runner without a tick", { timeout: 60_000 }, async () => {
    const logs = captureLogs();
    try {
      const tag = uniqueName("gwburst");
      const env = await proxiedEnv(tag);
      const N = 16;
      const answers = await deliverAll(env, range(815_000, N), N);
      expect([...answers.values()].every((a) => a.status === 202)).toBe(true);
      const backend = backendControl(env);
      for (let i = 0; i < 100 && (await backend.state()).runners.length < N; i++) await sleep(100);
      expect(new Set((await backend.state()).runners.map((r) => r.id)).size).toBe(N);
      expect((await backend.state()).created).toBe(N);
      // One pass at a time per backend, one more for what came meanwhile: far fewer than one per webhook.
      const passes = logs.events().filter((e) => e.event === "reconcile_summary" && e.trigger === "webhook");
      expect(passes.length).toBeGreaterThan(0);
      expect(passes.length).toBeLessThan(N / 2);
      expect(passes.reduce((n, s) => n + Number(s.fetched), 0)).toBeGreaterThanOrEqual(N);
    } finally {
      logs.restore();
    }
  });

  it("a connection reset mid-burst fails no request: publishes are retried on a new connection, nothing lost or doubled", { timeout: 120_000 }, async () => {
    const logs = captureLogs();
    try {
      const tag = uniqueName("gwreset");
      const N = 80;
      const env = await proxiedEnv(tag, { RECONCILE_BUDGET_MS: 2_000, ACK_WAIT_MS: 12_000 });
      const jobs = range(820_000, N);
      const answers = await deliverAll(env, jobs, 12, async (done) => {
        if (done === 20 || done === 50) await fault("reset", tag);
      });
      expect([...answers.entries()].filter(([, a]) => a.status !== 202)).toEqual([]);
      expect((await proxyCounts(tag)).connections).toBeGreaterThanOrEqual(3);
      expect((await streamState(env)).messages).toBe(N);

      const backend = backendControl(env);
      await tickUntil(env, async () => (await backend.state()).runners.length >= N, { timeoutMs: 60_000, pauseMs: 500 });
      expect((await backend.state()).created).toBe(N);
      expect(new Set((await backend.state()).runners.map((r) => r.id)).size).toBe(N);
      expect((await giteaControl(env).state()).registrations).toBe(N);
    } finally {
      logs.restore();
    }
  });

  it(
    "a silent hang: no request waits past the bound; the dead connection is replaced, and what was refused is not half-written",
    { timeout: 60_000 },
    async () => {
      const logs = captureLogs();
      try {
        const tag = uniqueName("gwhang");
        const env = await proxiedEnv(tag);
        expect((await deliverAll(env, [830_000], 1)).get(830_000)?.status).toBe(202);
        // The socket stays open and nothing comes back; new connections get through.
        await fault("hang", tag);
        const during = await deliverAll(env, range(830_001, 12), 12);
        const ms = [...during.values()].map((a) => a.ms);
        expect(Math.max(...ms)).toBeLessThan(2_600);
        expect([...during.values()].every((a) => a.status === 202 || a.status === 503)).toBe(true);
        expect((await proxyCounts(tag)).connections).toBe(2);
        const after = await deliverAll(env, range(830_100, 5), 5);
        expect([...after.values()].every((a) => a.status === 202 && a.ms < 1_000)).toBe(true);
        expect((await proxyCounts(tag)).connections).toBe(2);

        // Everything hangs, new connections too: every answer is a 503 within the bound, and none queued anything.
        const before = (await streamState(env)).messages;
        await fault("hang", tag, true);
        const dead = await deliverAll(env, range(830_200, 8), 8);
        expect([...dead.values()].map((a) => a.status)).toEqual(Array(8).fill(503));
        expect(Math.max(...[...dead.values()].map((a) => a.ms))).toBeLessThan(2_600);
        expect((await streamState({ ...env, NATS_URL: inject("natsWsUrl") })).messages).toBe(before);
        await fault("resume", tag);
        let recovered = 0;
        for (let i = 0; i < 30 && recovered !== 202; i++) {
          recovered = (await deliverJob(env, withJob(queuedFixture, 830_300))).status;
          if (recovered !== 202) await sleep(200);
        }
        expect(recovered).toBe(202);
        // Gitea does not retry; the sweep would. Delivered again, every refused job is queued once.
        const refused = [...during, ...dead].filter(([, a]) => a.status === 503).map(([job]) => job);
        await deliverAll(env, refused, 4);
        expect((await streamState({ ...env, NATS_URL: inject("natsWsUrl") })).messages).toBe(1 + 12 + 5 + 8 + 1);
      } finally {
        logs.restore();
      }
    },
  );

  it("a reset object (a deploy, a crash, an eviction) reconnects on the next request", { timeout: 30_000 }, async () => {
    const tag = uniqueName("gwevict");
    const env = await proxiedEnv(tag);
    expect((await deliverAll(env, [840_000], 1)).get(840_000)?.status).toBe(202);
    const ns = (bindings as unknown as Record<string, DurableObjectNamespace>)[GATEWAY_BINDING]!;
    // Graceful eviction waits for an idle object, which one holding a WebSocket never is; a reset
    // (what a deploy or a crash does) throws the instance away with its connection.
    const reset = runInDurableObject(ns.get(ns.idFromName(gatewayName(0))), (_instance, state) => state.abort("test: reset"));
    await expect(reset).rejects.toMatchObject({ durableObjectReset: true });
    expect((await deliverAll(env, [840_001], 1)).get(840_001)?.status).toBe(202);
    expect((await proxyCounts(tag)).connections).toBe(2);
    expect((await streamState({ ...env, NATS_URL: inject("natsWsUrl") })).messages).toBe(2);
  });

  it("an unreachable gateway: the invocation makes the call on its own connection, and says so", { timeout: 30_000 }, async () => {
    const logs = captureLogs();
    try {
      const env = await proxiedEnv(uniqueName("gwdown"));
      const broken = {
        idFromName: (name: string) => ({ name }),
        get: () => ({ call: () => Promise.reject(new Error("Durable Object reset because its code was updated.")) }),
      };
      const raw = JSON.stringify(withJob(queuedFixture, 850_000));
      const { giteaSignature } = await import("../../src/forge/gitea/signature.ts");
      const { TEST_SECRETS } = await import("../harness/env.ts");
      const headers = {
        "content-type": "application/json",
        "x-gitea-event-type": "workflow_job",
        "x-gitea-signature": await giteaSignature(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(raw)),
      };
      const ctx = createExecutionContext();
      const res = await worker.fetch(
        new Request("https://dispatch.example.org/v1/gitea/webhook", { method: "POST", headers, body: raw }),
        { ...env, [GATEWAY_BINDING]: broken },
        ctx,
      );
      await waitOnExecutionContext(ctx);
      expect(res.status).toBe(202);
      expect(await res.json()).toMatchObject({ assignment: "gitea-850000-1", duplicate: false });
      // The webhook's call, its record and its eager pass all fell back; the runner was provisioned anyway.
      expect(logs.events().filter((e) => e.event === "gateway_fallback").length).toBe(3);
      expect((await streamState({ ...env, NATS_URL: inject("natsWsUrl") })).messages).toBe(1);
      expect((await backendControl(env).state()).runners.map((r) => r.id)).toEqual(["gitea-850000-1"]);
    } finally {
      logs.restore();
    }
  });
});

// A claim's pass waits for the claimed runner's message to come back from its nak delay; a
// webhook's does not. Merged into a webhook pass that is busy (its backend call hangs), the claim's
// message would wait for that pass and the cron tick. One object, and three.
describe.each([1, 3])("a claim while webhook passes are busy (NATS_GATEWAY_SHARDS=%i)", (shards) => {
  it("has its message acked within a few seconds, without a tick", { timeout: 60_000 }, async () => {
    const logs = captureLogs();
    try {
      const env = await proxiedEnv(uniqueName("gwc"), { RETRY_DELAY_MS: 500, NATS_GATEWAY_SHARDS: shards });
      const backend = backendControl(env);
      const first = 812_000 + shards * 100;
      expect((await deliverJob(env, withJob(queuedFixture, first))).status).toBe(202);
      const runner = (await backend.state()).runners.find((r) => r.id === `gitea-${first}-1`)!;
      expect(runner).toBeDefined();
      // Four more webhooks whose passes each hang 8 s in the backend: every pass slot is taken.
      await backend.mode({ token: "backend-token", delayMs: 8_000 });
      const busy = range(first + 1, 4).map(async (job, i) => {
        await sleep(i * 150);
        return deliverJob(env, withJob(queuedFixture, job));
      });
      const puts = async () => (await backend.state()).requests.filter((r) => r.method === "PUT" && !r.path.endsWith(`/gitea-${first}-1`)).length;
      for (let i = 0; i < 100 && (await puts()) < 4; i++) await sleep(50);
      expect(await puts()).toBe(4);

      const started = Date.now();
      expect(
        (await request(env, `/v1/assignments/${runner.id}/claim`, { method: "POST", headers: { authorization: `Bearer ${runner.claimToken}` } })).status,
      ).toBe(200);
      const acked = () => logs.events().some((e) => e.event === "acked" && e.assignment === runner.id);
      while (!acked() && Date.now() - started < 4_000) await sleep(50);
      expect(acked()).toBe(true);
      expect(Date.now() - started).toBeLessThan(4_000);
      await Promise.all(busy);
    } finally {
      logs.restore();
    }
  });
});
