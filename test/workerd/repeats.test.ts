// Requests that change nothing do nothing: a repeated completion tears nothing down again, a
// repeated claim starts no pass; and a claim token belongs to one life of an assignment id.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { bindBucket } from "../../src/state/kv.ts";
import { recordKey, recordsBucket } from "../../src/nats/names.ts";
import { assignment, giteaTestEnv, provisionEnv, testEnv, TEST_SECRETS, testClaimToken } from "../harness/env.ts";
import { queuedFixture } from "../harness/fixtures.ts";
import { deliverJob, inParallel } from "../harness/jobs.ts";
import { backendControl, bearer, captureLogs, claimTokenOf, giteaControl, request, tick, type Captured } from "../harness/worker.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const giteaUrl = inject("giteaUrl");

let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());
const passes = (trigger: string) => logs.events().filter((e) => e.event === "reconcile_summary" && e.trigger === trigger);

const call = (env: Record<string, string>, id: string, verb: "claim" | "complete", token: string) =>
  request(env, `/v1/assignments/${id}/${verb}`, { method: "POST", headers: bearer(token) });

describe("requests that change nothing", () => {
  it("20 completions of a completed assignment tear its runner down once; 20 claims of a claimed one start one pass", async () => {
    const env = giteaTestEnv(nats, backendUrl, giteaUrl, { RETRY_DELAY_MS: 30 });
    await provisionEnv(env);
    const gitea = giteaControl(env);
    const backend = backendControl(env);
    expect((await deliverJob(env, queuedFixture)).status).toBe(202);
    const id = "gitea-1187-1";
    expect((await backend.state()).runners.map((r) => r.id)).toEqual([id]);
    const token = await claimTokenOf(env, id);

    await inParallel(
      Array.from({ length: 20 }, (_, i) => i),
      5,
      async () => {
        expect((await call(env, id, "claim", token)).status).toBe(200);
      },
    );
    // One of the twenty changed the record; that one alone asked for a pass (or none, if the
    // pass that asked for the runner was still holding the message).
    expect(passes("claim").length).toBeLessThanOrEqual(1);
    expect(logs.events().filter((e) => e.event === "claimed")).toHaveLength(1);

    await inParallel(
      Array.from({ length: 20 }, (_, i) => i),
      5,
      async () => {
        const res = await call(env, id, "complete", token);
        expect(res.status).toBe(200);
        expect(await res.json()).toMatchObject({ id, state: "completed" });
      },
    );
    const deletes = (await backend.state()).requests.filter((r) => r.method === "DELETE");
    expect(deletes.map((r) => r.path)).toEqual([expect.stringMatching(new RegExp(`/${id}$`))]);
    expect((await gitea.state()).requests.filter((r) => r.method === "DELETE")).toHaveLength(1);
    expect(logs.events().filter((e) => e.event === "completed")).toHaveLength(1);
  });
});

describe("a claim token belongs to one life of its id", () => {
  it("an id used again after its record went accepts only the new record's token", async () => {
    const env = testEnv(nats, backendUrl);
    const config = await provisionEnv(env);
    const d = createDispatcher({ config });
    const id = "again-1";
    await publishAssignment(d, assignment(id));
    const old = await claimTokenOf(env, id);
    // The record expires (its TTL passed) and the id comes again, as a new assignment.
    await d.withState(async (_, handle) => (await bindBucket(handle, recordsBucket(config))).purge(recordKey(id)));
    expect((await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).status).toBe(404);
    await new Promise((r) => setTimeout(r, 5));
    await d.withState((s) => s.records.offer(assignment(id)));
    const fresh = await claimTokenOf(env, id);
    expect(fresh).not.toBe(old);

    // The old token, and the old one's signature under the new incarnation, are refused and change nothing.
    const [oldIncarnation, oldMac] = old.split(".");
    const [newIncarnation] = fresh.split(".");
    for (const token of [
      old,
      `${newIncarnation}.${oldMac}`,
      `${oldIncarnation}.${fresh.split(".")[1]}`,
      await testClaimToken(id, "2020-01-01T00:00:00.000Z"),
    ]) {
      expect((await call(env, id, "claim", token)).status, token).toBe(403);
      expect((await call(env, id, "complete", token)).status, token).toBe(403);
    }
    expect(((await (await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as { state: string }).state).toBe(
      "received",
    );
    // The new token claims it.
    expect((await call(env, id, "claim", fresh)).status).toBe(200);
  });
});

describe("a teardown that failed", () => {
  it("without Gitea, is retried by the tick until it holds, never by a repeated completion", async () => {
    const env = testEnv(nats, backendUrl, { RETRY_DELAY_MS: 30 });
    await provisionEnv(env);
    const backend = backendControl(env);
    expect(
      (
        await request(env, "/v1/assignments", {
          method: "POST",
          headers: bearer(TEST_SECRETS.DISPATCH_TOKEN, true),
          body: JSON.stringify({ version: 1, id: "td-1", backend: "pod", labels: ["x"] }),
        })
      ).status,
    ).toBe(202);
    const runner = (await backend.state()).runners.find((r) => r.id === "td-1")!;
    expect(runner).toBeDefined();
    expect((await call(env, "td-1", "claim", runner.claimToken)).status).toBe(200);
    const deletes = async () => (await backend.state()).requests.filter((r) => r.method === "DELETE").length;

    await backend.mode({ token: TEST_SECRETS.BACKEND_TOKEN, failRate: 1 });
    expect((await call(env, "td-1", "complete", runner.claimToken)).status).toBe(200);
    expect(await deletes()).toBe(1);
    expect(
      logs
        .events()
        .filter((e) => e.event === "teardown_failed")
        .map((e) => e.assignment),
    ).toEqual(["td-1"]);
    // The runner asks again: nothing is torn down by the caller.
    expect((await call(env, "td-1", "complete", runner.claimToken)).status).toBe(200);
    expect(await deletes()).toBe(1);
    // The tick retries; the backend still refuses, so it stays listed.
    await tick(env);
    expect(await deletes()).toBe(2);
    expect((await backend.state()).runners.map((r) => r.id)).toEqual(["td-1"]);
    // The status page's recent list shows records only, not the listed teardown beside them.
    const status = (await (await request(env, "/v1/status", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as {
      recent: { id: string; state: string }[];
    };
    expect(status.recent.map((r) => [r.id, r.state])).toEqual([["td-1", "completed"]]);
    // The backend is back: the next tick tears it down and takes it off the list; the one after asks nothing.
    await backend.mode({ token: TEST_SECRETS.BACKEND_TOKEN });
    await tick(env);
    expect(await deletes()).toBe(3);
    expect((await backend.state()).runners).toEqual([]);
    expect(
      logs
        .events()
        .filter((e) => e.event === "teardown_retried")
        .map((e) => e.assignment),
    ).toEqual(["td-1"]);
    await tick(env);
    expect(await deletes()).toBe(3);
  });
});
