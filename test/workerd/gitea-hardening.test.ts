// The Gitea integration's guards, each tested by its near misses: a runner is who Gitea says it
// is (its id, not its name), odd runner names stop nothing, a second attempt is a new assignment,
// a delivery older than its record may be a replay, and both signature headers are checked.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { giteaSignature } from "../../src/forge/gitea/signature.ts";
import { giteaTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { completedFixture, inProgressFixture, queuedFixture } from "../harness/fixtures.ts";
import { deliverJob, withJob } from "../harness/jobs.ts";
import { streamState } from "../harness/nats.ts";
import { backendControl, bearer, captureLogs, giteaControl, request, sleep, tick, tickUntil, type Captured } from "../harness/worker.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const giteaUrl = inject("giteaUrl");
type Env = Record<string, string>;

let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());
const events = (name: string) => logs.events().filter((e) => e.event === name);

async function setup(overrides: Record<string, unknown> = {}) {
  const env = giteaTestEnv(nats, backendUrl, giteaUrl, { RETRY_DELAY_MS: 30, ...overrides });
  await provisionEnv(env);
  return { env, gitea: giteaControl(env), backend: backendControl(env) };
}
const stateOf = async (env: Env, id: string) => {
  const res = await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) });
  return res.status === 200 ? ((await res.json()) as { state: string }).state : `http ${res.status}`;
};
const holders = (env: Env) => createDispatcher({ config: loadConfig(env) }).withState(({ admission }) => admission.holders("pod"));
const runnerOf = async (env: Env, name: string) => (await giteaControl(env).state()).runners.find((r) => r.name === name)!.id;

describe("a claim or completion by webhook counts only from the runner registered for the assignment", () => {
  it("ignores another repository's runner named after our assignment, and near misses of the id", async () => {
    const { env, gitea, backend } = await setup();
    await deliverJob(env, withJob(queuedFixture, 500));
    const ours = await runnerOf(env, "gdr-gitea-500-1");
    const other = { repository: { ...queuedFixture.repository, full_name: "mallory/tools" } };
    const impostor = (fixture: typeof inProgressFixture, runnerId: number | null | undefined) => {
      const p = { ...withJob(fixture, 9000, { runner_name: "gdr-gitea-500-1", runner_id: runnerId }), ...other };
      if (runnerId === undefined) delete (p.workflow_job as { runner_id?: number }).runner_id;
      return p;
    };
    for (const [i, id] of [777, ours + 1, ours - 1, 0, null, undefined].entries()) {
      expect(await deliverJob(env, impostor(inProgressFixture, id))).toEqual({
        status: 200,
        body: { ignored: "runner is not the one registered for gitea-500-1" },
      });
      const done = await deliverJob(env, impostor(completedFixture, id));
      expect(done.status).toBe(200);
      // Job 9000 was never queued here: the first completion leaves its tombstone, the rest find it.
      expect(done.body).toEqual(i === 0 ? { tombstone: "gitea-9000-1" } : { ignored: "nothing to cancel for gitea-9000-1" });
    }
    expect(events("runner_mismatch")).toHaveLength(12);
    await sleep(50);
    expect(await stateOf(env, "gitea-500-1")).toBe("backend_ready");
    expect(await holders(env)).toEqual(["gitea-500-1"]);
    expect((await backend.state()).runners.map((r) => r.id)).toEqual(["gitea-500-1"]);
    expect((await gitea.state()).runners.map((r) => r.id)).toEqual([ours]);

    // The registered runner claims; an impostor still cannot complete it.
    expect(await deliverJob(env, withJob(inProgressFixture, 500, { runner_id: ours, runner_name: "gdr-gitea-500-1" }))).toEqual({
      status: 200,
      body: { claimed: "gitea-500-1" },
    });
    expect((await deliverJob(env, impostor(completedFixture, 777))).status).toBe(200);
    expect(await stateOf(env, "gitea-500-1")).toBe("claimed");
    expect(await holders(env)).toEqual(["gitea-500-1"]);
    expect(await deliverJob(env, withJob(completedFixture, 500, { runner_id: ours, runner_name: "gdr-gitea-500-1" }))).toEqual({
      status: 200,
      body: { completed: "gitea-500-1" },
    });
    expect(await holders(env)).toEqual([]);
  });

  it("completes, and frees the slot of, a job our runner ran whose in_progress never came", async () => {
    const { env, backend } = await setup({ CAPACITY_POD: 1 });
    await deliverJob(env, withJob(queuedFixture, 600));
    const ours = await runnerOf(env, "gdr-gitea-600-1");
    expect(await deliverJob(env, withJob(completedFixture, 600, { runner_id: ours, runner_name: "gdr-gitea-600-1" }))).toEqual({
      status: 200,
      body: { completed: "gitea-600-1" },
    });
    expect(await stateOf(env, "gitea-600-1")).toBe("completed");
    expect(await holders(env)).toEqual([]);
    await sleep(50);
    expect((await backend.state()).runners).toEqual([]);
    // Capacity 1: the freed slot takes the next job at once.
    await deliverJob(env, withJob(queuedFixture, 601));
    expect(await stateOf(env, "gitea-601-1")).toBe("backend_ready");
  });
});

describe("odd runner names", () => {
  const odd = ["gdr-a b", "gdr-*", "gdr->", "gdr-gitea.>", "gdr-ü-1", "gdr-", "gdr--x", "gdr-constructor "];

  it("are not ours: in_progress and completed answer 200 and change nothing", async () => {
    const { env } = await setup();
    await deliverJob(env, queuedFixture);
    for (const name of odd) {
      expect(await deliverJob(env, withJob(inProgressFixture, 1187, { runner_name: name, runner_id: 5 }))).toEqual({
        status: 200,
        body: { ignored: "runner is not ours" },
      });
    }
    expect(await stateOf(env, "gitea-1187-1")).toBe("backend_ready");
  });

  it("stop no sweep: each is skipped, a failing item is an event, and the runners after it are still cleaned", async () => {
    const { env, gitea } = await setup();
    // Listed first: a runner Gitea refuses to delete, then the odd names, then an orphan of ours.
    await gitea.runners([{ id: 800, name: "gdr-gitea-8000-1" }, ...odd.map((name, i) => ({ id: 810 + i, name })), { id: 900, name: "gdr-gitea-9999-1" }]);
    await gitea.failDelete([800]);
    await tick(env);
    expect(events("sweep_item_failed")).toEqual([expect.objectContaining({ reason: expect.stringContaining("runner 800") })]);
    expect(events("runner_deleted").map((e) => e.assignment)).toEqual(["gitea-9999-1"]);
    const left = (await gitea.state()).runners.map((r) => r.id).sort();
    expect(left).toEqual([800, ...odd.map((_, i) => 810 + i)]);
    expect(events("reconcile_summary")).not.toHaveLength(0);
  });
});

describe("a job's completed delivered before its queued", () => {
  const cancelled = (job: number, extra: Record<string, unknown> = {}) =>
    withJob(completedFixture, job, { status: "completed", conclusion: "cancelled", runner_id: 0, runner_name: "", ...extra });

  it("leaves a tombstone: the late queued provisions nothing, answers 200 and says why; the next attempt is served", async () => {
    const { env, gitea, backend } = await setup();
    expect(await deliverJob(env, cancelled(1300))).toEqual({ status: 200, body: { tombstone: "gitea-1300-1" } });
    expect(events("tombstoned")).toEqual([
      expect.objectContaining({ assignment: "gitea-1300-1", backend: "pod", reason: "completed in Gitea (cancelled) before its queued delivery" }),
    ]);
    expect(await stateOf(env, "gitea-1300-1")).toBe("terminated");
    // A second completion finds the tombstone and leaves it as it is.
    expect(await deliverJob(env, cancelled(1300))).toEqual({ status: 200, body: { ignored: "nothing to cancel for gitea-1300-1" } });

    const late = await deliverJob(env, withJob(queuedFixture, 1300));
    expect(late).toEqual({ status: 200, body: { ignored: "job gitea-1300-1 completed in Gitea before its queued delivery" } });
    expect(events("queued_after_completed").map((e) => e.assignment)).toEqual(["gitea-1300-1"]);
    // Delivered again by Gitea: the same answer.
    expect((await deliverJob(env, withJob(queuedFixture, 1300))).status).toBe(200);
    await tick(env);
    expect((await gitea.state()).registrations).toBe(0);
    expect((await backend.state()).calls).toBe(0);
    expect(await holders(env)).toEqual([]);
    expect(await streamState(env)).toMatchObject({ messages: 0 });
    expect(await stateOf(env, "gitea-1300-1")).toBe("terminated");

    // The job's next attempt is another assignment, served as usual; so is a job next to it.
    expect(await deliverJob(env, withJob(queuedFixture, 1300, { run_attempt: 2 }))).toEqual({
      status: 202,
      body: { assignment: "gitea-1300-2", duplicate: false },
    });
    expect(await deliverJob(env, withJob(queuedFixture, 1301))).toEqual({ status: 202, body: { assignment: "gitea-1301-1", duplicate: false } });
    await tickUntil(env, async () => (await holders(env)).length === 2, { timeoutMs: 10_000 });
    expect((await backend.state()).runners.map((r) => r.id).sort()).toEqual(["gitea-1300-2", "gitea-1301-1"]);
    expect((await gitea.state()).registrations).toBe(2);
  });

  it("a completion after the queued cancels as before, and leaves no tombstone for a job no route serves", async () => {
    const { env, backend } = await setup();
    await deliverJob(env, withJob(queuedFixture, 1310));
    expect(await deliverJob(env, cancelled(1310))).toEqual({ status: 200, body: { cancelled: "gitea-1310-1" } });
    expect(events("tombstoned")).toEqual([]);
    expect(await deliverJob(env, cancelled(1311, { labels: ["no-such-label"] }))).toEqual({
      status: 200,
      body: { ignored: "nothing to cancel for gitea-1311-1" },
    });
    expect(await stateOf(env, "gitea-1311-1")).toBe("http 404");
    await sleep(50);
    expect((await backend.state()).runners).toEqual([]);
  });
});

describe("queued deliveries", () => {
  it("refuse a repository name longer than an assignment keeps, naming the field; 256 characters still pass", async () => {
    const { env } = await setup();
    const named = (job: number, fullName: string) => ({ ...withJob(queuedFixture, job), repository: { ...queuedFixture.repository, full_name: fullName } });
    const tooLong = await deliverJob(env, named(1400, `acme/${"r".repeat(252)}`));
    expect(tooLong.status).toBe(400);
    expect(tooLong.body).toMatchObject({
      error: "invalid workflow_job payload",
      fields: [{ field: "repository.full_name", message: "at most 256 characters" }],
    });
    expect(await streamState(env)).toMatchObject({ messages: 0 });
    expect((await deliverJob(env, named(1401, `acme/${"r".repeat(251)}`))).status).toBe(202);
  });

  it("take application/json, with parameters, and nothing that only starts like it", async () => {
    const { env } = await setup();
    const send = async (job: number, type: string) => {
      const raw = JSON.stringify(withJob(queuedFixture, job));
      const sig = await giteaSignature(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(raw));
      return request(env, "/v1/gitea/webhook", {
        method: "POST",
        headers: { "content-type": type, "x-gitea-event-type": "workflow_job", "x-gitea-signature": sig },
        body: raw,
      });
    };
    for (const type of [
      "application/json-patch+json",
      "application/json-foo",
      "application/jsonx",
      "application/x-www-form-urlencoded",
      "text/json",
      "application/json,text/plain",
    ]) {
      const res = await send(1410, type);
      expect(res.status, type).toBe(415);
      expect(((await res.json()) as { error: string }).error).toMatch(/^content-type must be application\/json/);
    }
    expect(await streamState(env)).toMatchObject({ messages: 0 });
    for (const [i, type] of ["application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8", " application/json "].entries())
      expect((await send(1411 + i, type)).status, type).toBe(202);
    // The operator API likewise.
    const post = (type: string) =>
      request(env, "/v1/assignments", {
        method: "POST",
        headers: { ...bearer(TEST_SECRETS.DISPATCH_TOKEN), "content-type": type },
        body: JSON.stringify({ version: 1, id: "ct-1", backend: "pod", labels: ["x"] }),
      });
    expect((await post("application/json-patch+json")).status).toBe(415);
    expect((await post("application/json; charset=utf-8")).status).toBe(202);
  });

  it("a second run attempt is a new assignment", async () => {
    const { env } = await setup();
    expect((await deliverJob(env, queuedFixture)).body).toEqual({ assignment: "gitea-1187-1", duplicate: false });
    expect((await deliverJob(env, withJob(queuedFixture, 1187, { run_attempt: 2 }))).body).toEqual({ assignment: "gitea-1187-2", duplicate: false });
    expect((await deliverJob(env, withJob(queuedFixture, 1187, { run_attempt: 2 }))).body).toEqual({ assignment: "gitea-1187-2", duplicate: true });
    expect(await streamState(env)).toMatchObject({ messages: 2 });
  });

  it("one older than the record TTL is published only if Gitea says the job is still queued", async () => {
    const eightDaysAgo = new Date(Date.now() - 8 * 86_400_000).toISOString();
    const old = (id: number) => withJob(queuedFixture, id, { created_at: eightDaysAgo });
    const { env, gitea } = await setup();
    await gitea.jobs([
      { ...old(701).workflow_job, status: "queued" },
      { ...old(702).workflow_job, status: "success" },
    ]);
    expect((await deliverJob(env, old(701))).body).toEqual({ assignment: "gitea-701-1", duplicate: false });
    expect((await deliverJob(env, old(702))).body).toMatchObject({ ignored: expect.stringContaining("no longer queued in Gitea (success)") });
    expect((await deliverJob(env, old(703))).body).toMatchObject({ ignored: expect.stringContaining("(not found)") });
    // Asked under the repository the delivery names: Gitea's job API is per repository.
    expect((await gitea.state()).requests.filter((r) => r.method === "GET" && /\/jobs\/\d+$/.test(r.path)).map((r) => r.path)).toEqual(
      [701, 702, 703].map((id) => `/api/v1/repos/acme/widgets/actions/jobs/${id}`),
    );
    // A day younger is not asked about.
    expect((await deliverJob(env, withJob(queuedFixture, 704, { created_at: new Date(Date.now() - 5 * 86_400_000).toISOString() }))).status).toBe(202);
    expect(events("stale_delivery").map((e) => e.assignment)).toEqual(["gitea-702-1", "gitea-703-1"]);
    expect(await streamState(env)).toMatchObject({ messages: 2 });

    // Another attempt queued in Gitea does not vouch for this one; this attempt still queued does.
    await gitea.jobs([
      { ...old(705).workflow_job, status: "queued", run_attempt: 2 },
      { ...old(706).workflow_job, status: "queued", run_attempt: 1 },
    ]);
    expect((await deliverJob(env, old(705))).body).toMatchObject({ ignored: expect.stringContaining("no longer queued in Gitea (queued)") });
    expect((await deliverJob(env, old(706))).body).toEqual({ assignment: "gitea-706-1", duplicate: false });
    // An age nobody can tell counts as old: asked about, and Gitea's answer decides.
    const undated = (id: number, created_at: string | undefined) => {
      const p = withJob(queuedFixture, id, { created_at });
      if (created_at === undefined) delete (p.workflow_job as { created_at?: string }).created_at;
      return p;
    };
    await gitea.jobs([{ ...undated(708, "not a date").workflow_job, status: "queued" }]);
    for (const [id, at] of [
      [707, undefined],
      [708, "not a date"],
      [709, "0001-01-01T00:00:00Z"],
    ] as const)
      await deliverJob(env, undated(id, at));
    expect(await streamState(env)).toMatchObject({ messages: 4 });
    expect(events("stale_delivery").map((e) => e.assignment)).toEqual(["gitea-702-1", "gitea-703-1", "gitea-705-1", "gitea-707-1", "gitea-709-1"]);

    // Without an API token nobody can confirm it: not published.
    const noToken = await setup({ GITEA_API_TOKEN: "", GITEA_RUNNER_REGISTRATION_TOKEN: "gitea-registration-token-0000" });
    expect((await deliverJob(noToken.env, old(701))).body).toMatchObject({ ignored: expect.stringContaining("GITEA_API_TOKEN") });
    expect(await streamState(noToken.env)).toMatchObject({ messages: 0 });
  });
});

describe("a slow Gitea inside the gateway's deadline", () => {
  it("an old delivery's check with a Gitea slower than the gateway allows is a 503 naming Gitea, and queues nothing", async () => {
    const eightDaysAgo = new Date(Date.now() - 8 * 86_400_000).toISOString();
    const { env, gitea } = await setup();
    await gitea.jobs([{ ...withJob(queuedFixture, 720, { created_at: eightDaysAgo }).workflow_job, status: "queued" }]);
    await gitea.delay(3_000);
    const started = Date.now();
    const slow = await deliverJob(env, withJob(queuedFixture, 720, { created_at: eightDaysAgo }));
    expect(slow.status).toBe(503);
    expect(String(slow.body.error)).toMatch(/^Gitea could not confirm that job 720 is still queued \(.*timed out\); nothing was queued/);
    expect(String(slow.body.error)).not.toMatch(/NATS/);
    // Answered by the object within its deadline, not by the invocation's fallback after it.
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(events("gateway_fallback")).toEqual([]);
    await sleep(3_200);
    expect(await streamState(env)).toMatchObject({ messages: 0 });

    // Near miss: a Gitea that answers within the bound is waited for, and the job is queued.
    await gitea.delay(300);
    expect(await deliverJob(env, withJob(queuedFixture, 720, { created_at: eightDaysAgo }))).toEqual({
      status: 202,
      body: { assignment: "gitea-720-1", duplicate: false },
    });
  });
});

describe("signature headers", () => {
  const send = async (env: Env, headers: Record<string, string>) => {
    const raw = JSON.stringify(queuedFixture);
    return request(env, "/v1/gitea/webhook", {
      method: "POST",
      headers: { "content-type": "application/json", "x-gitea-event-type": "workflow_job", ...headers },
      body: raw,
    });
  };
  const sign = (raw: string, secret: string = TEST_SECRETS.WEBHOOK_SECRET) => giteaSignature(secret, new TextEncoder().encode(raw));

  it("checks X-Hub-Signature-256 alone as strictly as X-Gitea-Signature", async () => {
    const { env } = await setup();
    const good = await sign(JSON.stringify(queuedFixture));
    const flipped = good.slice(0, -1) + (good.endsWith("0") ? "1" : "0");
    expect((await send(env, { "x-hub-signature-256": `sha256=${flipped}` })).status).toBe(401);
    expect((await send(env, { "x-hub-signature-256": `sha256=${await sign(JSON.stringify(queuedFixture), "another-secret")}` })).status).toBe(401);
    expect((await send(env, { "x-hub-signature-256": "sha256=" })).status).toBe(401);
    expect(await streamState(env)).toMatchObject({ messages: 0 });
    expect((await send(env, { "x-hub-signature-256": `sha256=${good}` })).status).toBe(202);
    expect(await streamState(env)).toMatchObject({ messages: 1 });
  });
});
