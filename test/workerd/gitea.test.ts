// Gitea integration inside workerd: signed webhooks, JIT ephemeral runners, the sweep for missed
// deliveries and stale runners. Against the real nats-server, a fake Gitea and the fake backend.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { giteaSignature } from "../../src/forge/gitea/signature.ts";
import { jetstreamManager } from "@nats-io/jetstream";
import { loadConfig } from "../../src/app/config.ts";
import { withNats } from "../../src/nats/connection.ts";
import { recordKey, recordsBucket } from "../../src/nats/names.ts";
import { bindBucket, readJson } from "../../src/state/kv.ts";
import { TEST_SECRETS } from "../harness/env.ts";
import { storedTexts, streamState } from "../harness/nats.ts";
import { bearer, captureLogs, giteaScene, request, sleep, tick, type Captured } from "../harness/worker.ts";
import { fixturesFor, GITEA_RELEASES, inProgressFixture, queuedFixture } from "../harness/fixtures.ts";

const REGISTRATION_TOKEN = "gitea-registration-token-0000";
let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());

type Env = Record<string, string>;
const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v));

async function deliver(env: Env, payload: unknown, opts: { event?: string; signature?: string | null; raw?: string } = {}) {
  const raw = opts.raw ?? JSON.stringify(payload);
  const signature = opts.signature === undefined ? await giteaSignature(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(raw)) : opts.signature;
  const event = opts.event ?? "workflow_job";
  return request(env, "/v1/gitea/webhook", {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-gitea-event": event,
      "x-gitea-event-type": event,
      "x-gitea-delivery": crypto.randomUUID(),
      ...(signature === null ? {} : { "x-gitea-signature": signature }),
    },
    body: raw,
  });
}

const view = async (env: Env, id: string) => {
  const res = await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) });
  return res.status === 200 ? ((await res.json()) as { state: string; giteaRunnerId: number | null; reason: string | null }) : null;
};
const events = (name: string) => logs.events().filter((e) => e.event === name);

const setup = (overrides: Record<string, unknown> = {}) => giteaScene("1.27.0", overrides);

/** The completed delivery of a job cancelled before any runner took it: no runner, the count it was queued with (any release). */
function cancelledOf<T extends { action: string; workflow_job: Record<string, unknown> }>(queued: T): T {
  const c = clone(queued);
  c.action = "completed";
  Object.assign(c.workflow_job, { status: "completed", conclusion: "cancelled" });
  return c;
}

// Each as Gitea 1.26 (attempts numbered at pickup: a queued job says 0) and 1.27 (per run) send it.
describe.each(GITEA_RELEASES)("on Gitea %s", (release) => {
  const { queued: queuedFixture, inProgress: inProgressFixture, completed: completedFixture } = fixturesFor(release);
  const setup = (overrides: Record<string, unknown> = {}) => giteaScene(release, overrides);

  describe("Gitea webhook", () => {
    it("turns a signed queued job into one assignment and one JIT runner, however often it is delivered", async () => {
      const { env, gitea, backend } = await setup();
      await backend.mode({ readyAfter: 1 }); // pending at first, so later deliveries provision again
      const first = await deliver(env, queuedFixture);
      expect(first.status).toBe(202);
      expect(await first.json()).toEqual({ assignment: "gitea-1187-1", duplicate: false });
      const again = await deliver(env, queuedFixture);
      expect(await again.json()).toEqual({ assignment: "gitea-1187-1", duplicate: true });

      expect(await streamState(env)).toMatchObject({ messages: 1 });
      const g = await gitea.state();
      expect(g.registrations).toBe(1);
      const registered = g.runners[0]!;
      expect(registered).toMatchObject({
        name: "gdr-gitea-1187-1",
        ephemeral: true,
        labels: ["ubuntu-latest:docker://node:20-bookworm", "ubuntu-22.04:docker://node:20-bookworm"],
      });
      expect(JSON.parse(g.requests.find((r) => r.path.endsWith("/Register"))!.body)).toMatchObject({ token: REGISTRATION_TOKEN, ephemeral: true });

      // The backend got the runner's identity (act_runner's .runner file), never the registration token.
      const b = await backend.state();
      expect(b.runners).toHaveLength(1);
      const put = b.requests.find((r) => r.method === "PUT")!;
      const body = JSON.parse(put.body);
      expect(body.runner).toEqual({
        WARNING: expect.any(String),
        id: registered.id,
        uuid: registered.uuid,
        name: "gdr-gitea-1187-1",
        token: registered.token,
        address: env.GITEA_URL,
        labels: registered.labels,
        ephemeral: true,
      });
      expect(body.assignment).toMatchObject({
        id: "gitea-1187-1",
        backend: "pod",
        job: { id: 1187, runId: 311, attempt: 1, repository: "acme/widgets", name: "build" },
      });
      // Later deliveries (the duplicate's eager pass, a tick) reuse the sealed identity: still one registration.
      await sleep(40);
      await tick(env);
      expect(await view(env, "gitea-1187-1")).toMatchObject({ state: "backend_ready", giteaRunnerId: registered.id });
      expect((await gitea.state()).registrations).toBe(1);
      const tokens = (await backend.state()).requests.filter((r) => r.method === "PUT").map((r) => JSON.parse(r.body).runner.token);
      expect(tokens.length).toBeGreaterThanOrEqual(2);
      expect(new Set(tokens)).toEqual(new Set([registered.token]));
    });

    it("refuses a missing or wrong signature with 401 and publishes nothing", async () => {
      const { env, gitea } = await setup();
      expect((await deliver(env, queuedFixture, { signature: null })).status).toBe(401);
      expect((await deliver(env, queuedFixture, { signature: "00".repeat(32) })).status).toBe(401);
      const raw = JSON.stringify(queuedFixture);
      const signedOther = await giteaSignature(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(raw + " "));
      expect((await deliver(env, null, { raw, signature: signedOther })).status).toBe(401);
      const wrongKey = await giteaSignature("another-secret", new TextEncoder().encode(raw));
      expect((await deliver(env, null, { raw, signature: wrongKey })).status).toBe(401);
      expect(await streamState(env)).toMatchObject({ messages: 0 });
      expect(await view(env, "gitea-1187-1")).toBeNull();
      expect((await gitea.state()).registrations).toBe(0);
    });

    it("ignores other events, ping and waiting jobs; answers 413 past WEBHOOK_MAX_BYTES", async () => {
      const { env } = await setup({ WEBHOOK_MAX_BYTES: 4096 });
      expect((await deliver(env, { zen: "hi" }, { event: "ping" })).status).toBe(200);
      expect((await deliver(env, { ref: "refs/heads/main" }, { event: "push" })).status).toBe(202);
      const waiting = clone(queuedFixture);
      waiting.action = "waiting";
      expect(await (await deliver(env, waiting)).json()).toEqual({ ignored: "action waiting" });
      const big = { ...clone(queuedFixture), padding: "x".repeat(5000) };
      expect((await deliver(env, big)).status).toBe(413);
      const bad = clone(queuedFixture) as Record<string, unknown>;
      delete bad.repository;
      const res = await deliver(env, bad);
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ fields: [{ field: "repository" }] });
      expect(await streamState(env)).toMatchObject({ messages: 0 });
    });

    it("keeps the job's head_branch (\"\" for a pull request's run) and the default branch in its record: the cache's scopes", async () => {
      const { env } = await setup();
      const push = { ...clone(queuedFixture.workflow_job), id: 3300, head_branch: "main" };
      const pr = { ...clone(queuedFixture.workflow_job), id: 3301, head_branch: "" };
      for (const job of [push, pr]) expect((await deliver(env, { ...clone(queuedFixture), workflow_job: job })).status).toBe(202);
      const config = loadConfig(env);
      const jobs = await withNats(config, async (h) => {
        const kv = await bindBucket(h, recordsBucket(config));
        const read = async (id: string) => (await readJson<{ job: Record<string, unknown> }>(kv, recordKey(id)))?.value.job;
        return [await read("gitea-3300-1"), await read("gitea-3301-1")];
      });
      expect(jobs).toMatchObject([
        { repository: "acme/widgets", branch: "main", defaultBranch: "main" },
        { repository: "acme/widgets", branch: "", defaultBranch: "main" },
      ]);
    });

    it("ignores a job no route serves, with a no_route event", async () => {
      const { env } = await setup();
      const mac = clone(queuedFixture);
      mac.workflow_job.labels = ["macos-14"];
      expect(await (await deliver(env, mac)).json()).toEqual({ ignored: "no_route" });
      expect(events("no_route")).toEqual([expect.objectContaining({ assignment: "gitea-1187-1" })]);
      expect(await streamState(env)).toMatchObject({ messages: 0 });
    });
  });

  describe("runner lifecycle from Gitea's events", () => {
    it("in_progress claims and acks; completed releases the slot and tears the runner down everywhere", async () => {
      const { env, gitea, backend } = await setup({ CAPACITY_POD: 1 });
      await deliver(env, queuedFixture);
      const runnerId = (await gitea.state()).runners[0]!.id;
      const started = clone(inProgressFixture);
      started.workflow_job.runner_id = runnerId;
      expect(await (await deliver(env, started)).json()).toEqual({ claimed: "gitea-1187-1" });
      expect(events("acked").map((e) => e.assignment)).toEqual(["gitea-1187-1"]);
      expect(await streamState(env)).toMatchObject({ messages: 0, ackPending: 0 });

      const done = clone(completedFixture);
      done.workflow_job.runner_id = runnerId;
      expect(await (await deliver(env, done)).json()).toEqual({ completed: "gitea-1187-1" });
      expect(await view(env, "gitea-1187-1")).toMatchObject({ state: "completed" });
      expect((await backend.state()).runners).toHaveLength(0);
      expect((await gitea.state()).runners).toHaveLength(0);
      expect((await gitea.state()).requests.filter((r) => r.method === "DELETE").map((r) => r.path)).toEqual([`/api/v1/admin/actions/runners/${runnerId}`]);

      // The slot is free again: capacity 1 admits the next job at once.
      const next = clone(queuedFixture);
      next.workflow_job.id = 1188;
      await deliver(env, next);
      expect(await view(env, "gitea-1188-1")).toMatchObject({ state: "backend_ready" });
    });

    it("counts claims by runner: the runner of one job may take another; a cancel spares a claimed runner", async () => {
      const { env, gitea, backend } = await setup();
      const a = clone(queuedFixture);
      const b = clone(queuedFixture);
      b.workflow_job.id = 2000;
      await deliver(env, a);
      await deliver(env, b);
      const runnerOfA = (await gitea.state()).runners.find((r) => r.name === "gdr-gitea-1187-1")!;
      const bTakenByA = clone(inProgressFixture);
      bTakenByA.workflow_job.id = 2000;
      bTakenByA.workflow_job.runner_name = "gdr-gitea-1187-1";
      bTakenByA.workflow_job.runner_id = runnerOfA.id;
      expect(await (await deliver(env, bTakenByA)).json()).toEqual({ claimed: "gitea-1187-1" });
      expect(await view(env, "gitea-1187-1")).toMatchObject({ state: "claimed" });
      expect(await view(env, "gitea-2000-1")).toMatchObject({ state: "backend_ready" });
      const foreign = clone(inProgressFixture);
      foreign.workflow_job.runner_name = "someone-elses-runner";
      expect(await (await deliver(env, foreign)).json()).toEqual({ ignored: "runner is not ours" });

      // Job 1187 goes away before any runner took it: its assignment's runner is busy with job
      // 2000, so that assignment stays claimed and its runner stays up; the runner made for job
      // 2000, which stood in for job 1187 since the swap, is the one no job needs now: it goes.
      const cancelled = cancelledOf(queuedFixture);
      expect(await (await deliver(env, cancelled)).json()).toEqual({ cancelled: "gitea-2000-1" });
      await sleep(50);
      expect(await view(env, "gitea-1187-1")).toMatchObject({ state: "claimed" });
      expect(await view(env, "gitea-2000-1")).toMatchObject({ state: "terminated" });
      expect((await backend.state()).runners.map((r) => r.id)).toEqual(["gitea-1187-1"]);
      expect((await gitea.state()).runners.map((r) => r.id)).toEqual([runnerOfA.id]);
    });

    it("a job cancelled before pickup is termed and its runner removed from the backend and Gitea", async () => {
      const { env, gitea, backend } = await setup();
      await deliver(env, queuedFixture);
      expect((await gitea.state()).runners).toHaveLength(1);
      const cancelled = cancelledOf(queuedFixture);
      expect(await (await deliver(env, cancelled)).json()).toEqual({ cancelled: "gitea-1187-1" });
      expect(await view(env, "gitea-1187-1")).toMatchObject({ state: "terminated", reason: "cancelled" });
      expect((await backend.state()).runners).toHaveLength(0);
      expect((await gitea.state()).runners).toHaveLength(0);
      await sleep(40);
      await tick(env);
      expect(events("already_done")).toEqual([expect.objectContaining({ assignment: "gitea-1187-1", reason: "cancelled" })]);
      expect(await streamState(env)).toMatchObject({ messages: 0, ackPending: 0 });
    });
    it("a job cancelled while its pass registers a runner gets no workload: the registration is stored before the backend is asked", async () => {
      const { env, gitea, backend } = await setup();
      // Gitea is slow to register the job's runner; the cancel lands meanwhile.
      await gitea.delay(0, 1_500);
      const queued = deliver(env, queuedFixture);
      const pod = async () =>
        (
          (await (await request(env, "/v1/status", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as {
            backends: { backend: string; slotsInUse: number; registering: number }[];
          }
        ).backends.find((b) => b.backend === "pod")!;
      // Admitted, with its registration reservation: the pass has read the record and is registering.
      let registering = 0;
      for (let i = 0; i < 100 && !registering; i++) {
        registering = (await pod()).registering;
        if (!registering) await sleep(10);
      }
      expect(registering).toBe(1);
      const cancelled = cancelledOf(queuedFixture);
      expect(await (await deliver(env, cancelled)).json()).toEqual({ cancelled: "gitea-1187-1" });
      await queued;
      expect(events("runner_registered")).toHaveLength(1);
      expect((await backend.state()).requests.filter((r) => r.method === "PUT")).toEqual([]);
      expect(events("already_done")).toEqual([expect.objectContaining({ assignment: "gitea-1187-1", reason: "cancelled" })]);
      // Its slot went back, and the next sweep deletes the runner registered for nothing.
      expect(await pod()).toMatchObject({ slotsInUse: 0, registering: 0 });
      await gitea.delay(0);
      expect((await gitea.state()).runners).toHaveLength(1);
      await tick(env);
      expect((await gitea.state()).runners).toHaveLength(0);
      expect(await streamState(env)).toMatchObject({ messages: 0, ackPending: 0 });
    });
  });

  describe("sweep", () => {
    it("does not publish again a job it knows, even one whose message waits behind MaxAckPending", async () => {
      // First come, first served: MaxAckPending is the capacity (with fair share the window is wider).
      const { env, gitea } = await setup({ CAPACITY_POD: 1, FAIR_SHARE: "off" });
      // A duplicate window of 200 ms stands for the hour after which a second publish is stored.
      await withNats(loadConfig(env), async (h) => {
        const jsm = await jetstreamManager(h.nc);
        const { config } = await jsm.streams.info(env.ASSIGNMENT_STREAM!);
        await jsm.streams.update(env.ASSIGNMENT_STREAM!, { ...config, duplicate_window: 200_000_000 });
      });
      const a = { ...clone(queuedFixture.workflow_job), id: 3100, status: "queued" };
      const b = { ...clone(queuedFixture.workflow_job), id: 3101, status: "queued" };
      await deliver(env, { ...clone(queuedFixture), workflow_job: a });
      await deliver(env, { ...clone(queuedFixture), workflow_job: b });
      // Capacity 1 is MaxAckPending 1: b's message is not delivered while a's runner waits.
      expect(await view(env, "gitea-3101-1")).toMatchObject({ state: "received" });
      await gitea.jobs([a, b]);
      for (let i = 0; i < 3; i++) {
        await sleep(250);
        await tick(env);
      }
      expect(events("published").map((e) => e.assignment)).toEqual(["gitea-3100-1", "gitea-3101-1"]);
      expect(events("recovered")).toEqual([]);
      expect(await streamState(env)).toMatchObject({ messages: 2 });
    });

    it("finds a job whose webhook never arrived, and deletes runners nobody needs", async () => {
      const { env, gitea, backend } = await setup();
      const lost = { ...clone(queuedFixture.workflow_job), id: 3001, status: "queued" };
      const blocked = { ...clone(queuedFixture.workflow_job), id: 3002, status: "waiting" };
      await gitea.jobs([lost, blocked]);
      await gitea.runners([
        { id: 900, name: "gdr-gitea-9999-1" },
        { id: 901, name: "not-ours" },
      ]);
      await tick(env);
      expect(events("recovered").map((e) => e.assignment)).toEqual(["gitea-3001-1"]);
      expect(await view(env, "gitea-3001-1")).toMatchObject({ state: "backend_ready" });
      expect((await backend.state()).runners.map((r) => r.id)).toEqual(["gitea-3001-1"]);
      const g = await gitea.state();
      expect(g.runners.map((r) => r.name).sort()).toEqual(["gdr-gitea-3001-1", "not-ours"]);
      expect(g.requests.find((r) => r.path.endsWith("/jobs"))).toMatchObject({
        search: "?status=queued&page=1&limit=50",
        headers: { authorization: "token gitea-api-token-0000" },
      });
      // Known now: the next tick publishes nothing new.
      await tick(env);
      expect(events("recovered")).toHaveLength(1);
    });

    it("deletes the runner of an assignment never claimed past CLAIM_TIMEOUT_MS plus grace, and registers afresh", async () => {
      const { env, gitea } = await setup({ CLAIM_TIMEOUT_MS: 1_000, CLEANUP_GRACE_MS: 0 });
      await deliver(env, queuedFixture);
      const firstId = (await gitea.state()).runners[0]!.id;
      await sleep(1_100);
      await tick(env);
      expect(events("runner_deleted")).toEqual([expect.objectContaining({ assignment: "gitea-1187-1", reason: "delete_and_forget" })]);
      // The same tick's pass, after the sweep, registers afresh.
      const g = await gitea.state();
      expect(g.registrations).toBe(2);
      expect(g.runners.map((r) => r.id)).not.toContain(firstId);
      expect((await view(env, "gitea-1187-1"))?.giteaRunnerId).not.toBe(firstId);
    });

    it("turns itself off for the invocation on Gitea older than 1.25, and reconciliation goes on", async () => {
      const { env, gitea } = await setup();
      await gitea.version("1.24.6");
      await deliver(env, queuedFixture);
      await sleep(40);
      await tick(env);
      expect(events("gitea_sweep_disabled")).toHaveLength(1);
      expect(events("reconcile_summary").at(-1)).toMatchObject({ fetched: 1 });
    });
  });
});

it("never lets the registration token reach NATS, a log line or a backend", async () => {
  const { env, gitea, backend } = await setup({ GITEA_API_TOKEN: "", GITEA_RUNNER_REGISTRATION_TOKEN: REGISTRATION_TOKEN });
  await deliver(env, queuedFixture);
  const queuedTexts = await storedTexts(env); // the message, the record, the admission leases
  expect(queuedTexts.length).toBeGreaterThanOrEqual(3);
  const started = clone(inProgressFixture);
  started.workflow_job.runner_id = (await gitea.state()).runners[0]!.id;
  expect(await (await deliver(env, started)).json()).toEqual({ claimed: "gitea-1187-1" });
  const needles = [REGISTRATION_TOKEN, TEST_SECRETS.WEBHOOK_SECRET, TEST_SECRETS.RUNNER_IDENTITY_KEY];
  const runnerToken = (await gitea.state()).runners[0]!.token;
  const texts = [...queuedTexts, ...(await storedTexts(env))];
  // The runner's own token is sealed at rest too: only the backend ever sees it.
  for (const text of texts) for (const s of [...needles, runnerToken]) expect(text).not.toContain(s);
  for (const line of logs.lines) for (const s of [...needles, runnerToken]) expect(line).not.toContain(s);
  const b = await backend.state();
  expect(b.requests.length).toBeGreaterThan(0);
  for (const r of b.requests) expect(JSON.stringify(r)).not.toContain(REGISTRATION_TOKEN);
  expect((await gitea.state()).registrations).toBe(1);
});
