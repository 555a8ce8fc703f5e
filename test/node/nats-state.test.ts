// Against the real nats-server: publish dedup, offers, admission under concurrency, provisioning.
import { written } from "../harness/memory.ts";
import { jetstreamManager } from "@nats-io/jetstream";
import { describe, expect, inject, it } from "vitest";
import fc from "fast-check";
import { assignmentIdSchema, encodeAssignment } from "../../src/model/assignment.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { createAdmission } from "../../src/state/admission.ts";
import { Conflict } from "../../src/model/errors.ts";
import { FAIR_SHARE_WINDOW, provision, ReplicasUnavailable } from "../../src/nats/layout.ts";
import { inspect, PROVISION } from "../../src/nats/layout-inspect.ts";
import { TEARDOWNS_PER_TICK } from "../../src/domain/teardown.ts";
import { assignmentSubject, consumerName } from "../../src/nats/names.ts";
import { withNats } from "../../src/nats/connection.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { loadConfig } from "../../src/app/config.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backend = inject("backendUrl");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };

describe("JetStream handoff against nats-server", () => {
  it("publishes one message for one id, however often it is sent", async () => {
    const config = await provisionEnv(testEnv(nats, backend));
    const d = createDispatcher({ config, sink: silent });
    const body = { version: 1, id: "dup-1", backend: "pod", labels: ["x"] };
    const first = await publishAssignment(d, body);
    const again = await publishAssignment(d, { ...body, createdAt: "2030-01-01T00:00:00Z" });
    expect(first).toMatchObject({ id: "dup-1", stream: config.stream, duplicate: false });
    expect(again).toMatchObject({ seq: first.seq, duplicate: true });
    // Even a direct publish with the same Nats-Msg-Id is dropped by the stream.
    await withNats(config, async (h) => {
      const ack = await h.js.publish(assignmentSubject(config, "pod"), encodeAssignment(assignment("dup-1", ["x"])), { msgID: "dup-1" });
      expect(ack.duplicate).toBe(true);
      const info = await (await jetstreamManager(h.nc)).streams.info(config.stream);
      expect(info.state.messages).toBe(1);
    });
  });

  it("offers are idempotent for equal content and conflict otherwise", async () => {
    const config = await provisionEnv(testEnv(nats, backend));
    const d = createDispatcher({ config, sink: silent });
    await d.withState(async ({ records }) => {
      expect((await records.offer(assignment("o-1"))).result).toBe("new");
      expect((await records.offer({ ...assignment("o-1"), createdAt: "2031-01-01T00:00:00Z" })).result).toBe("same");
      expect((await records.offer(assignment("o-1", ["other"]))).result).toBe("conflict");
      const concurrent = await Promise.all(Array.from({ length: 10 }, () => records.offer(assignment("o-2"))));
      expect(concurrent.filter((o) => o.result === "new")).toHaveLength(1);
      expect(concurrent.filter((o) => o.result === "same")).toHaveLength(9);
    });
  });

  it("a conflicting publish is refused and nothing is queued", async () => {
    const config = await provisionEnv(testEnv(nats, backend));
    const d = createDispatcher({ config, sink: silent });
    await publishAssignment(d, { version: 1, id: "c-1", backend: "pod", labels: ["a"] });
    await expect(publishAssignment(d, { version: 1, id: "c-1", backend: "pod", labels: ["b"] })).rejects.toBeInstanceOf(Conflict);
    await withNats(config, async (h) => expect((await (await jetstreamManager(h.nc)).streams.info(config.stream)).state.messages).toBe(1));
  });

  it("admits exactly capacity of 20 concurrent acquires, idempotently per id, across connections", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 5 }));
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        // Separate dispatchers and connections: as separate Worker invocations would be.
        createDispatcher({ config, sink: silent }).withState(({ admission }) => admission.acquire("pod", `job-${i}`)),
      ),
    );
    expect(results.filter(Boolean)).toHaveLength(5);
    const d = createDispatcher({ config, sink: silent });
    await d.withState(async ({ admission }) => {
      const holders = await admission.holders("pod");
      expect(holders).toHaveLength(5);
      expect(await admission.acquire("pod", holders[0]!)).toBe(true);
      expect(await admission.acquire("pod", "job-late")).toBe(false);
      await admission.release("pod", holders[0]!);
      await admission.release("pod", holders[0]!);
      expect(await admission.acquire("pod", "job-late")).toBe(true);
      expect(await admission.holders("pod")).toHaveLength(5);
    });
  });

  it("reserves one registration per id, and ending it keeps the slot and frees the next reservation", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 2 }));
    const d = createDispatcher({ config, sink: silent });
    await d.withState(async ({ admission }) => {
      const first = await admission.acquireMany("pod", ["a", "b"], new Set(["a"]));
      expect([...first.admitted]).toEqual(["a", "b"]);
      expect([...first.reserved]).toEqual(["a"]);
      expect([...(await admission.acquireMany("pod", ["a"], new Set(["a"]))).reserved]).toEqual([]);
      expect(await admission.registering("pod")).toEqual(["a"]);
      await admission.endRegistrations("pod", ["a", "never-reserved"]);
      expect(await admission.registering("pod")).toEqual([]);
      expect((await admission.holders("pod")).toSorted()).toEqual(["a", "b"]);
      expect([...(await admission.acquireMany("pod", ["a"], new Set(["a"]))).reserved]).toEqual(["a"]);
      // Taken again from "open": the next caller waits.
      expect([...(await admission.acquireMany("pod", ["a", "b"], new Set(["a", "b"]))).reserved]).toEqual(["b"]);
      expect((await admission.registering("pod")).toSorted()).toEqual(["a", "b"]);
    });
  });

  it("a registration word about an older slot of the same id grants nothing", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 2 }));
    await createDispatcher({ config, sink: silent }).withState(async ({ admission }, h) => {
      await admission.acquireMany("pod", ["a"], new Set(["a"]));
      await admission.endRegistrations("pod", ["a"]); // "open", for this slot
      // The slot goes, but the word stays (a release whose second purge was lost).
      await (await jetstreamManager(h.nc)).streams.purge(`${config.stream}_slots_pod`, { filter: `${config.subjectBase}.slots.pod.a` });
      expect([...(await admission.acquireMany("pod", ["a"], new Set(["a"]))).reserved]).toEqual(["a"]);
      expect([...(await admission.acquireMany("pod", ["a"], new Set(["a"]))).reserved]).toEqual([]);
      expect(await admission.registering("pod")).toEqual(["a"]);
    });
  });

  it("a release leaves the registration word to its lease: the id registers no more, and its next slot reserves at once", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 2 }));
    await createDispatcher({ config, sink: silent }).withState(async ({ admission }) => {
      await admission.acquireMany("pod", ["a"], new Set(["a"]));
      await admission.endRegistrations("pod", ["a"]);
      // Reserved again on the same slot: the word says "mine" until its lease ends.
      expect([...(await admission.acquireMany("pod", ["a"], new Set(["a"]))).reserved]).toEqual(["a"]);
      await admission.release("pod", "a");
      expect(await admission.snapshot("pod")).toEqual({ holders: [], registering: [] });
      expect([...(await admission.acquireMany("pod", ["a"], new Set(["a"]))).reserved]).toEqual(["a"]);
      // Near miss: while that reservation lives, nobody else gets one.
      expect([...(await admission.acquireMany("pod", ["a"], new Set(["a"]))).reserved]).toEqual([]);
      await admission.releaseAgain("pod", "a", "nobody");
      expect(await admission.holders("pod")).toEqual([]);
    });
  });

  it("adds a batch of start-up times to a pool's histogram in one write, beside what was there", async () => {
    const config = await provisionEnv(testEnv(nats, backend));
    await createDispatcher({ config, sink: silent }).withState(async ({ startups }) => {
      await startups.observe("p", [{ seconds: 2, via: "reuse" }]);
      await startups.observe("p", [{ seconds: 0.5, via: "reuse" }, { seconds: 4, via: "new" }, { seconds: 4000 }]);
      const h = (await startups.read(["p", "q"])).get("p")!;
      expect(h).toMatchObject({ count: 4, sum: 4006.5 });
      // Cumulative: le=1 holds 0.5; le=5 holds 0.5, 2 and 4; 4000 is past the last bound.
      expect([h.buckets[0], h.buckets[3], h.buckets.at(-1)]).toEqual([1, 3, 3]);
      // Split by how the runner came, across the two writes; one observed without a via is in the pool's figures alone.
      expect(h.via?.reuse).toMatchObject({ count: 2, sum: 2.5 });
      expect([h.via?.reuse?.buckets[0], h.via?.reuse?.buckets[1]]).toEqual([1, 2]);
      expect(h.via?.new).toMatchObject({ count: 1, sum: 4 });
      expect(Object.keys(h.via ?? {}).sort()).toEqual(["new", "reuse"]);
      expect((await startups.read(["q"])).size).toBe(0);
    });
  });

  it("counts ids named after Object.prototype properties like any other id", async () => {
    const names = ["constructor", "toString", "valueOf", "hasOwnProperty", "isPrototypeOf", "propertyIsEnumerable", "toLocaleString", "__defineGetter__"];
    const ids = fc.uniqueArray(
      fc.oneof(fc.constantFrom(...names.filter((n) => assignmentIdSchema.safeParse(n).success)), fc.stringMatching(/^[a-z][a-z0-9-]{0,8}$/)),
      { minLength: 1, maxLength: 12 },
    );
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 4 }), ids, ids, async (capacity, first, second) => {
        const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: capacity }));
        const d = createDispatcher({ config, sink: silent });
        await d.withState(async ({ admission }) => {
          const a = await admission.acquireMany("pod", first, new Set(first));
          expect(a.admitted.size).toBe(Math.min(capacity, first.length));
          expect(a.reserved).toEqual(a.admitted);
          const b = await admission.acquireMany("pod", second, new Set(second));
          const holders = await admission.holders("pod");
          expect(holders.length).toBeLessThanOrEqual(capacity);
          // Admitted now: exactly those that hold a slot, held before or newly granted.
          for (const id of second) expect(b.admitted.has(id)).toBe(holders.includes(id));
          for (const id of second) expect(b.reserved.has(id)).toBe(b.admitted.has(id) && !a.reserved.has(id));
          await admission.release("pod", ...holders);
          expect(await admission.holders("pod")).toEqual([]);
        });
      }),
      { numRuns: 15, seed: Number(process.env.FC_SEED ?? 20261201) },
    );
    // The case that was: two ordinary ids and two prototype names against capacity 2.
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 2 }));
    const admitted = await createDispatcher({ config, sink: silent }).withState(({ admission }) =>
      admission.acquireMany("pod", ["a-1", "a-2", "constructor", "toString"]),
    );
    expect([...admitted.admitted]).toEqual(["a-1", "a-2"]);
  });

  it("a write from a stale read loses to the claim that came between", async () => {
    const config = await provisionEnv(testEnv(nats, backend));
    const d = createDispatcher({ config, sink: silent });
    await d.withState(async ({ records }) => {
      await records.offer(assignment("s-1"));
      const stale = (await records.getMany(["s-1"])).get("s-1")!;
      await records.update("s-1", (r) => written({ ...r, state: "claimed" }));
      // mark_ready as the reconciler applies it: never over a claim it can see.
      const markReady = (r: AssignmentRecord) => (r.state === "claimed" ? undefined : written({ ...r, state: "backend_ready" }));
      expect((await records.updateFrom(stale, markReady))?.value.state).toBe("claimed");
      expect((await records.get("s-1"))?.state).toBe("claimed");
    });
  });

  it("a Forgejo handle is bound to the first runner that asks, moves only from the runner its binder names, and never to a third", async () => {
    const config = await provisionEnv(testEnv(nats, backend));
    const d = createDispatcher({ config, sink: silent });
    await d.withState(async ({ handles }) => {
      const h = "0b7c5c2e-handle";
      const [a, b] = await Promise.all([handles.bind(h, "warm-a"), handles.bind(h, "forgejo-9-1")]);
      // Two pollers at once: one wins, and both are told which.
      expect(a).toBe(b);
      const first = a;
      const other = first === "warm-a" ? "forgejo-9-1" : "warm-a";
      expect(await handles.bind(h, other)).toBe(first);
      // Moved on by whoever bound it (its warm runner was taken meanwhile), and only from there.
      expect(await handles.bind(h, "warm-b", other)).toBe(first);
      expect(await handles.bind(h, "warm-b", first)).toBe("warm-b");
      expect(await handles.bind(h, "warm-c", first)).toBe("warm-b");
      expect(await handles.bind(h, "warm-b")).toBe("warm-b");
      // A handle named like an Object member is a handle like any other.
      expect(await handles.bind("constructor", "x-1")).toBe("x-1");
    });
  });

  it("teardowns past the per-tick limit are retried oldest first; one listed twice keeps its first time", async () => {
    const config = await provisionEnv(testEnv(nats, backend));
    const d = createDispatcher({ config, sink: silent });
    await d.withState(async ({ teardowns }) => {
      // Ids in the reverse order of their failures: the key order is not the age.
      const base = Date.parse("2026-12-03T10:00:00Z");
      for (let i = 0; i < 25; i++)
        await teardowns.add({ id: `t-${String(i).padStart(2, "0")}`, backend: "pod", since: new Date(base - i * 60_000).toISOString() });
      await teardowns.add({ id: "t-00", backend: "pod", since: new Date(base - 3_600_000).toISOString() });
      const first = await teardowns.list(TEARDOWNS_PER_TICK);
      expect(first.map((t) => t.id)).toEqual(Array.from({ length: TEARDOWNS_PER_TICK }, (_, i) => `t-${String(24 - i).padStart(2, "0")}`));
      for (const t of first) await teardowns.done(t.id);
      expect((await teardowns.list(TEARDOWNS_PER_TICK)).map((t) => t.id)).toEqual(["t-04", "t-03", "t-02", "t-01", "t-00"]);
    });
  });

  it("a release says whether it freed a slot of a full pool (someone may be waiting for it)", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 3 }));
    await createDispatcher({ config, sink: silent }).withState(async ({ admission }) => {
      await admission.acquireMany("pod", ["a", "b", "c"]);
      expect(await admission.release("pod", "nobody")).toBe(false);
      expect(await admission.release("pod", "a")).toBe(true);
      await admission.release("pod", "b"); // one short of full: either answer is allowed
      expect(await admission.release("pod", "c")).toBe(false);
      expect(await admission.release("pod", "c")).toBe(false);
    });
  });

  it("with jobs in the wait set, a release that freed a slot says so though its backend was not full; one that freed none does not", async () => {
    // Two releases at once each see the other's slot gone: neither finds its backend full, yet a
    // job waits for both slots. Fair share asks the wait set instead of losing the wake-up.
    // Two of four held: a release's count may be read before its own purge, so one short of full
    // could look full.
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 4, CAPACITY_VM: 4, VM_BACKEND_URL: backend }));
    await createDispatcher({ config, sink: silent }).withState(async ({ admission, waiting }) => {
      await admission.acquireMany("pod", ["a", "b"]);
      expect(await admission.release("pod", "a")).toBe(false);
      await waiting.add("pod", { id: "w", owner: "o", repository: "o/r", data: btoa("{}") }, "inc");
      expect(await admission.release("pod", "nobody")).toBe(false);
      expect(await admission.release("pod", "b")).toBe(true);
      // Waiting for another backend wakes nobody here.
      await admission.acquireMany("vm", ["v", "u"]);
      expect(await admission.release("vm", "v")).toBe(false);
    });
    // FAIR_SHARE=off: no wait set, a freed slot of a backend that was not full wakes nobody.
    const off = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 4, FAIR_SHARE: "off" }));
    await createDispatcher({ config: off, sink: silent }).withState(async ({ admission, waiting }) => {
      await waiting.add("pod", { id: "w", owner: "o", repository: "o/r", data: btoa("{}") }, "inc");
      await admission.acquireMany("pod", ["a", "b"]);
      expect(await admission.release("pod", "a")).toBe(false);
    });
  });

  it("reclaims a slot and a registration whose leases expired (message TTL on the server)", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 1 }));
    await withNats(config, async (h) => {
      // The config's minimum lease is a minute; the module takes the server's 1 s granularity.
      const admission = createAdmission(h, { names: config, capacity: config.capacity, leaseTtlMs: 1_000, registrationLeaseMs: 1_000 });
      expect((await admission.acquireMany("pod", ["a"], new Set(["a"]))).reserved).toEqual(new Set(["a"]));
      expect(await admission.acquire("pod", "b")).toBe(false);
      await sleep(2_500);
      expect(await admission.holders("pod")).toEqual([]);
      expect(await admission.registering("pod")).toEqual([]);
      expect(await admission.acquire("pod", "b")).toBe(true);
      expect(await admission.acquire("pod", "a")).toBe(false);
    });
  });

  it("keeps ids with dots apart from their near misses, and lists them as they were given", async () => {
    const config = await provisionEnv(testEnv(nats, backend, { CAPACITY_POD: 4, CAPACITY_VM: 4, VM_BACKEND_URL: backend }));
    await createDispatcher({ config, sink: silent }).withState(async ({ admission }) => {
      const ids = ["v1.2", "v1-2", "v1.2.", "v12"];
      expect([...(await admission.acquireMany("pod", ids)).admitted]).toEqual(ids);
      expect((await admission.holders("pod")).toSorted()).toEqual(ids.toSorted());
      expect(await admission.release("pod", "v1.2")).toBe(true);
      expect((await admission.holders("pod")).toSorted()).toEqual(["v1-2", "v1.2.", "v12"]);
    });
  });

  it("refuses JETSTREAM_REPLICAS=3 on a single server with one clear message, creating nothing", async () => {
    const config = loadConfig(testEnv(nats, backend, { JETSTREAM_REPLICAS: "3" }));
    await withNats(config, async (h) => {
      const jsm = await jetstreamManager(h.nc);
      const before = (await jsm.streams.names().next()).length;
      const err = await provision(h, config).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ReplicasUnavailable);
      expect((err as Error).message).toMatch(
        /^JETSTREAM_REPLICAS=3 needs a NATS cluster with at least 3 JetStream servers, and the server refused \(.+\)\. Nothing was created or changed\./,
      );
      expect((await jsm.streams.names().next()).length).toBe(before);
      expect((await inspect(h, config)).problems).toEqual([
        expect.stringMatching(`stream ${config.stream} is missing`),
        expect.stringMatching(`stream ${config.stream}_slots_pod is missing`),
        expect.stringMatching(`stream ${config.stream}_registering is missing`),
        expect.stringMatching(`stream ${config.stream}_waiting is missing`),
        expect.stringMatching(`KV bucket ${config.stream}_records is missing`),
      ]);
    });
    for (const bad of ["2", "0", "-1", "three", "3.0", "33"]) {
      expect(() => loadConfig(testEnv(nats, backend, { JETSTREAM_REPLICAS: bad }))).toThrow(/JETSTREAM_REPLICAS must be 1, 3 or 5/);
    }
  });

  it("provisioning twice is idempotent and follows a configuration change", async () => {
    // First come, first served: the consumer's window is the capacity.
    const env = testEnv(nats, backend, { CAPACITY_POD: 3, FAIR_SHARE: "off" });
    const config = loadConfig(env);
    await withNats(config, async (h) => {
      expect((await inspect(h, config)).problems).toEqual([
        expect.stringMatching(`stream ${config.stream} is missing`),
        expect.stringMatching(`stream ${config.stream}_slots_pod is missing`),
        expect.stringMatching(`stream ${config.stream}_registering is missing`),
        expect.stringMatching(`stream ${config.stream}_waiting is missing`),
        expect.stringMatching(`KV bucket ${config.stream}_records is missing`),
      ]);
      expect(await provision(h, config)).toContain(`stream ${config.stream}: created (R1)`);
      expect(await provision(h, config)).toContain(`stream ${config.stream}: updated`);
      expect(await inspect(h, config)).toMatchObject({ ok: true, problems: [] });
      const jsm = await jetstreamManager(h.nc);
      const consumer = await jsm.consumers.info(config.stream, consumerName("pod"));
      expect(consumer.config).toMatchObject({
        max_ack_pending: 3,
        max_deliver: 1000,
        ack_policy: "explicit",
        filter_subject: assignmentSubject(config, "pod"),
      });
      const stream = await jsm.streams.info(config.stream);
      expect(stream.config).toMatchObject({ retention: "workqueue", storage: "file", subjects: [`${config.subjectBase}.*`] });

      const changed = loadConfig({ ...env, CAPACITY_POD: "7" });
      expect((await inspect(h, changed)).problems).toEqual([
        `consumer pod: max_ack_pending is 3, configuration wants 7 (set by CAPACITY_POD and FAIR_SHARE: ${PROVISION})`,
        `stream ${config.stream}_slots_pod admits 3 runners, configuration wants 7 (set by CAPACITY_POD: ${PROVISION})`,
      ]);
      // Provisioning names what it changes.
      expect(await provision(h, changed)).toEqual(
        expect.arrayContaining(["consumer pod: updated (max_ack_pending 3 → 7)", `stream ${config.stream}_slots_pod: updated (max_msgs 3 → 7)`]),
      );
      expect((await jsm.consumers.info(config.stream, "pod")).config.max_ack_pending).toBe(7);

      // Fair share: the window is wider, so that the jobs behind booting runners reach the wait set.
      const fair = loadConfig({ ...env, CAPACITY_POD: "7", FAIR_SHARE: "on" });
      expect((await inspect(h, fair)).problems).toEqual([expect.stringContaining(`max_ack_pending is 7, configuration wants ${7 + FAIR_SHARE_WINDOW}`)]);
      await provision(h, fair);
      expect((await jsm.consumers.info(config.stream, "pod")).config.max_ack_pending).toBe(7 + FAIR_SHARE_WINDOW);
    });
  });
});
