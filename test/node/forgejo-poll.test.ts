// One Forgejo poll (forge/forgejo/poller.ts) over a stubbed client and an in-memory store of what
// earlier polls saw, against the real nats-server: the decisions a poll makes, each with its near
// miss, without a workerd scenario.
import { written } from "../harness/memory.ts";
import { jetstreamManager } from "@nats-io/jetstream";
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import type { ForgejoClient, ForgejoJob } from "../../src/forge/forgejo/client.ts";
import type { KnownJob } from "../../src/forge/forgejo/jobs.ts";
import { GONE_GRACE_MS, pollForgejo, STALE_BINDING_MS, type KnownStore } from "../../src/forge/forgejo/poller.ts";
import { completeAssignmentRun } from "../../src/domain/operations.ts";
import { assignment, forgejoTestEnv, provisionEnv, TEST_ROUTES } from "../harness/env.ts";
import { createWarmBinder, forgejoPlace } from "../../src/forge/forgejo/warm.ts";
import type { Config } from "../../src/app/config.ts";
import type { Dispatcher, State } from "../../src/app/dispatcher.ts";
import { reviveMoved } from "../../src/forge/forgejo/move.ts";
import { takeQuota } from "../../src/quotas/limits.ts";
import { shareRules } from "../../src/quotas/config.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };

function memoryStore(initial: KnownJob[] = []): KnownStore & { known: Map<string, KnownJob> } {
  const known = new Map(initial.map((k) => [`${k.job}-${k.attempt}`, k]));
  return { known, all: async () => new Map(known), put: async (k, v) => void known.set(k, v), delete: async (k) => void known.delete(k) };
}

/** A Forgejo that lists `jobs()` and still has the runners in `runners`. */
function stubForgejo(jobs: () => ForgejoJob[], runners: Set<number>): ForgejoClient {
  return {
    jobs: async () => jobs(),
    // No name it may read: jobs are named by ids.
    repositoryName: async () => null,
    getRunner: async (_scope: unknown, id: number) => (runners.has(id) ? { id } : null),
    deleteRunner: async (_scope: unknown, id: number) => void runners.delete(id),
  } as unknown as ForgejoClient;
}

/** Record writes of the ids `which` accepts fail (a NATS timeout) while `on()` holds: a poll that dies midway. */
const failingWrites =
  (which: (id: string) => boolean, on: () => boolean) =>
  (s: State): State => ({
    ...s,
    records: {
      ...s.records,
      update: async (id, change) => (on() && which(id) ? Promise.reject(new Error("nats: timeout")) : s.records.update(id, change)),
    },
  });

describe("a claimed Forgejo job that left the list while its runner is still there", () => {
  it("completes after the grace counted from when it was first missed, not restarted at every poll", async () => {
    const env = forgejoTestEnv(nats, backendUrl, "http://127.0.0.1:9");
    const config = await provisionEnv(env);
    let clock = Date.parse("2026-12-03T12:00:00Z");
    const client = stubForgejo(() => [], new Set([5]));
    const d = createDispatcher({ config: loadConfig(env), sink: silent, now: () => clock, forgejo: client });
    const id = "forgejo-41-1";
    await d.withState(async ({ records }) => {
      await records.offer({ ...assignment(id), job: { id: 41, runId: 0, attempt: 1, repository: "id-2/id-7" } });
      await records.update(id, (r) =>
        written({
          ...r,
          state: "claimed",
          claimedAt: new Date(clock).toISOString(),
          runner: { id: 5, name: `gdr-${id}`, registeredAt: new Date(clock).toISOString(), sealed: "x" },
        }),
      );
    });
    const store = memoryStore([{ id, job: 41, attempt: 1, handle: "h", claimed: true }]);
    const stateOf = async () => (await d.withState(({ records }) => records.get(id)))?.state;
    await pollForgejo(d, client, config.forgejo!, store);
    expect(store.known.get("41-1")?.goneSince).toBe(clock);
    const firstMissed = clock;
    // Polls within the grace: still claimed, and the first miss is kept.
    for (const after of [5_000, 15_000, GONE_GRACE_MS - 1_000]) {
      clock = firstMissed + after;
      expect((await pollForgejo(d, client, config.forgejo!, store)).ended).toBe(0);
      expect(store.known.get("41-1")?.goneSince).toBe(firstMissed);
      expect(await stateOf()).toBe("claimed");
    }
    clock = firstMissed + GONE_GRACE_MS + 1_000;
    expect((await pollForgejo(d, client, config.forgejo!, store)).ended).toBe(1);
    expect(await stateOf()).toBe("completed");
    expect(store.known.has("41-1")).toBe(false);
  });
});

const LABELS = TEST_ROUTES[0]!.labels;
const waiting = (id: number, owner: number, repo: number): ForgejoJob => ({
  id,
  attempt: 1,
  handle: `h-${id}`,
  name: "build",
  owner_id: owner,
  repo_id: repo,
  runs_on: ["ubuntu-latest"],
  status: "waiting",
  task_id: 0,
});

/** A pool of `n` warm runners, up and idle, registered at the configured Forgejo: their ids. */
async function idleWarm(d: Dispatcher, config: Config, n: number, tag = "x", first = 0): Promise<string[]> {
  return d.withState(async (state) => {
    const ids: string[] = [];
    for (let i = first; i < first + n; i++) {
      const id = `warm-small-${i}-${tag}`;
      const now = new Date().toISOString();
      await state.records.offer({
        version: 1,
        id,
        backend: "pod",
        workload: `spiffe://example.org/runner/pod/${id}`,
        labels: LABELS,
        pools: ["small"],
        warm: true,
        createdAt: now,
      });
      expect(await state.admission.acquire("pod", id)).toBe(true);
      await state.records.update(id, (r) =>
        written({
          ...r,
          warm: true,
          state: "backend_ready",
          readyAt: now,
          askedAt: now,
          placement: { pool: "small", backend: "pod" },
          runner: { id: 100 + i, name: `gdr-${id}`, registeredAt: now, sealed: "x", place: forgejoPlace(config.forgejo!) },
        }),
      );
      await state.warm.put("small", i, id, 0);
      ids.push(id);
    }
    return ids;
  });
}

/** Runners held by jobs of owner `owner`, repository `repo` (slot holders with those records). */
async function holding(d: Dispatcher, owner: number, repo: number, n: number) {
  await d.withState(async (state) => {
    for (let i = 0; i < n; i++) {
      const id = `forgejo-held-${owner}-${i}`;
      await state.records.offer({ ...assignment(id), job: { id: 900 + i, runId: 0, attempt: 1, repository: `id-${owner}/id-${repo}` } });
      await state.admission.acquire("pod", id);
      await state.records.update(id, (r) => written({ ...r, state: "claimed" }));
    }
  });
}

const warmPoolEnv = (extra: Record<string, unknown> = {}) =>
  forgejoTestEnv(nats, backendUrl, "http://127.0.0.1:9", {
    RUNS_ON_ROUTES: "",
    RUNNER_POOLS: JSON.stringify([{ name: "small", backend: "pod", labels: LABELS, minIdle: 2 }]),
    ...extra,
  });

describe("Forgejo jobs given to warm runners count like any other", () => {
  it("take their QUOTAS places: with one place for the repository, one of three new jobs gets a warm runner, the others are published to wait; its end gives the place back", async () => {
    const env = warmPoolEnv({ QUOTAS: JSON.stringify({ repositories: { "id-2/id-7": { limit: 1 } } }) });
    const config = await provisionEnv(env);
    const jobs = [waiting(41, 2, 7), waiting(42, 2, 7), waiting(43, 2, 7)];
    const client = stubForgejo(() => jobs, new Set());
    const d = createDispatcher({ config, sink: silent, forgejo: client });
    const warm = await idleWarm(d, config, 2);
    expect(await pollForgejo(d, client, config.forgejo!, memoryStore())).toMatchObject({ bound: 1, published: 2 });
    const held = () => d.withState(({ quotas }) => quotas.held(["id-2"]));
    expect(await held()).toEqual(new Map([["id-2", 1]]));
    const given = (await d.withState(({ records }) => Promise.all(warm.map((id) => records.get(id))))).filter((r) => r?.bound);
    expect(given.map((r) => r!.bound!.job)).toEqual([41]);
    // The runner ran it: its completion gives the places back.
    await completeAssignmentRun(d, given[0]!.id, { unclaimed: true });
    expect(await held()).toEqual(new Map([["id-2", 0]]));
  });

  it("a job refused at its QUOTAS limit leaves the warm runner it was offered to the next job in turn", async () => {
    const config = await provisionEnv(warmPoolEnv({ QUOTAS: JSON.stringify({ repositories: { "id-2/id-7": { limit: 1 } } }) }));
    // 41's turn comes first (its owner holds no runner), but its repository's one place is held by
    // a job a pass is admitting now (a place in the ledger, no slot yet): refused.
    const jobs = [waiting(41, 2, 7), waiting(44, 9, 1)];
    const client = stubForgejo(() => jobs, new Set());
    const d = createDispatcher({ config, sink: silent, forgejo: client });
    await holding(d, 9, 1, 1);
    expect(await d.withState(({ quotas }) => takeQuota(quotas, shareRules(config.quotas), "forgejo-40-1", "id-2/id-7"))).toBe("taken");
    const [w] = await idleWarm(d, config, 1);
    expect(await pollForgejo(d, client, config.forgejo!, memoryStore())).toMatchObject({ bound: 1, published: 1 });
    expect((await recordOf(d, w!))?.bound?.job).toBe(44);
  });

  it("near miss, no QUOTAS: both warm runners are given jobs", async () => {
    const config = await provisionEnv(warmPoolEnv());
    const jobs = [waiting(41, 2, 7), waiting(42, 2, 7), waiting(43, 2, 7)];
    const client = stubForgejo(() => jobs, new Set());
    const d = createDispatcher({ config, sink: silent, forgejo: client });
    await idleWarm(d, config, 2);
    expect(await pollForgejo(d, client, config.forgejo!, memoryStore())).toMatchObject({ bound: 2, published: 1 });
  });

  it("a job whose every idle warm runner tried fails to take it (recycled, or claimed by another poll) gets its handle back for its own assignment, and is published", async () => {
    const config = await provisionEnv(warmPoolEnv());
    const jobs = [waiting(41, 2, 7)];
    const client = stubForgejo(() => jobs, new Set());
    // Each warm runner is taken by another poll between this poll's listing and its claim.
    const takenFirst = (s: State): State => ({
      ...s,
      records: {
        ...s.records,
        update: async (id, change) => {
          if (id.startsWith("warm-small-"))
            await s.records.update(id, (r) => written({ ...r, state: "terminated", terminatedAt: new Date().toISOString(), reason: "recycled" }));
          return s.records.update(id, change);
        },
      },
    });
    const d = createDispatcher({ config, sink: silent, forgejo: client, decorateState: takenFirst });
    const plain = createDispatcher({ config, sink: silent, forgejo: client });
    await idleWarm(plain, config, 2);
    expect(await pollForgejo(d, client, config.forgejo!, memoryStore())).toMatchObject({ bound: 0, published: 1 });
    // The handle is the job's own assignment's: a second binding to another runner is refused.
    expect(await plain.withState(({ handles }) => handles.bind("h-41", "x"))).toBe("forgejo-41-1");
  });

  it("a poll that loses a job's handle to another poll keeps the idle warm runner it tried for its next job", async () => {
    const config = await provisionEnv(warmPoolEnv());
    const d = createDispatcher({ config, sink: silent, forgejo: stubForgejo(() => [], new Set()) });
    const [w] = await idleWarm(d, config, 1);
    await d.withState(({ handles }) => handles.bind("h-41", "bound-elsewhere"));
    const binder = createWarmBinder(d);
    const request = { ...assignment("forgejo-41-1"), pools: ["small"], job: { id: 41, runId: 1, attempt: 1, repository: "id-2/id-7" } };
    expect(await binder.bind(waiting(41, 2, 7), request)).toBeUndefined();
    expect(await binder.idle("small")).toEqual([w]);
    // Near miss: the next job of the poll gets it.
    const next = { ...request, id: "forgejo-42-1", job: { ...request.job, id: 42 } };
    expect(await binder.bind(waiting(42, 2, 7), next)).toBe(w);
  });

  it("a poll that gives every job to a warm runner asks for a pass all the same: the positions are being refilled", async () => {
    const config = await provisionEnv(warmPoolEnv());
    const client = stubForgejo(() => [waiting(41, 2, 7), waiting(42, 2, 7)], new Set());
    const d = createDispatcher({ config, sink: silent, forgejo: client });
    await idleWarm(d, config, 2);
    expect(await pollForgejo(d, client, config.forgejo!, memoryStore())).toMatchObject({ bound: 2, published: 0, backends: ["pod"] });
  });

  it("go out by turn: fewer warm runners than new jobs, the owner holding none gets one before the older jobs of an owner holding runners", async () => {
    const config = await provisionEnv(warmPoolEnv());
    // Owner 2 holds three runners and has three new jobs; owner 9's one job is the newest.
    const jobs = [waiting(41, 2, 7), waiting(42, 2, 7), waiting(43, 2, 7), waiting(44, 9, 1)];
    const client = stubForgejo(() => jobs, new Set());
    const d = createDispatcher({ config, sink: silent, forgejo: client });
    await holding(d, 2, 7, 3);
    const warm = await idleWarm(d, config, 2);
    expect(await pollForgejo(d, client, config.forgejo!, memoryStore())).toMatchObject({ bound: 2, published: 2 });
    const bound = (await d.withState(({ records }) => Promise.all(warm.map((id) => records.get(id))))).map((r) => r?.bound?.job).sort();
    expect(bound).toEqual([41, 44]);
  });
});

describe("a job given to a warm runner that ends before taking it", () => {
  it("is taken back at the next poll and published to its own runner, not after CLAIM_TIMEOUT_MS; near miss: a live warm runner keeps it", async () => {
    const config = await provisionEnv(warmPoolEnv());
    const jobs = [waiting(41, 2, 7)];
    const client = stubForgejo(() => jobs, new Set());
    const events: string[] = [];
    const d = createDispatcher({ config, sink: { ...silent, event: (e: { event: string }) => void events.push(e.event) }, forgejo: client });
    const [w] = await idleWarm(d, config, 1);
    const store = memoryStore();
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ bound: 1, published: 0 });
    // Still waiting for its runner, which lives: nothing changes.
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ bound: 0, published: 0 });
    expect(store.known.get("41-1")?.id).toBe(w);
    // Its workload exited without the job, and said so (its completion).
    await completeAssignmentRun(d, w!);
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ published: 1 });
    expect(events).toContain("warm_exited");
    expect(store.known.get("41-1")?.id).toBe("forgejo-41-1");
    expect((await d.withState(({ records }) => records.get("forgejo-41-1")))?.jobHandle).toBe("h-41");
  });
});

describe("a poll that dies between binding a job's handle to a warm runner and claiming that runner", () => {
  it("leaves the job to the next polls, and after STALE_BINDING_MS gives it its own runner, never a second one", async () => {
    const config = await provisionEnv(warmPoolEnv());
    const jobs = [waiting(41, 2, 7)];
    const client = stubForgejo(() => jobs, new Set());
    let clock = Date.now();
    let failing = true;
    const dies = failingWrites(
      (id) => id.startsWith("warm-"),
      () => failing,
    );
    const d = createDispatcher({ config, sink: silent, forgejo: client, now: () => clock, decorateState: dies });
    const [w] = await idleWarm(createDispatcher({ config, sink: silent }), config, 1);
    const store = memoryStore();
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ bound: 0, published: 0 });
    expect(store.known.size).toBe(0);
    // Its warm runner is gone meanwhile; the handle still names it.
    failing = false;
    await createDispatcher({ config, sink: silent }).withState(({ records }) =>
      records.update(w!, (r) => written({ ...r, state: "terminated", terminatedAt: new Date().toISOString(), reason: "recycled" })),
    );
    clock = Date.now();
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ bound: 0, published: 0 });
    expect(store.known.size).toBe(0);
    clock += STALE_BINDING_MS + 1_000;
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ published: 1 });
    expect(store.known.get("41-1")?.id).toBe("forgejo-41-1");
  });
});

/** The record of assignment `id`. */
const recordOf = (d: Dispatcher, id: string) => d.withState(({ records }) => records.get(id));
/** Messages in the assignments stream. */
const messages = (d: Dispatcher, config: Config) =>
  d.withState(async (_s, h) => (await (await jetstreamManager(h.nc)).streams.info(config.stream)).state.messages);

/**
 * Three jobs published to their own runners while no warm runner was idle (owner 2's 41 and 42,
 * owner 9's 44, the newest); owner 2 holds three runners. Then one warm runner comes up idle.
 */
async function waitingThenWarm(extra: Record<string, unknown> = {}, decorateState?: (s: State) => State) {
  const env = warmPoolEnv(extra);
  const config = await provisionEnv(env);
  const jobs = [waiting(41, 2, 7), waiting(42, 2, 7), waiting(44, 9, 1)];
  const client = stubForgejo(() => jobs, new Set());
  const events: { event: string; assignment: string }[] = [];
  const d = createDispatcher({
    config,
    sink: { ...silent, event: (e: { event: string; assignment: string }) => void events.push(e) },
    forgejo: client,
    ...(decorateState ? { decorateState } : {}),
  });
  const plain = createDispatcher({ config, sink: silent });
  await holding(plain, 2, 7, 3);
  const store = memoryStore();
  expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ published: 3, bound: 0, moved: 0 });
  const [w] = await idleWarm(plain, config, 1);
  return { env, config, client, d, plain, store, w: w!, jobs, events };
}

describe("jobs that wait for their own runners go to a warm runner that becomes idle, by turn", () => {
  it("the owner holding none gets it before the older jobs of an owner holding three; its own assignment ends, the handle and the poller follow the warm runner", async () => {
    const { config, client, d, plain, store, w, events } = await waitingThenWarm();
    // A pass follows at once: the warm position is being refilled.
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ moved: 1, published: 0, backends: ["pod"] });
    expect((await recordOf(plain, w))?.bound).toMatchObject({ job: 44, attempt: 1, handle: "h-44", repository: "id-9/id-1" });
    expect(await recordOf(plain, "forgejo-44-1")).toMatchObject({ state: "terminated", movedTo: w });
    expect((await recordOf(plain, "forgejo-41-1"))?.state).toBe("received");
    expect(store.known.get("44-1")).toMatchObject({ id: w, boundAt: expect.any(Number) });
    expect(store.known.get("44-1")?.moving).toBeUndefined();
    expect(await plain.withState(({ handles }) => handles.bind("h-44", "forgejo-44-1"))).toBe(w);
    expect(events.map((e) => e.event)).toEqual(expect.arrayContaining(["moved_to_warm", "warm_took_job"]));
    // The next poll moves nothing more: no warm runner is idle.
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ moved: 0, published: 0 });
  });

  it("near miss, FAIR_SHARE=off: the oldest waiting job gets it", async () => {
    const { config, client, d, plain, store, w } = await waitingThenWarm({ FAIR_SHARE: "off" });
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ moved: 1 });
    expect((await recordOf(plain, w))?.bound?.job).toBe(41);
  });

  it("a job whose turn a pass tried while the backend was full (chosen) moves all the same; near misses: one whose runner was asked for, or registered, is not moved", async () => {
    const { config, client, d, plain, store, w } = await waitingThenWarm();
    await plain.withState(({ records }) => records.update("forgejo-44-1", (r) => written({ ...r, state: "capacity_wait", chosen: true })));
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ moved: 1 });
    expect((await recordOf(plain, w))?.bound?.job).toBe(44);

    const other = await waitingThenWarm();
    await other.plain.withState(async ({ records }) => {
      await records.update("forgejo-44-1", (r) => written({ ...r, state: "backend_pending" }));
      // Unadmitted, but with a runner registered for it: its own runner is on its way.
      await records.update("forgejo-41-1", (r) =>
        written({ ...r, runner: { id: 7, name: "gdr-forgejo-41-1", registeredAt: new Date().toISOString(), sealed: "x" } }),
      );
    });
    expect(await pollForgejo(other.d, other.client, other.config.forgejo!, other.store)).toMatchObject({ moved: 1 });
    expect((await recordOf(other.plain, other.w))?.bound?.job).toBe(42);
    expect((await recordOf(other.plain, "forgejo-44-1"))?.state).toBe("backend_pending");
    expect((await recordOf(other.plain, "forgejo-41-1"))?.state).toBe("received");
  });

  it("a pass that stores its runner's registration while the move reads keeps the job: the warm runner goes to the next job in turn, the place back", async () => {
    let racing = true;
    const passFirst = (s: State): State => ({
      ...s,
      records: {
        ...s.records,
        update: async (id, change) => {
          if (racing && id === "forgejo-44-1") {
            racing = false;
            await s.records.update(id, (r) =>
              written({
                ...r,
                state: "backend_pending",
                askedAt: new Date().toISOString(),
                runner: { id: 8, name: "gdr-forgejo-44-1", registeredAt: new Date().toISOString(), sealed: "x" },
              }),
            );
          }
          return s.records.update(id, change);
        },
      },
    });
    const { config, client, d, plain, store, w } = await waitingThenWarm(
      { QUOTAS: JSON.stringify({ repositories: { "id-9/id-1": { limit: 1 } } }) },
      passFirst,
    );
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ moved: 1 });
    expect(racing).toBe(false);
    // The place the move took under the warm runner went back.
    expect(await plain.withState(({ quotas }) => quotas.held(["id-9"]))).toEqual(new Map([["id-9", 0]]));
    expect((await recordOf(plain, "forgejo-44-1"))?.state).toBe("backend_pending");
    expect((await recordOf(plain, w))?.bound?.job).toBe(41);
    expect(store.known.get("44-1")).toMatchObject({ id: "forgejo-44-1" });
    expect(await plain.withState(({ handles }) => handles.bind("h-44", "x"))).toBe("forgejo-44-1");
  });

  it("a job whose turn was given (its slot taken) as it moved: its slot goes back with the end, and the pass that delivers it finds it ended and asks for no runner", async () => {
    const { config, client, d, plain, store, w, events } = await waitingThenWarm();
    // A pass gave it its turn: chosen, a slot, its message to come.
    await plain.withState(async ({ records, admission }) => {
      await records.update("forgejo-44-1", (r) => written({ ...r, chosen: true }));
      expect(await admission.acquire("pod", "forgejo-44-1")).toBe(true);
    });
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ moved: 1 });
    expect((await recordOf(plain, w))?.bound?.job).toBe(44);
    // The slot went back with the end (no runner will be asked for it).
    expect(await plain.withState(({ admission }) => admission.holders("pod"))).not.toContain("forgejo-44-1");
    await d.reconcile("test", 10_000);
    // Its message is termed as of a job that ended, and no runner was registered for it.
    expect(events.filter((e) => e.assignment === "forgejo-44-1").map((e) => e.event)).toContain("already_done");
    expect((await recordOf(plain, "forgejo-44-1"))?.runner).toBeUndefined();
    expect((await recordOf(plain, "forgejo-44-1"))?.state).toBe("terminated");
  });

  it("a warm runner recycled between the end of the job's own assignment and its claim: the end is undone and the job published again, its handle back", async () => {
    const recycled = (s: State): State => ({
      ...s,
      records: {
        ...s.records,
        update: async (id, change) => {
          if (id.startsWith("warm-"))
            await s.records.update(id, (r) =>
              r.state === "backend_ready" ? { ...r, state: "terminated", terminatedAt: new Date().toISOString(), reason: "idle_recycled" } : undefined,
            );
          return s.records.update(id, change);
        },
      },
    });
    const { config, client, d, plain, store, events } = await waitingThenWarm({}, recycled);
    const before = await messages(plain, config);
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ moved: 0 });
    const own = await recordOf(plain, "forgejo-44-1");
    expect(own?.state).toBe("capacity_wait");
    expect(own?.movedTo).toBeUndefined();
    expect(own?.terminatedAt).toBeUndefined();
    expect(await messages(plain, config)).toBe(before + 1);
    expect(await plain.withState(({ handles }) => handles.bind("h-44", "x"))).toBe("forgejo-44-1");
    expect(store.known.get("44-1")).toEqual({ id: "forgejo-44-1", job: 44, attempt: 1, handle: "h-44" });
    expect(events.map((e) => e.event)).toContain("move_undone");
  });

  it("a poll that dies after ending the job's own assignment: the next poll finishes the move", async () => {
    let dying = true;
    const dies = failingWrites(
      (id) => id.startsWith("warm-"),
      () => dying,
    );
    const { config, client, d, plain, store, w, events } = await waitingThenWarm({}, dies);
    await pollForgejo(d, client, config.forgejo!, store);
    expect(store.known.get("44-1")?.moving?.to).toBe(w);
    expect((await recordOf(plain, "forgejo-44-1"))?.movedTo).toBe(w);
    dying = false;
    await pollForgejo(d, client, config.forgejo!, store);
    expect((await recordOf(plain, w))?.bound?.job).toBe(44);
    expect(store.known.get("44-1")).toMatchObject({ id: w, boundAt: expect.any(Number) });
    expect((await recordOf(plain, "forgejo-44-1"))?.state).toBe("terminated");
    expect(events.map((e) => e.event)).not.toContain("move_undone");
  });

  it("near miss, a poll that dies before ending it: the next poll gives the place back and leaves the job waiting for its own runner", async () => {
    let dying = true;
    const dies = failingWrites(
      (id) => id === "forgejo-44-1",
      () => dying,
    );
    const { config, client, d, plain, store, w } = await waitingThenWarm({ QUOTAS: JSON.stringify({ repositories: { "id-9/id-1": { limit: 1 } } }) }, dies);
    await pollForgejo(d, client, config.forgejo!, store);
    expect(store.known.get("44-1")?.moving?.to).toBe(w);
    const held = () => plain.withState(({ quotas }) => quotas.held(["id-9"]));
    expect(await held()).toEqual(new Map([["id-9", 1]]));
    dying = false;
    // Its warm runner is recycled meanwhile: nothing to move to.
    await plain.withState(({ records }) =>
      records.update(w, (r) => written({ ...r, state: "terminated", terminatedAt: new Date().toISOString(), reason: "idle_recycled" })),
    );
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ moved: 0 });
    expect(await held()).toEqual(new Map([["id-9", 0]]));
    expect(store.known.get("44-1")).toEqual({ id: "forgejo-44-1", job: 44, attempt: 1, handle: "h-44" });
    expect((await recordOf(plain, "forgejo-44-1"))?.state).toBe("received");
    // A warm runner idle again: the job moves.
    // Another runner (a record's end is final: its id is not used again).
    const [again] = await idleWarm(plain, config, 1, "y", 1);
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ moved: 1 });
    expect((await recordOf(plain, again!))?.bound?.job).toBe(44);
  });

  it("near miss, a poll that died before ending it, with the warm runner still idle: the next poll ends the job's own assignment before it gives the runner, never the runner alone", async () => {
    let dying = true;
    const dies = failingWrites(
      (id) => id === "forgejo-44-1",
      () => dying,
    );
    const { config, client, d, plain, store, w } = await waitingThenWarm({}, dies);
    await pollForgejo(d, client, config.forgejo!, store);
    expect(store.known.get("44-1")?.moving?.to).toBe(w);
    dying = false;
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ moved: 1 });
    expect((await recordOf(plain, w))?.bound?.job).toBe(44);
    expect(await recordOf(plain, "forgejo-44-1")).toMatchObject({ state: "terminated", movedTo: w });
  });

  it("a moved job whose warm runner exits before taking it waits for its own runner again, published anew", async () => {
    const { config, client, d, plain, store, w, events } = await waitingThenWarm();
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ moved: 1 });
    await completeAssignmentRun(plain, w);
    const before = await messages(plain, config);
    expect(await pollForgejo(d, client, config.forgejo!, store)).toMatchObject({ published: 1 });
    expect(events.map((e) => e.event)).toEqual(expect.arrayContaining(["warm_exited", "move_undone"]));
    expect((await recordOf(plain, "forgejo-44-1"))?.state).toBe("capacity_wait");
    expect(await messages(plain, config)).toBe(before + 1);
    expect(store.known.get("44-1")?.id).toBe("forgejo-44-1");
  });
});

describe("reviveMoved", () => {
  it("undoes only an end that a move made, and only the one to the runner named: a cancelled job stays ended", async () => {
    const config = await provisionEnv(warmPoolEnv());
    const d = createDispatcher({ config, sink: silent });
    const at = new Date().toISOString();
    const ended = (id: string, extra: Partial<AssignmentRecord>) =>
      d.withState(async ({ records }) => {
        await records.offer(assignment(id));
        await records.update(id, (r) => written({ ...r, state: "terminated", terminatedAt: at, reason: "x", ...extra }));
      });
    await ended("forgejo-1-1", {});
    expect(await reviveMoved(d, "forgejo-1-1")).toBe(false);
    expect((await recordOf(d, "forgejo-1-1"))?.state).toBe("terminated");
    await ended("forgejo-2-1", { movedTo: "warm-a" });
    expect(await reviveMoved(d, "forgejo-2-1", "warm-b")).toBe(false);
    expect((await recordOf(d, "forgejo-2-1"))?.state).toBe("terminated");
    // A registration stored by a pass while it was ended is dropped (Forgejo's copy is the cleanup's).
    await ended("forgejo-3-1", { movedTo: "warm-a", runner: { id: 9, name: "gdr-forgejo-3-1", registeredAt: at, sealed: "x" } });
    expect(await reviveMoved(d, "forgejo-3-1", "warm-a")).toBe(true);
    const back = await recordOf(d, "forgejo-3-1");
    expect(back).toMatchObject({ state: "capacity_wait" });
    expect([back?.movedTo, back?.terminatedAt, back?.reason, back?.runner]).toEqual([undefined, undefined, undefined, undefined]);
    // Once: a second call finds nothing to undo.
    expect(await reviveMoved(d, "forgejo-3-1", "warm-a")).toBe(false);
  });
});

describe("a published Forgejo job that Forgejo lists running (the poll plan's claim)", () => {
  async function running(runner: boolean) {
    const config = await provisionEnv(warmPoolEnv());
    const id = "forgejo-51-1";
    const jobs = [{ ...waiting(51, 2, 7), status: "running", task_id: 9 }];
    const client = stubForgejo(() => jobs, new Set());
    const d = createDispatcher({ config, sink: silent, forgejo: client });
    await d.withState(async ({ records }) => {
      await records.offer(assignment(id));
      const now = new Date().toISOString();
      if (runner)
        await records.update(id, (r) =>
          written({
            ...r,
            state: "backend_ready",
            askedAt: now,
            readyAt: now,
            runner: { id: 5, name: `gdr-${id}`, registeredAt: now, sealed: "x", place: forgejoPlace(config.forgejo!) },
          }),
        );
    });
    const store = memoryStore([{ id, job: 51, attempt: 1, handle: "h-51" }]);
    const outcome = await pollForgejo(d, client, config.forgejo!, store);
    return { outcome, record: await recordOf(d, id), known: store.known.get("51-1") };
  }

  it("with no runner of ours registered for it, another runner took it: its assignment is cancelled, never claimed", async () => {
    const { outcome, record, known } = await running(false);
    expect(outcome).toMatchObject({ claimed: 0, ended: 1 });
    expect(record).toMatchObject({ state: "terminated", reason: "a runner not registered by the dispatcher took the job" });
    expect(known?.claimed).toBe(true);
  });

  it("near miss: with its runner registered, the job running is its claim", async () => {
    const { outcome, record } = await running(true);
    expect(outcome).toMatchObject({ claimed: 1, ended: 0 });
    expect(record).toMatchObject({ state: "claimed" });
  });
});
