// The launch watch (reconcile/launch-watch.ts) over in-memory records: a cloud VM asked for more
// than LAUNCH_EXPECTED_MS ago (or half its pool's boot timeout, if sooner) that has not fetched
// its launch is said once per boot attempt, with its cost, and counted for its pool. Near misses:
// exactly on time, a launch fetched, a backend whose runners fetch none, a second pass, a new
// boot attempt, a job claimed meanwhile.
import { describe, expect, it } from "vitest";
import { LAUNCH_EXPECTED_MS, watchLaunch } from "../../src/reconcile/launch-watch.ts";
import type { ProcessDeps } from "../../src/reconcile/types.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import { memoryRecords, written } from "../harness/memory.ts";

const NOW = Date.parse("2026-12-07T10:00:00Z");
const at = (msAgo: number) => new Date(NOW - msAgo).toISOString();
const record = (extra: Record<string, unknown> = {}): AssignmentRecord =>
  written({ id: "gitea-1-1", backend: "vm", state: "backend_pending", receivedAt: at(10 * 60_000), askedAt: at(LAUNCH_EXPECTED_MS + 1_000), ...extra });

function world(r: AssignmentRecord, { watch = true, bootTimeoutMs }: { watch?: boolean; bootTimeoutMs?: number } = {}) {
  const mem = memoryRecords([r]);
  let updates = 0;
  const update = mem.records.update.bind(mem.records);
  mem.records.update = (...a) => (updates++, update(...a));
  const events: Record<string, unknown>[] = [];
  const counted: string[] = [];
  const deps = {
    backend: "vm",
    now: () => NOW,
    records: mem.records,
    pools: new Map([["big", { name: "big", bootTimeoutMs: bootTimeoutMs ?? 10 * 60_000 }]]),
    sink: { event: (e: Record<string, unknown>) => void events.push(e), summary: () => undefined, error: () => undefined },
    ...(watch ? { launchWatch: { thing: "server", cost: "at least a started hour on Hetzner" } } : {}),
    countLaunchMissed: async (pool: string) => void counted.push(pool),
  } as unknown as ProcessDeps;
  const look = async () => watchLaunch(deps, await mem.records.get(r.id), "big");
  return { look, events, counted, mem, deps, updates: () => updates };
}

describe("the launch watch", () => {
  it("says once, with its cost, that a VM asked for past LAUNCH_EXPECTED_MS has not fetched its launch, and counts it for its pool", async () => {
    const w = world(record());
    expect(await w.look()).toBe(true);
    expect(w.events).toEqual([
      {
        event: "launch_not_fetched",
        assignment: "gitea-1-1",
        backend: "vm",
        pool: "big",
        reason:
          "its server was asked for 4 min ago and has not fetched its launch: check that it reaches PUBLIC_URL, has curl or wget, and that the runner's checksum matches; it is billed until its boot timeout (10 min), at least a started hour on Hetzner",
      },
    ]);
    expect(w.counted).toEqual(["big"]);
    // The pass after says nothing more, and asks the store nothing.
    const before = w.updates();
    expect(await w.look()).toBe(false);
    expect([w.events.length, w.counted.length, w.updates()]).toEqual([1, 1, before]);
  });

  it("two passes that read the record at once say it once (the mark is a compare-and-set)", async () => {
    const w = world(record());
    const read = await w.mem.records.get("gitea-1-1");
    expect((await Promise.all([watchLaunch(w.deps, read, "big"), watchLaunch(w.deps, read, "big")])).sort()).toEqual([false, true]);
    expect(w.events).toHaveLength(1);
  });

  it("near misses: exactly on time; a launch fetched; a backend whose runners fetch none; a claimed job", async () => {
    for (const [r, opts] of [
      [record({ askedAt: at(LAUNCH_EXPECTED_MS) }), {}],
      [record({ launchedAt: at(60_000) }), {}],
      [record(), { watch: false }],
      [record({ state: "claimed", claimedAt: at(1_000) }), {}],
    ] as const) {
      const w = world(r, opts);
      expect(await w.look(), JSON.stringify(r)).toBe(false);
      expect(w.events).toEqual([]);
      // Every delivery of a waiting VM comes by here: one that has nothing to say costs no read or write.
      expect(w.updates(), JSON.stringify(r)).toBe(0);
    }
  });

  it("is due at half the pool's boot timeout when that is sooner", async () => {
    const w = world(record({ askedAt: at(2 * 60_000 + 1_000) }), { bootTimeoutMs: 4 * 60_000 });
    expect(await w.look()).toBe(true);
    expect(String(w.events[0]!.reason)).toContain("billed until its boot timeout (4 min)");
    expect(await world(record({ askedAt: at(2 * 60_000) }), { bootTimeoutMs: 4 * 60_000 }).look()).toBe(false);
  });

  it("a new boot attempt (a new askedAt) is watched afresh; the old attempt's report does not cover it", async () => {
    const w = world(record());
    expect(await w.look()).toBe(true);
    // The boot retry forgets the attempt's marks (effects.ts) and asks again; that VM is late too.
    w.mem.rows.set("gitea-1-1", record({ askedAt: at(LAUNCH_EXPECTED_MS + 5_000) }));
    expect(await w.look()).toBe(true);
    expect(w.counted).toEqual(["big", "big"]);
  });
});
