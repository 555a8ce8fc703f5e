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
import { createRecordCache } from "../../src/state/record-cache.ts";
import { claim, complete, terminate } from "../../src/state/transitions.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";
import { written } from "../harness/memory.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const at = () => new Date().toISOString();

/** Two stores on one bucket: `cached` with a cache and its reads counted, `other` another isolate's. */
async function stores<T>(fn: (s: { cached: RecordStore; other: RecordStore; reads: () => number }) => Promise<T>) {
  const config = await provisionEnv(testEnv(nats, backendUrl));
  const bucket = recordsBucket({ stream: config.stream, subjectBase: config.subjectBase });
  return withNats(config, async (h) => {
    const kv = await bindBucket(h, bucket);
    let reads = 0;
    const counted = new Proxy(kv, {
      get(target, prop, receiver) {
        const value: unknown = Reflect.get(target, prop, receiver);
        if (prop === "get") return (...args: Parameters<KV["get"]>) => (reads++, target.get(...args));
        return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const readMany = (keys: string[]) => ((reads += 1), readManyJson<AssignmentRecord>(h, bucket, keys));
    const cached = createRecordStore(counted, Date.now, readMany, counted, createRecordCache());
    const other = createRecordStore(kv, Date.now, (keys) => readManyJson(h, bucket, keys));
    return fn({ cached, other, reads: () => reads });
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
