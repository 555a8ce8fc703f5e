// A new job's wait for a warm runner (reconcile/pool-facts.ts graceFor, pools/maintain.ts
// idleWarmCounts), over in-memory stores: an idle warm runner gives it WARM_GRACE_MS; a pool with
// waitForReuseMs counts its booting warm runners (a server being rebuilt) too, and its jobs wait up
// to that long from their queued. Near misses: a booting runner of a pool without it, a job older
// than its bound, an idle runner in a pool with a bound shorter than the grace.
import { describe, expect, it } from "vitest";
import { idleWarmCounts } from "../../src/pools/maintain.ts";
import { graceFor } from "../../src/reconcile/pool-facts.ts";
import type { Prepared, ProcessDeps } from "../../src/reconcile/types.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import type { WarmSlot } from "../../src/state/warm-slots.ts";

const NOW = Date.parse("2026-12-07T12:00:00Z");
const slot = (pool: string, index: number, id: string): WarmSlot => ({ pool, index, id, since: new Date(NOW - 60_000).toISOString(), revision: index + 1 });
const rec = (id: string, state: AssignmentRecord["state"], extra: Partial<AssignmentRecord> = {}) =>
  ({ id, backend: "vm", state, receivedAt: new Date(NOW - 50_000).toISOString(), warm: true, ...extra }) as AssignmentRecord;

function stores(slots: WarmSlot[], records: AssignmentRecord[]) {
  const byPool = new Map<string, WarmSlot[]>();
  for (const s of slots) byPool.set(s.pool, [...(byPool.get(s.pool) ?? []), s]);
  return {
    warm: { list: async () => byPool },
    records: { getMany: async (ids: readonly string[]) => new Map(records.filter((r) => ids.includes(r.id)).map((r) => [r.id, { value: r, revision: 1 }])) },
  } as unknown as Parameters<typeof idleWarmCounts>[0];
}

describe("idle warm runners, and booting ones where a pool waits for reuse", () => {
  it("counts booting runners only for the pools that wait for them", async () => {
    const s = stores(
      [slot("waits", 0, "w-boot"), slot("waits", 1, "w-idle"), slot("plain", 0, "p-boot"), slot("plain", 1, "p-idle")],
      [
        rec("w-boot", "backend_pending", { askedAt: new Date(NOW - 20_000).toISOString() }),
        rec("w-idle", "backend_ready", { readyAt: new Date(NOW - 20_000).toISOString() }),
        rec("p-boot", "backend_pending", { askedAt: new Date(NOW - 20_000).toISOString() }),
        rec("p-idle", "backend_ready", { readyAt: new Date(NOW - 20_000).toISOString() }),
      ],
    );
    expect(Object.fromEntries(await idleWarmCounts(s, NOW, new Set(["waits"])))).toEqual({ waits: 2, plain: 1 });
    expect(Object.fromEntries(await idleWarmCounts(s, NOW))).toEqual({ waits: 1, plain: 1 });
  });
});

describe("a new job's grace", () => {
  const job = (ageMs: number, pool = "waits"): Prepared =>
    ({
      assignment: { id: "gitea-1-1", pools: [pool], job: { id: 1 } },
      known: { value: { state: "received", receivedAt: new Date(NOW - ageMs).toISOString() }, revision: 1 },
      facts: {},
    }) as unknown as Prepared;
  const deps = (promised: boolean) =>
    ({
      warmGraceMs: 5_000,
      warmPools: new Set(["waits", "plain", "short"]),
      pools: new Map([
        ["waits", { backend: "vm", maxIdleMs: 3_600_000, bootTimeoutMs: 600_000, waitForReuseMs: 40_000 }],
        ["plain", { backend: "vm", maxIdleMs: 3_600_000, bootTimeoutMs: 600_000, waitForReuseMs: 0 }],
        ["short", { backend: "vm", maxIdleMs: 3_600_000, bootTimeoutMs: 600_000, waitForReuseMs: 2_000 }],
      ]),
      now: () => NOW,
      takeIdleWarm: async () => promised,
    }) as unknown as ProcessDeps;
  const grace = async (d: ProcessDeps, p: Prepared) => (await graceFor(d, p), p.facts.warmGraceMs);

  it("waits up to waitForReuseMs from its queued in a pool that sets it, WARM_GRACE_MS elsewhere; none once past it, or with no runner to promise", async () => {
    expect(await grace(deps(true), job(10_000))).toBe(30_000);
    expect(await grace(deps(true), job(40_000))).toBe(0);
    expect(await grace(deps(true), job(1_000, "plain"))).toBe(4_000);
    expect(await grace(deps(true), job(1_000, "short"))).toBe(4_000);
    expect(await grace(deps(false), job(10_000))).toBe(0);
  });
});
