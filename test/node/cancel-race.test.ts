// A job that ends while a pass provisions it: the pass read the record before the end, and finds
// out only when it stores the runner it registered. Against the real nats-server, with the end
// injected into the record store right after the pass's read (the workerd gitea test covers a
// cancel during the registration itself).
import { written } from "../harness/memory.ts";
import { describe, expect, inject, it } from "vitest";
import { encodeAssignment } from "../../src/model/assignment.ts";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher, type State } from "../../src/app/dispatcher.ts";
import { assignmentSubject } from "../../src/nats/names.ts";
import { withNats } from "../../src/nats/connection.ts";
import { assignment, giteaTestEnv, provisionEnv } from "../harness/env.ts";
import { stubGitea } from "../harness/gitea-stub.ts";
import { cancelAssignment } from "../../src/domain/cancel.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { createRecordCache } from "../../src/state/record-cache.ts";
import { terminate } from "../../src/state/transitions.ts";

const events: { event: string; assignment: string }[] = [];
const sink = { event: (e: { event: string; assignment: string }) => void events.push(e), summary: () => undefined, error: () => undefined };

/** The record is terminated just after the pass's batch read returns it, as a cancel landing then would. */
const endedAfterRead =
  (reason: string) =>
  (state: State): State => ({
    ...state,
    records: {
      ...state.records,
      getMany: async (ids) => {
        const read = await state.records.getMany(ids);
        for (const id of ids) await state.records.update(id, (r) => written({ ...r, state: "terminated", terminatedAt: new Date().toISOString(), reason }));
        return read;
      },
    },
  });

describe("a job that ends between a pass's read and its backend call", () => {
  it("gets no workload, and the slot the pass took after the end goes back", async () => {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9", { RETRY_DELAY_MS: 30, CAPACITY_POD: 1 });
    const config = await provisionEnv(env);
    const id = "gitea-4242-1";
    // As a webhook does it: the record first, then the message.
    await createDispatcher({ config }).withState(({ records }) => records.offer(assignment(id)));
    await withNats(config, (h) => h.js.publish(assignmentSubject(config, "pod"), encodeAssignment(assignment(id)), { msgID: id }));
    const d = createDispatcher({ config: loadConfig(env), gitea: stubGitea(), sink, decorateState: endedAfterRead("cancelled") });
    const [summary] = await d.reconcile("test", 5_000);
    expect(summary).toMatchObject({ fetched: 1, termed: 1, errors: 0 });
    expect(events.filter((e) => e.assignment === id).map((e) => e.event)).toEqual(["received", "capacity_acquired", "runner_registered", "already_done"]);
    const backend = (await (await fetch(`${env.POD_BACKEND_URL}/_control/state`)).json()) as { runners: unknown[]; requests: { method: string }[] };
    expect(backend.requests.filter((r) => r.method === "PUT")).toEqual([]);
    // Nobody else released it: the cancel came before the pass took it.
    const after = await createDispatcher({ config }).withState(async ({ admission, records }) => ({
      snapshot: await admission.snapshot("pod"),
      record: await records.get(id),
    }));
    expect(after.snapshot).toEqual({ holders: [], registering: [] });
    // The runner it registered is in the record, for the sweep to delete.
    expect(after.record).toMatchObject({ state: "terminated", reason: "cancelled", runner: { id: 1 } });
  });
});

describe("a first delivery whose record is the offer this isolate just made (no read)", () => {
  it("ended meanwhile by another isolate: no workload either, the slot goes back, the runner is in the record", async () => {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9", { RETRY_DELAY_MS: 30, CAPACITY_POD: 1 });
    const config = await provisionEnv(env);
    const id = "gitea-4343-1";
    const d = createDispatcher({ config: loadConfig(env), gitea: stubGitea(), sink });
    await withNats(config, (h) => h.js.publish(assignmentSubject(config, "pod"), encodeAssignment(assignment(id)), { msgID: id }));
    await d.withState(({ records }) => records.offer(assignment(id)));
    // Another isolate (a cancel webhook served elsewhere), with a cache of its own.
    const elsewhere = createDispatcher({ config, recordCache: createRecordCache() });
    await elsewhere.withState(({ records }) => terminate(records, id, { at: new Date().toISOString(), reason: "cancelled" }));
    events.length = 0;
    const [summary] = await d.reconcile("webhook", 5_000, { eager: true });
    expect(summary).toMatchObject({ fetched: 1, termed: 1, errors: 0 });
    // It went on from the offer's record (a read would have found the end and termed at once).
    expect(events.filter((e) => e.assignment === id).map((e) => e.event)).toEqual(["received", "capacity_acquired", "runner_registered", "already_done"]);
    const backend = (await (await fetch(`${env.POD_BACKEND_URL}/_control/state`)).json()) as { requests: { method: string }[] };
    expect(backend.requests.filter((r) => r.method === "PUT")).toEqual([]);
    const after = await elsewhere.withState(async ({ admission, records }) => ({ snapshot: await admission.snapshot("pod"), record: await records.get(id) }));
    expect(after.snapshot).toEqual({ holders: [], registering: [] });
    expect(after.record).toMatchObject({ state: "terminated", reason: "cancelled", runner: { id: 1 } });
  });
});

describe("a cancel whose tombstone loses to the job's queued record, created in between", () => {
  it("ends that record (near miss: an id with no record gets the tombstone)", async () => {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9");
    const config = await provisionEnv(env);
    // The queued's record is created after the cancel's first look found none, just before its tombstone.
    const queuedFirst = (state: State): State => ({
      ...state,
      records: {
        ...state.records,
        tombstone: async (id, backend, reason, job) => {
          if (id === "gitea-61-1") await state.records.offer(assignment(id));
          return state.records.tombstone(id, backend, reason, job);
        },
      },
    });
    const d = createDispatcher({ config, gitea: stubGitea(), sink, decorateState: queuedFirst });
    const cancelled = await cancelAssignment(d, "gitea-61-1", "cancelled", { backend: "pod", reason: "cancelled before it was queued" });
    expect(cancelled?.tombstoned).toBeUndefined();
    expect(await d.withState(({ records }) => records.get("gitea-61-1"))).toMatchObject({ state: "terminated", reason: "cancelled" });
    const near = await cancelAssignment(d, "gitea-62-1", "cancelled", { backend: "pod", reason: "cancelled before it was queued" });
    expect(near?.tombstoned).toBe(true);
  });
});

describe("a runner past its claim timeout whose job Gitea cannot be asked about", () => {
  it("keeps the usual course: torn down and asked for again, not ended as started elsewhere", async () => {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9", { CLAIM_TIMEOUT_MS: 1_000, RETRY_DELAY_MS: 30 });
    const config = await provisionEnv(env);
    const id = "gitea-71-1";
    const a = { ...assignment(id), job: { id: 71, runId: 1, attempt: 1, repository: "acme/app" } };
    const gitea = stubGitea();
    let asked = 0;
    gitea.getJob = async () => {
      asked++;
      throw new Error("gitea unavailable");
    };
    const d = createDispatcher({ config, gitea, sink });
    const longAgo = new Date(Date.now() - 60_000).toISOString();
    await d.withState(async ({ records }) => {
      await records.offer(a);
      await records.update(id, (r) =>
        written({
          ...r,
          state: "backend_ready",
          askedAt: longAgo,
          readyAt: longAgo,
          runner: { id: 9, name: `gdr-${id}`, registeredAt: longAgo, sealed: "x" },
        }),
      );
    });
    await withNats(config, (h) => h.js.publish(assignmentSubject(config, "pod"), encodeAssignment(a), { msgID: id }));
    events.length = 0;
    await d.reconcile("test", 5_000);
    expect(asked).toBeGreaterThan(0);
    const mine = events.filter((e) => e.assignment === id).map((e) => e.event);
    expect(mine).toContain("claim_timeout");
    expect(mine).not.toContain("job_started_elsewhere");
    expect((await d.withState(({ records }) => records.get(id)))?.state).not.toBe("terminated");
  });
});

describe("a job that ends while its backend call is in flight", () => {
  // The ender's teardown reaches the backend before the request does: it finds nothing to delete,
  // and then the request makes the workload. The pass sees the end when it writes what the
  // backend said, and tears down what it asked for.
  const run = async (id: string, accepted: "ready" | "late" | "kept") => {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9", { RETRY_DELAY_MS: 30, CAPACITY_POD: 1 });
    const config = await provisionEnv(env);
    const live = new Set<string>();
    const pod = {
      async accept(request: { assignment: { id: string } }) {
        const own = request.assignment.id;
        if (accepted !== "kept") {
          await cancelAssignment(d, own, "cancelled");
          live.delete(own); // the cancel's teardown, which came first
        }
        live.add(own);
        if (accepted === "late") throw new Error("backend timed out");
        return "ready" as const;
      },
      async teardown(own: string) {
        live.delete(own);
      },
    };
    const d = createDispatcher({ config, gitea: stubGitea(), sink, runners: { pod } });
    await d.withState(({ records }) => records.offer(assignment(id)));
    await withNats(config, (h) => h.js.publish(assignmentSubject(config, "pod"), encodeAssignment(assignment(id)), { msgID: id }));
    await d.reconcile("test", 5_000);
    return { live, record: await d.withState(({ records }) => records.get(id)) };
  };

  it("the workload it made after the cancel's teardown goes", async () => {
    const { live, record } = await run("gitea-4343-1", "ready");
    expect(record).toMatchObject({ state: "terminated", reason: "cancelled" });
    expect([...live]).toEqual([]);
  });

  it("so does one made by a call that answered too late (failed, as far as the pass knows)", async () => {
    const { live, record } = await run("gitea-4344-1", "late");
    expect(record).toMatchObject({ state: "terminated", reason: "cancelled" });
    expect([...live]).toEqual([]);
  });

  it("near miss: a job still waiting keeps the workload it was given", async () => {
    const { live, record } = await run("gitea-4345-1", "kept");
    expect(record?.state).toBe("backend_ready");
    expect([...live]).toEqual(["gitea-4345-1"]);
  });
});

describe("a job cancelled before its queued arrives", () => {
  it("is tombstoned; its later publish and its delivery count as the same content, not a conflict: termed as ended, nothing asked", async () => {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9");
    const config = await provisionEnv(env);
    const d = createDispatcher({ config, gitea: stubGitea(), sink });
    const id = "gitea-81-1";
    const cancelled = await cancelAssignment(d, id, "cancelled", { backend: "pod", reason: "cancelled before it was queued" });
    expect(cancelled?.tombstoned).toBe(true);
    // The queued, with content the tombstone never saw.
    const published = await publishAssignment(d, { ...assignment(id), job: { id: 81, runId: 1, attempt: 1, repository: "acme/app" } });
    expect(published).toMatchObject({ duplicate: true, ended: true });
    const [pass] = await d.reconcile("test", 10_000);
    expect(pass).toMatchObject({ fetched: 1, termed: 1 });
    const mine = events.filter((e) => e.assignment === id).map((e) => e.event);
    expect(mine).toContain("already_done");
    expect(mine).not.toContain("conflict");
    expect(await d.withState(({ records }) => records.get(id))).toMatchObject({ state: "terminated", tombstone: true });
  });
});
