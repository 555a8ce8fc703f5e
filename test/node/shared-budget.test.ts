// The shared Hetzner rate budget (backends/hetzner/shared-budget.ts) over an in-memory record with
// compare-and-set, whose reads and writes yield between them as a NATS round trip would: many
// invocations at once never take more than is left, deletes keep their floor-free priority across
// invocations, refused retries are spread, and answers only ever lower the record.
import { describe, expect, it } from "vitest";
import { DELETE_RESERVE, RateBudgetExhausted, type RateState } from "../../src/backends/hetzner/rate-budget.ts";
import { RETRY_SPREAD_MS, sharedGate, type BudgetStore } from "../../src/backends/hetzner/shared-budget.ts";

const T = 1_800_000_000_000;
const state = (remaining: number, extra: Partial<RateState> = {}): RateState => ({ limit: 3600, remaining, resetAt: T + 3_000_000, seenAt: T, ...extra });

/** One record, changed by compare-and-set; each read and write yields, so that callers interleave. */
function memoryRecord(initial?: RateState) {
  const rec = { value: initial, revision: initial ? 1 : 0, writes: 0 };
  const store: BudgetStore = {
    async update(change) {
      for (let i = 0; i < 50; i++) {
        const read = { value: rec.value, revision: rec.revision };
        await new Promise((r) => setTimeout(r, Math.random() * 2));
        const { value, result } = change(read.value);
        if (value === undefined) return result;
        await new Promise((r) => setTimeout(r, Math.random() * 2));
        if (rec.revision !== read.revision) continue;
        Object.assign(rec, { value, revision: rec.revision + 1, writes: rec.writes + 1 });
        return result;
      }
      throw new Error("contention");
    },
  };
  return { rec, store };
}

const settle = async (calls: Promise<void>[]) => {
  const r = await Promise.allSettled(calls);
  return { ok: r.filter((x) => x.status === "fulfilled").length, refused: r.filter((x) => x.status === "rejected" && x.reason instanceof RateBudgetExhausted) };
};

describe("one Hetzner budget for every invocation", () => {
  it("ten invocations at once with 15 left: creates take no more than leave the deletes' reserve, deletes take the rest, none more", async () => {
    const { rec, store } = memoryRecord(state(15));
    const gates = Array.from({ length: 10 }, () => sharedGate(store, () => T));
    const creates = await settle(gates.map((g) => g.take("create")));
    expect(creates.ok).toBe(15 - DELETE_RESERVE);
    const more = await settle(gates.map((g) => g.take("create")));
    expect(more.ok).toBe(0);
    // The requests left are the deletes': another invocation's delete still goes, to the last one.
    const deletes = await settle(gates.map((g) => g.take("delete")));
    expect(deletes.ok).toBe(DELETE_RESERVE);
    expect(rec.value!.remaining).toBe(0);
  });

  it("a read gives way at a tenth of the limit, a create does not", async () => {
    const { store } = memoryRecord(state(360));
    const g = sharedGate(store, () => T);
    await expect(g.take("read")).rejects.toBeInstanceOf(RateBudgetExhausted);
    await expect(g.take("sweep")).rejects.toBeInstanceOf(RateBudgetExhausted);
    await g.take("create");
  });

  it("refused invocations come back spread over a few seconds, not all in the same one", async () => {
    const { store } = memoryRecord(state(0, { blockedUntil: T + 1000 }));
    let seed = 0;
    const gates = Array.from({ length: 10 }, (_, i) =>
      sharedGate(
        store,
        () => T,
        () => ((seed = (seed * 9301 + 49297 + i) % 233280), seed / 233280),
      ),
    );
    const { refused } = await settle(gates.map((g) => g.take("delete")));
    const at = refused.map((r) => ((r as PromiseRejectedResult).reason as RateBudgetExhausted).retryAt);
    expect(at).toHaveLength(10);
    for (const t of at) expect(t).toBeGreaterThanOrEqual(T + 1000);
    for (const t of at) expect(t).toBeLessThan(T + 1000 + RETRY_SPREAD_MS);
    expect(new Set(at).size).toBeGreaterThan(5);
  });

  it("an answer lowers the record when fewer are left than it counts, never raises it", async () => {
    const { rec, store } = memoryRecord(state(100));
    const g = sharedGate(store, () => T);
    await g.take("create");
    await g.seen(state(500));
    expect(rec.value!.remaining).toBe(99);
    await g.seen(state(40));
    expect(rec.value!.remaining).toBe(40);
    // Another invocation took 30 since: an answer that says 35 does not give them back.
    const other = sharedGate(store, () => T);
    for (let i = 0; i < 30; i++) await other.take("delete");
    expect(rec.value!.remaining).toBe(10);
    await g.seen(state(35));
    expect(rec.value!.remaining).toBe(10);
    await g.seen(state(40, { blockedUntil: T + 5_000 }));
    expect(rec.value!.blockedUntil).toBe(T + 5_000);
    await expect(sharedGate(store, () => T + 4_999).take("delete")).rejects.toBeInstanceOf(RateBudgetExhausted);
  });

  it("a sweep reserves its deletes in one write and gives back what it did not spend", async () => {
    const { rec, store } = memoryRecord(state(12));
    const g = sharedGate(store, () => T);
    expect(await g.reserve("delete", 10)).toBe(10);
    const writes = rec.writes;
    for (let i = 0; i < 6; i++) await g.take("delete");
    expect(rec.writes).toBe(writes);
    expect(rec.value!.remaining).toBe(2);
    await g.release();
    expect(rec.value!.remaining).toBe(6);
    // Nothing reserved is spent twice: the next take writes again.
    await g.take("delete");
    expect(rec.value!.remaining).toBe(5);
  });
});
