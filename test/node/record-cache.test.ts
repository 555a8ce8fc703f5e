// The records store's cache (state/record-cache.ts): a change by compare-and-set is first written
// at the revision this isolate last saw, without a read. Against the real nats-server, reads
// counted on the bucket. Near misses: another writer since (the write at the kept revision fails,
// the change is made from a fresh read), a guard that refuses the kept record but accepts the
// latest, a change the machine refuses from the kept state but not from the latest.
import type { KV } from "@nats-io/kv";
import { describe, expect, inject, it } from "vitest";
import { recordsBucket } from "../../src/nats/names.ts";
import { withNats } from "../../src/nats/connection.ts";
import { bindBucket, readManyJson } from "../../src/state/kv.ts";
import { createRecordStore, type AssignmentRecord, type RecordStore } from "../../src/state/records.ts";
import { createRecordCache, OFFERED_MS } from "../../src/state/record-cache.ts";
import { claim, complete, terminate } from "../../src/state/transitions.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";
import { written } from "../harness/memory.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const at = () => new Date().toISOString();

/**
 * Two stores on one bucket: `cached` with a cache and its reads counted, `other` another isolate's.
 * `cached` sees the time `skew` ms ahead; `failCreates` makes its record creations fail.
 */
async function stores<T>(
  fn: (s: { cached: RecordStore; other: RecordStore; reads: () => number; skew: (ms: number) => void; failCreates: (on: boolean) => void }) => Promise<T>,
) {
  const config = await provisionEnv(testEnv(nats, backendUrl));
  const bucket = recordsBucket({ stream: config.stream, subjectBase: config.subjectBase });
  return withNats(config, async (h) => {
    const kv = await bindBucket(h, bucket);
    let reads = 0;
    let skewMs = 0;
    let failing = false;
    const counted = new Proxy(kv, {
      get(target, prop, receiver) {
        const value: unknown = Reflect.get(target, prop, receiver);
        if (prop === "get") return (...args: Parameters<KV["get"]>) => (reads++, target.get(...args));
        if (prop === "create" && failing) return () => Promise.reject(new Error("the records bucket went away"));
        return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const readMany = (keys: string[]) => ((reads += 1), readManyJson<AssignmentRecord>(h, bucket, keys));
    const cached = createRecordStore(counted, () => Date.now() + skewMs, readMany, counted, createRecordCache());
    const other = createRecordStore(kv, Date.now, (keys) => readManyJson(h, bucket, keys));
    return fn({ cached, other, reads: () => reads, skew: (ms) => (skewMs = ms), failCreates: (on) => (failing = on) });
  });
}

describe("the records store with a cache", () => {
  it("claims after its own write, and completes after its claim, without reading the record", async () => {
    await stores(async ({ cached, reads }) => {
      const offered = await cached.offer(assignment("k1"));
      // As a pass writes: at the revision its batch read gave.
      await cached.updateFrom({ value: offered.record, revision: offered.revision }, (r) => written({ ...r, state: "backend_pending", askedAt: at() }));
      const before = reads();
      const claimed = await claim(cached, "k1", { at: at() });
      const completed = await complete(cached, "k1", { at: at() });
      expect(reads() - before).toBe(0);
      expect([claimed.changed, completed.changed]).toEqual([true, true]);
      expect(await cached.get("k1")).toMatchObject({ state: "completed" });
    });
  });

  it("near miss: another writer since: the write at the kept revision fails, and the change is made from a fresh read", async () => {
    await stores(async ({ cached, other, reads }) => {
      await cached.offer(assignment("k2"));
      await terminate(other, "k2", { at: at(), reason: "cancelled" });
      const before = reads();
      const claimed = await claim(cached, "k2", { at: at() });
      expect(claimed).toMatchObject({ changed: false, record: { state: "terminated", reason: "cancelled" } });
      expect(reads() - before).toBe(1);
    });
  });

  it("near miss: a guard that refuses the kept record asks the latest", async () => {
    await stores(async ({ cached, other }) => {
      await cached.offer(assignment("k3"));
      // Registered by another isolate's pass: only the latest record names the runner.
      await other.update("k3", (r) =>
        written({ ...r, state: "backend_pending", askedAt: at(), runner: { id: 7, name: "r7", registeredAt: at(), sealed: "x" } }),
      );
      const claimed = await claim(cached, "k3", { at: at(), when: (r) => r.runner?.id === 7 });
      expect(claimed).toMatchObject({ changed: true, record: { state: "claimed" } });
    });
  });

  it("near miss: a change the machine refuses from the kept state, but not from the latest, is made", async () => {
    await stores(async ({ cached, other }) => {
      await cached.offer(assignment("k4"));
      await cached.update("k4", (r) => written({ ...r, state: "claimed", claimedAt: at() }));
      // Gone back to waiting elsewhere, as only a record written by hand can: claimed → backend_pending is no transition.
      const kept = await other.getFromLeader("k4");
      await other.updateFrom({ ...kept!, value: written({ ...kept!.value, state: "received" }) }, (r) =>
        written({ ...r, state: "capacity_wait", claimedAt: undefined }),
      );
      const after = await cached.update("k4", (r) => written({ ...r, state: "backend_pending", askedAt: at() }));
      expect(after).toMatchObject({ state: "backend_pending" });
    });
  });
});

describe("the records this isolate keeps (RecordStore.kept)", () => {
  it("are those it offered or read, at any revision; near misses: one it never saw, one that ended, and a store with no cache", async () => {
    await stores(async ({ cached, other }) => {
      await cached.offer({ ...assignment("kp1"), job: { id: 1, runId: 1, attempt: 1, repository: "acme/app" } });
      await other.offer(assignment("kp2"));
      await other.offer(assignment("kp3"));
      await cached.get("kp3");
      await terminate(cached, "kp3", { at: at(), reason: "cancelled" });
      // Changed by another isolate since: kept as seen (whose job it is has not changed).
      await terminate(other, "kp1", { at: at(), reason: "cancelled" });
      const kept = cached.kept(["kp1", "kp2", "kp3", "constructor"]);
      expect([...kept.keys()]).toEqual(["kp1"]);
      expect(kept.get("kp1")?.job?.repository).toBe("acme/app");
      expect(other.kept(["kp1", "kp2"]).size).toBe(0);
    });
  });
});

describe("a first delivery's record, from this isolate's offer", () => {
  it("is the offer's, at its revision, without a read", async () => {
    await stores(async ({ cached, reads }) => {
      const offered = await cached.offer(assignment("f1"));
      const before = reads();
      const got = await cached.getMany(["f1"], new Set(["f1"]));
      expect(reads() - before).toBe(0);
      expect(got.get("f1")).toEqual({ value: offered.record, revision: offered.revision });
    });
  });

  it("answers while the offer is still in flight, once it is made", async () => {
    await stores(async ({ cached, reads }) => {
      const offering = cached.offer(assignment("f2"));
      const got = cached.getMany(["f2"], new Set(["f2"]));
      const offered = await offering;
      expect((await got).get("f2")?.revision).toBe(offered.revision);
      expect(reads()).toBe(0);
    });
  });

  it("near misses: not a first delivery, asked a second time, another isolate's offer: each is read", async () => {
    await stores(async ({ cached, other, reads }) => {
      await cached.offer(assignment("f3"));
      await other.offer(assignment("f4"));
      let before = reads();
      expect((await cached.getMany(["f3"])).get("f3")?.value.state).toBe("received");
      expect(reads() - before).toBe(1);
      await cached.offer(assignment("f5"));
      await cached.getMany(["f5"], new Set(["f5"]));
      before = reads();
      expect((await cached.getMany(["f5"], new Set(["f5"]))).has("f5")).toBe(true);
      expect(reads() - before).toBe(1);
      before = reads();
      expect((await cached.getMany(["f4"], new Set(["f4"]))).get("f4")?.value.state).toBe("received");
      expect(reads() - before).toBe(1);
    });
  });

  it(`near misses: an offer older than ${OFFERED_MS} ms, a record changed since, an offer that failed: each is read`, async () => {
    await stores(async ({ cached, other, reads, skew, failCreates }) => {
      await cached.offer(assignment("f6"));
      skew(OFFERED_MS + 1);
      let before = reads();
      await cached.getMany(["f6"], new Set(["f6"]));
      expect(reads() - before).toBe(1);
      skew(0);
      // Changed here since (a cancel this isolate handled): the latest is read, not the offer's.
      await cached.offer(assignment("f7"));
      await cached.update("f7", (r) => written({ ...r, state: "terminated", terminatedAt: at(), reason: "cancelled" }));
      before = reads();
      expect((await cached.getMany(["f7"], new Set(["f7"]))).get("f7")?.value).toMatchObject({ state: "terminated" });
      expect(reads() - before).toBe(1);
      failCreates(true);
      await expect(cached.offer(assignment("f8"))).rejects.toThrow("went away");
      failCreates(false);
      await other.offer(assignment("f8"));
      before = reads();
      expect((await cached.getMany(["f8"], new Set(["f8"]))).get("f8")?.value.state).toBe("received");
      expect(reads() - before).toBe(1);
    });
  });

  it("a turn's republished message: the chosen record this isolate wrote answers it; near miss: one it never saw is read", async () => {
    await stores(async ({ cached, other, reads }) => {
      await other.offer(assignment("f10"));
      await other.offer(assignment("f11"));
      const chosen = await cached.update("f10", (r) => written({ ...r, state: "capacity_wait", chosen: true }));
      cached.republished("f10");
      cached.republished("f11");
      let before = reads();
      const got = await cached.getMany(["f10"], new Set(["f10"]));
      expect(got.get("f10")?.value).toEqual(chosen);
      expect(reads() - before).toBe(0);
      before = reads();
      expect((await cached.getMany(["f11"], new Set(["f11"]))).has("f11")).toBe(true);
      expect(reads() - before).toBe(1);
    });
  });

  it("a record another isolate changed since is answered as offered; the first write at its revision fails and reads", async () => {
    await stores(async ({ cached, other, reads }) => {
      await cached.offer(assignment("f9"));
      await terminate(other, "f9", { at: at(), reason: "cancelled" });
      const known = (await cached.getMany(["f9"], new Set(["f9"]))).get("f9")!;
      expect(known.value.state).toBe("received");
      const before = reads();
      // As a pass's write: a record no longer waiting is left as it is.
      const after = await cached.updateFrom(known, (r) => (r.state === "received" ? written({ ...r, state: "backend_pending", askedAt: at() }) : undefined));
      expect(after?.value).toMatchObject({ state: "terminated", reason: "cancelled" });
      expect(reads() - before).toBe(1);
    });
  });
});

describe("the cache itself", () => {
  const rec = (id: string) => written({ id, state: "received" });
  it("keeps the latest revision it saw, and at most its limit, the least recently seen going first", () => {
    const cache = createRecordCache(2);
    cache.note({ value: rec("a"), revision: 5 });
    cache.note({ value: rec("a"), revision: 3 });
    expect(cache.get("a")?.revision).toBe(5);
    cache.note({ value: rec("b"), revision: 6 });
    cache.note({ value: rec("a"), revision: 7 });
    cache.note({ value: rec("c"), revision: 8 });
    expect([cache.get("a")?.revision, cache.get("b"), cache.get("c")?.revision]).toEqual([7, undefined, 8]);
    // Ids that are not what they seem are ids like any other.
    cache.note({ value: rec("constructor"), revision: 9 });
    expect(cache.get("constructor")?.revision).toBe(9);
    expect(cache.get("__proto__")).toBeUndefined();
  });

  it("lets an ended record go, so that it holds the jobs that live, not every job it saw", () => {
    const cache = createRecordCache();
    cache.note({ value: rec("d"), revision: 1 });
    cache.note({ value: written({ id: "d", state: "completed" }), revision: 2 });
    expect(cache.get("d")).toBeUndefined();
    cache.note({ value: written({ id: "e", state: "terminated" }), revision: 3 });
    expect(cache.get("e")).toBeUndefined();
    // Near miss: a claimed record stays (its completion comes next).
    cache.note({ value: written({ id: "f", state: "claimed" }), revision: 4 });
    expect(cache.get("f")?.revision).toBe(4);
  });
});
