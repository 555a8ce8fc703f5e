// The plan of one maintenance pass over one pool's warm runners (pools/warm-plan.ts): pure, row by
// row, with the near misses that would overshoot the target or take away a runner at work.
import { describe, expect, it } from "vitest";
import { planPool, UNRECORDED_GRACE_MS, type PlanRecord, type PlanSlot } from "../../src/pools/warm-plan.ts";

const NOW = 10_000_000;
const HOUR = 3_600_000;
const slot = (index: number, id: string, revision = index + 10, since = NOW - 60_000): PlanSlot => ({ index, id, since, revision });
const idle = (receivedAt: number, readyAt = receivedAt + 10_000): PlanRecord => ({ state: "backend_ready", receivedAt, readyAt });
const booting: PlanRecord = { state: "backend_pending", receivedAt: NOW - 5_000 };
const records = (entries: [string, PlanRecord][]) => new Map(entries);
const plan = (target: number, slots: PlanSlot[], known: Map<string, PlanRecord>) => planPool(target, slots, known, NOW, HOUR);

describe("one pool's maintenance plan", () => {
  it("fills every empty position below the target, at the revision read", () => {
    expect(plan(3, [], records([]))).toMatchObject({
      fill: [
        { index: 0, revision: 0 },
        { index: 1, revision: 0 },
        { index: 2, revision: 0 },
      ],
      drain: [],
      move: [],
      clear: [],
    });
    const p = plan(3, [slot(1, "a")], records([["a", idle(NOW - 100_000)]]));
    expect(p.fill).toEqual([
      { index: 0, revision: 0 },
      { index: 2, revision: 0 },
    ]);
    expect(p.counts).toEqual({ idle: 1, booting: 0 });
  });

  it("counts a booting runner as warm: nothing to fill at the target", () => {
    const p = plan(
      2,
      [slot(0, "a"), slot(1, "b")],
      records([
        ["a", idle(NOW - 100_000)],
        ["b", booting],
      ]),
    );
    expect(p).toMatchObject({ fill: [], drain: [], move: [], clear: [], counts: { idle: 1, booting: 1 } });
  });

  it("fills the position of a runner that took a job, or ended, at that position's revision", () => {
    const p = plan(
      2,
      [slot(0, "a", 41), slot(1, "b", 42)],
      records([
        ["a", { state: "claimed", receivedAt: NOW - 9_000 }],
        ["b", { state: "terminated", receivedAt: NOW - 9_000 }],
      ]),
    );
    expect(p.fill).toEqual([
      { index: 0, revision: 41 },
      { index: 1, revision: 42 },
    ]);
    expect(p.drain).toEqual([]);
  });

  it("keeps the position of a runner that just took a job for that job's settling; empties it for that settling, or 10 s on", () => {
    const just: PlanRecord = { state: "claimed", receivedAt: NOW - 60_000, claimedAt: NOW - 9_999 };
    const known = records([["w", just]]);
    expect(plan(1, [slot(0, "w", 9)], known).fill).toEqual([]);
    expect(planPool(1, [slot(0, "w", 9)], known, NOW, HOUR, new Set(["w"])).fill).toEqual([{ index: 0, revision: 9 }]);
    expect(planPool(1, [slot(0, "w", 9)], known, NOW, HOUR, new Set(["other"])).fill).toEqual([]);
    expect(plan(1, [slot(0, "w", 9)], records([["w", { ...just, claimedAt: NOW - 10_000 }]])).fill).toEqual([{ index: 0, revision: 9 }]);
    // Its job may be over before its settling is: the position is still kept, for as long.
    for (const state of ["completed", "terminated"] as const) {
      const over = records([["w", { ...just, state }]]);
      expect(plan(1, [slot(0, "w", 9)], over).fill).toEqual([]);
      expect(planPool(1, [slot(0, "w", 9)], over, NOW, HOUR, new Set(["w"])).fill).toEqual([{ index: 0, revision: 9 }]);
      expect(plan(1, [slot(0, "w", 9)], records([["w", { ...just, state, claimedAt: NOW - 10_000 }]])).fill).toEqual([{ index: 0, revision: 9 }]);
    }
    // A kept position never counts as warm: the target still bounds the live ones.
    expect(
      plan(
        2,
        [slot(0, "w", 9), slot(1, "a")],
        records([
          ["w", just],
          ["a", idle(NOW - 100_000)],
        ]),
      ),
    ).toMatchObject({ fill: [], counts: { idle: 1, booting: 0 } });
  });

  it("waits for the record of a runner just published; one that never got one is refilled after the grace", () => {
    expect(plan(1, [slot(0, "a", 7, NOW - UNRECORDED_GRACE_MS)], records([])).fill).toEqual([]);
    expect(plan(1, [slot(0, "a", 7, NOW - UNRECORDED_GRACE_MS - 1)], records([])).fill).toEqual([{ index: 0, revision: 7 }]);
  });

  it("above the target takes the oldest away, and moves a younger kept one down into a freed position", () => {
    const known = records([
      ["old", idle(NOW - 3_000_000)],
      ["mid", idle(NOW - 2_000_000)],
      ["new", idle(NOW - 1_000_000)],
    ]);
    const p = plan(1, [slot(0, "old"), slot(1, "mid"), slot(2, "new")], known);
    expect(p.drain.map((d) => [d.slot.id, d.reason])).toEqual([
      ["old", "scaled_down"],
      ["mid", "scaled_down"],
    ]);
    expect(p.move).toEqual([{ id: "new", from: slot(2, "new"), to: { index: 0, revision: 10 } }]);
    expect(p.fill).toEqual([]);
    expect(p.counts).toEqual({ idle: 1, booting: 0 });
    // Target 0 (a window closed): all go, none is filled.
    expect(plan(0, [slot(0, "old"), slot(1, "mid")], known)).toMatchObject({ fill: [], move: [], drain: [{ slot: { id: "old" } }, { slot: { id: "mid" } }] });
  });

  it("never takes away a runner at work, whatever the target", () => {
    const p = plan(
      0,
      [slot(0, "busy"), slot(3, "done")],
      records([
        ["busy", { state: "claimed", receivedAt: NOW - 1 }],
        ["done", { state: "completed", receivedAt: NOW - 1 }],
      ]),
    );
    expect(p.drain).toEqual([]);
    // Positions above the target pointing at nothing live are emptied.
    expect(p.clear.map((s) => s.index)).toEqual([0, 3]);
  });

  it("recycles a runner idle longer than maxIdleMs and fills its position again; one idle exactly that long stays", () => {
    const known = records([
      ["stale", { state: "backend_ready", receivedAt: NOW - 2 * HOUR, readyAt: NOW - HOUR - 1 }],
      ["ok", { state: "backend_ready", receivedAt: NOW - 2 * HOUR, readyAt: NOW - HOUR }],
    ]);
    const p = plan(2, [slot(0, "stale", 5), slot(1, "ok")], known);
    expect(p.drain.map((d) => [d.slot.id, d.reason])).toEqual([["stale", "idle_recycled"]]);
    expect(p.fill).toEqual([{ index: 0, revision: 5 }]);
  });

  it("a booting runner is never recycled for idleness, and a pool below target never drains", () => {
    const p = plan(
      3,
      [slot(0, "a"), slot(1, "b")],
      records([
        ["a", { state: "backend_pending", receivedAt: NOW - 10 * HOUR }],
        ["b", idle(NOW - 100)],
      ]),
    );
    expect(p.drain).toEqual([]);
    expect(p.fill).toEqual([{ index: 2, revision: 0 }]);
  });

  it("drains a runner booting past its pool's boot timeout and two AckWaits (its message stranded) and fills its position; near misses: exactly that long, one never asked, a ready one", () => {
    const STALL = 10 * 60_000 + 2 * 60_000;
    const known = records([
      ["stuck", { state: "backend_pending", receivedAt: NOW - HOUR, askedAt: NOW - STALL - 1 }],
      ["edge", { state: "backend_pending", receivedAt: NOW - HOUR, askedAt: NOW - STALL }],
      ["unasked", { state: "received", receivedAt: NOW - HOUR }],
      ["ready", { state: "backend_ready", receivedAt: NOW - HOUR, askedAt: NOW - HOUR, readyAt: NOW - 100 }],
    ]);
    const slots = [slot(0, "stuck", 7), slot(1, "edge"), slot(2, "unasked"), slot(3, "ready")];
    const p = planPool(4, slots, known, NOW, HOUR, new Set(), STALL);
    expect(p.drain.map((d) => [d.slot.id, d.reason])).toEqual([["stuck", "boot_stalled"]]);
    expect(p.fill).toEqual([{ index: 0, revision: 7 }]);
    expect(p.counts).toEqual({ idle: 1, booting: 2 });
    // Without a bound (adoptWarm's plan), nothing is drained for it.
    expect(planPool(4, slots, known, NOW, HOUR).drain).toEqual([]);
  });
});

describe("warm runners by reuse (parked servers rebuilt at once)", () => {
  const reused = (index: number, id: string, server: number, until: number, revision = index + 10): PlanSlot => ({
    ...slot(index, id, revision),
    reuse: { server, until },
  });
  const withParked = (target: number, slots: PlanSlot[], known: Map<string, PlanRecord>, parked: { server: number; until: number }[]) =>
    planPool(target, slots, known, NOW, HOUR, new Set(), Infinity, parked);

  it("a parked server fills an empty position below the target before a new server would, the least of its hour left first; the rest go above the target, in unused positions", () => {
    const p = withParked(2, [slot(3, "gone", 55)], records([["gone", { state: "completed", receivedAt: NOW - 9_000 }]]), [
      { server: 7, until: NOW + 30 * 60_000 },
      { server: 5, until: NOW + 10 * 60_000 },
      { server: 9, until: NOW + 50 * 60_000 },
      { server: 8, until: NOW + 40 * 60_000 },
    ]);
    expect(p.reuse).toEqual([
      { index: 0, revision: 0, reused: { server: 5, until: NOW + 10 * 60_000 } },
      { index: 1, revision: 0, reused: { server: 7, until: NOW + 30 * 60_000 } },
      { index: 2, revision: 0, reused: { server: 8, until: NOW + 40 * 60_000 } },
      { index: 4, revision: 0, reused: { server: 9, until: NOW + 50 * 60_000 } },
    ]);
    // No new server: reuse filled every position of the target.
    expect(p.fill).toEqual([]);
  });

  it("a parked server a live position is rebuilt on is not filled again; one whose runner ended is (parked anew); a gap reuse leaves gets a new server", () => {
    const p = withParked(
      3,
      [reused(0, "r1", 5, NOW + HOUR / 2), reused(1, "r2", 6, NOW + HOUR / 2)],
      records([
        ["r1", booting],
        ["r2", { state: "terminated", receivedAt: NOW - 9_000 }],
      ]),
      [
        { server: 5, until: NOW + HOUR / 2 },
        { server: 6, until: NOW + HOUR / 3 },
      ],
    );
    expect(p.reuse).toEqual([{ index: 1, revision: 11, reused: { server: 6, until: NOW + HOUR / 3 } }]);
    expect(p.fill).toEqual([{ index: 2, revision: 0 }]);
  });

  it("given up at the end of its paid hour, booting or idle; near miss: a moment before it stays; a busy one is left to its job", () => {
    const p = withParked(
      1,
      [reused(0, "due", 5, NOW), reused(1, "early", 6, NOW + 1), reused(2, "bootingDue", 7, NOW - 1), reused(3, "busy", 8, NOW - 1)],
      records([
        ["due", idle(NOW - 100_000)],
        ["early", idle(NOW - 100_000)],
        ["bootingDue", booting],
        ["busy", { state: "claimed", receivedAt: NOW - 100_000, claimedAt: NOW - 60_000 }],
      ]),
      [],
    );
    expect(p.drain.map((d) => [d.slot.id, d.reason])).toEqual([
      ["due", "hour_end"],
      ["bootingDue", "hour_end"],
    ]);
  });

  it("never the surplus above the target, nor recycled for idleness; a plain warm runner above the target still goes; one by reuse above it moves down into a freed position", () => {
    const p = withParked(
      1,
      [slot(0, "plainOld"), slot(1, "plainYoung"), reused(2, "r", 5, NOW + HOUR / 2)],
      records([
        ["plainOld", idle(NOW - 100_000)],
        ["plainYoung", idle(NOW - 50_000)],
        ["r", idle(NOW - 2 * HOUR, NOW - 2 * HOUR + 1)],
      ]),
      [],
    );
    expect(p.drain.map((d) => [d.slot.id, d.reason])).toEqual([["plainOld", "scaled_down"]]);
    const q = withParked(
      2,
      [slot(0, "taken"), reused(5, "r", 5, NOW + HOUR / 2)],
      records([
        ["taken", { state: "claimed", receivedAt: NOW - 100_000 }],
        ["r", idle(NOW - 100_000)],
      ]),
      [],
    );
    expect(q.move).toEqual([{ id: "r", from: expect.objectContaining({ index: 5 }), to: { index: 0, revision: 10 } }]);
    expect(q.fill).toEqual([{ index: 1, revision: 0 }]);
  });
});

describe("a VM's warm runner", () => {
  it("is idle once its VM fetched its launch, before the backend says it is up; near miss: one that has not fetched it boots", () => {
    const launched: PlanRecord = { state: "backend_pending", receivedAt: NOW - 40_000, askedAt: NOW - 39_000, launchedAt: NOW - 5_000 };
    const p = plan(
      2,
      [slot(0, "up"), slot(1, "notYet")],
      records([
        ["up", launched],
        ["notYet", { ...booting, askedAt: NOW - 39_000 }],
      ]),
    );
    expect(p.counts).toEqual({ idle: 1, booting: 1 });
    // Idle since its launch: recycled after maxIdleMs from there.
    const q = plan(1, [slot(0, "up")], records([["up", { ...launched, launchedAt: NOW - HOUR - 1 }]]));
    expect(q.drain.map((d) => d.reason)).toEqual(["idle_recycled"]);
  });
});
