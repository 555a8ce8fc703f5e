// What the hetzner driver tells of the machines it makes, over the fake Hetzner API: which job's
// server is a parked one rebuilt for it (RunnerBackend.made, for the start-up's split by via),
// and, at each delete, the paid time used and given up (driver-figures.ts Paid).
import { describe, expect, it } from "vitest";
import { PARKED_DELETE_LEFT_MS, paidAtDelete } from "../../src/backends/hetzner/reuse.ts";
import { withPaid, type DriverFigures } from "../../src/state/driver-figures.ts";
import { createNotes } from "../../src/backends/hetzner/notes.ts";
import { type HetznerScene, keptScenes, vmRequest } from "../harness/hetzner.ts";

const HOUR = 3_600_000;
const { scene } = keptScenes();
const request = (id: string, reuse = true, pool = "small") => vmRequest(id, { name: pool, ...(reuse ? { reuse: "rebuild" as const } : {}) });
const within = () => AbortSignal.timeout(3_000);
const paidOf = async (s: HetznerScene) => (await s.stores.figures.get("pod"))?.paid;

describe("made: how a job's server came", () => {
  it("a parked server rebuilt for a job is told once; a created one never; a pass after one that died learns it from the note", async () => {
    const s = await scene();
    s.clock.t = Date.now();
    await s.driver.accept(request("m-1"), within());
    // Near miss: created for its job.
    expect(s.driver.made?.("m-1")).toBeUndefined();
    await s.driver.teardown("m-1", within());
    await s.driver.accept(request("m-2"), within());
    expect(s.driver.made?.("m-2")).toBe("rebuilt");
    // Told once: the pass asks right after its accept.
    expect(s.driver.made?.("m-2")).toBeUndefined();
    // The pass that asked died before its record write: the next one's accept reads the note.
    await s.driver.accept(request("m-2"), within());
    expect(s.driver.made?.("m-2")).toBe("rebuilt");
    expect((await createNotes(s.stores.kv).get("pod", "m-2"))?.rebuilt).toBe(true);
    // …and a job whose accept created a server after none was parked is new, however often asked.
    await s.driver.accept(request("m-3"), within());
    await s.driver.accept(request("m-3"), within());
    expect(s.driver.made?.("m-3")).toBeUndefined();
  });
});

describe("paid time at each delete", () => {
  it("a teardown's delete counts the time used and the rest of the hour given up, by pool; a park counts nothing", async () => {
    const s = await scene();
    s.clock.t = Date.now();
    await s.driver.accept(request("p-1", false), within());
    const created = (await s.state()).servers[0]!.createdAt;
    s.clock.t = created + 10 * 60_000;
    await s.driver.teardown("p-1", within());
    expect((await s.state()).servers).toEqual([]);
    const after = (await paidOf(s))!;
    expect(Object.keys(after)).toEqual(["small"]);
    // The note's createdAt is the pass's clock after the create: within a second of Hetzner's.
    expect(after.small!.servers).toBe(1);
    expect(after.small!.used).toBeCloseTo(600, -1);
    expect(after.small!.used + after.small!.givenUp).toBeCloseTo(3_600, 3);
    // A teardown told again (a retry) finds nothing to delete and counts nothing more.
    await s.driver.teardown("p-1", within());
    expect((await paidOf(s))!.small!.servers).toBe(1);
    // Parked (reuse, its hour running): nothing is deleted, nothing counted.
    s.clock.t = Date.now();
    await s.driver.accept(request("p-2"), within());
    await s.driver.teardown("p-2", within());
    expect((await s.state()).servers).toHaveLength(1);
    expect((await paidOf(s))!.small!.servers).toBe(1);
  });

  it("the sweep's delete of a parked server before its next hour counts that hour as used but for what was left", async () => {
    const s = await scene();
    s.clock.t = Date.now();
    await s.driver.accept(request("q-1", true, "constructor"), within());
    const created = (await s.state()).servers[0]!.createdAt;
    await s.driver.teardown("q-1", within());
    s.clock.t = created + HOUR - PARKED_DELETE_LEFT_MS + 1_000;
    expect((await s.sweep(new Map([["q-1", { ended: true }]]))).deleted).toBe(1);
    // A pool named like an Object.prototype property is a pool like any other.
    const paid = (await paidOf(s))!;
    expect(Object.entries(paid)).toEqual([
      ["constructor", { servers: 1, used: (HOUR - PARKED_DELETE_LEFT_MS + 1_000) / 1_000, givenUp: (PARKED_DELETE_LEFT_MS - 1_000) / 1_000 }],
    ]);
    // The next sweep finds nothing and counts nothing.
    await s.sweep(new Map([["q-1", { ended: true }]]));
    expect(Object.entries((await paidOf(s))!).map(([, p]) => p.servers)).toEqual([1]);
  });
});

describe("withPaid and paidAtDelete", () => {
  const base: DriverFigures = { swept: 0, fullTotal: 0 };
  it("adds each deleted server to its own pool's figures, beside the others'", () => {
    const f = withPaid(withPaid(base, [{ pool: "a", used: 10, givenUp: 20 }]), [
      { pool: "a", used: 1, givenUp: 2 },
      { pool: "constructor", used: 5, givenUp: 6 },
    ]);
    expect(f.paid).toEqual({ a: { servers: 2, used: 11, givenUp: 22 }, constructor: { servers: 1, used: 5, givenUp: 6 } });
    expect(withPaid(base, [])).toBe(base);
  });

  it("a delete 61 minutes after the create gives up 59 of its second hour; one of no pool is counted under '-'", () => {
    const t0 = 1_000_000_000;
    expect(paidAtDelete("a", t0, t0 + 61 * 60_000)).toEqual({ pool: "a", used: 61 * 60, givenUp: 59 * 60 });
    expect(paidAtDelete(undefined, t0, t0 + 1_000)).toEqual({ pool: "-", used: 1, givenUp: 3_599 });
    // A clock behind Hetzner's: nothing used, the whole first hour given up.
    expect(paidAtDelete("a", t0, t0 - 5_000)).toEqual({ pool: "a", used: 0, givenUp: 3_600 });
  });
});
