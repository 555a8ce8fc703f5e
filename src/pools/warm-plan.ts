// What one maintenance pass does to one pool's warm runners, as a pure function of what it read:
// the pool's warm positions, the records of the runners they point at, the target and the time.
// maintain.ts carries the plan out with compare-and-set writes, so that a plan made from a read
// another isolate has since changed fails harmlessly instead of overshooting.
import type { AssignmentState } from "../nats/names.ts";

export interface PlanSlot {
  index: number;
  id: string;
  /** Epoch ms it was pointed here. */
  since: number;
  revision: number;
}

/** What a pointed-at runner's record says; undefined when it has none (yet). */
export interface PlanRecord {
  state: AssignmentState;
  /** Epoch ms its record was created. */
  receivedAt: number;
  /** Epoch ms its backend first reported it up. */
  readyAt?: number;
  /** Epoch ms its runner took a job. */
  claimedAt?: number;
  /** Epoch ms its runner was asked of the backend, this boot attempt (a boot retry asks again). */
  askedAt?: number;
}

/**
 * "leaving": it has just taken a job, and its position is kept for the settling of that job
 * (pools/taken.ts), which may put there the runner made for the job it took; only then, or
 * LEAVING_MS later, is the position empty.
 */
export type Occupant = "booting" | "idle" | "busy" | "leaving" | "ended";

/** How long a position whose runner just took a job is kept for that job's own runner. */
export const LEAVING_MS = 10_000;

export interface WarmPlan {
  /** Empty positions below the target to fill with a new warm runner, at the revision read (0: none). */
  fill: { index: number; revision: number }[];
  /** Keep a runner (warm at `from`) in a lower position that frees up, so that the pool's positions stay below its target. */
  move: { id: string; from: PlanSlot; to: { index: number; revision: number } }[];
  /** Warm runners to take away: above the target (oldest first), idle longer than maxIdleMs, or booting past any delivery's look (stalledAfterMs). */
  drain: { slot: PlanSlot; reason: "scaled_down" | "idle_recycled" | "boot_stalled" }[];
  /** Positions at or above the target that point at no live runner. */
  clear: PlanSlot[];
  /** Live warm runners after the plan, by what they are doing. */
  counts: { idle: number; booting: number };
}

/** A position whose runner has no record after this long is empty: its publish was lost. */
export const UNRECORDED_GRACE_MS = 60_000;

export function occupantOf(record: PlanRecord | undefined, slot: PlanSlot, now: number, vacate: ReadonlySet<string> = new Set()): Occupant {
  if (!record) return now - slot.since > UNRECORDED_GRACE_MS ? "ended" : "booting";
  // A short job may be over before its settling is: the position is held all the same.
  const leaving = record.claimedAt !== undefined && !vacate.has(slot.id) && now - record.claimedAt < LEAVING_MS;
  if (record.state === "claimed") return leaving ? "leaving" : "busy";
  if (record.state === "completed" || record.state === "terminated") return leaving ? "leaving" : "ended";
  return record.state === "backend_ready" && record.readyAt !== undefined ? "idle" : "booting";
}

/** `vacate`: runners whose positions are empty now even if they took their job just now (the settling of that job plans). */
export function planPool(
  target: number,
  slots: readonly PlanSlot[],
  records: ReadonlyMap<string, PlanRecord>,
  now: number,
  maxIdleMs: number,
  vacate: ReadonlySet<string> = new Set(),
  /**
   * A booting runner asked of its backend longer ago than this (its pool's boot timeout and two
   * AckWaits) has had no delivery look at it: its message is stranded, and nothing else would
   * ever end it or free its position and slot.
   */
  stalledAfterMs = Infinity,
): WarmPlan {
  const plan: WarmPlan = { fill: [], move: [], drain: [], clear: [], counts: { idle: 0, booting: 0 } };
  const occupant = (s: PlanSlot) => occupantOf(records.get(s.id), s, now, vacate);
  const live = slots.filter((s) => occupant(s) === "booting" || occupant(s) === "idle");
  const age = (s: PlanSlot) => records.get(s.id)?.receivedAt ?? s.since;
  // Idle too long: taken away and replaced (their positions are filled again below).
  const stale = live.filter((s) => occupant(s) === "idle" && now - (records.get(s.id)?.readyAt ?? now) > maxIdleMs);
  for (const s of stale) plan.drain.push({ slot: s, reason: "idle_recycled" });
  const askedAt = (s: PlanSlot) => records.get(s.id)?.askedAt;
  const stalled = live.filter((s) => occupant(s) === "booting" && askedAt(s) !== undefined && now - askedAt(s)! > stalledAfterMs);
  for (const s of stalled) plan.drain.push({ slot: s, reason: "boot_stalled" });
  const fresh = live.filter((s) => !stale.includes(s) && !stalled.includes(s));
  // Above the target: the oldest go first.
  const surplus = [...fresh].sort((a, b) => age(a) - age(b) || a.index - b.index).slice(0, Math.max(0, fresh.length - target));
  for (const s of surplus) plan.drain.push({ slot: s, reason: "scaled_down" });
  const kept = fresh.filter((s) => !surplus.includes(s));
  // Positions below the target that hold no kept runner are free; kept runners above it move down.
  const byIndex = new Map(slots.map((s) => [s.index, s]));
  const held = new Set(slots.filter((s) => occupant(s) === "leaving").map((s) => s.index));
  const free = Array.from({ length: target }, (_, index) => index).filter((index) => !kept.some((s) => s.index === index) && !held.has(index));
  for (const s of kept.filter((k) => k.index >= target)) {
    const index = free.shift();
    if (index === undefined) break; // positions held for leaving runners: it moves at a later pass
    plan.move.push({ id: s.id, from: s, to: { index, revision: byIndex.get(index)?.revision ?? 0 } });
  }
  for (const index of free) plan.fill.push({ index, revision: byIndex.get(index)?.revision ?? 0 });
  const moved = new Set(plan.move.map((m) => m.from.index));
  const drained = new Set(plan.drain.map((d) => d.slot.index));
  plan.clear = slots.filter((s) => s.index >= target && !moved.has(s.index) && !drained.has(s.index) && ["busy", "ended"].includes(occupant(s)));
  for (const s of kept) plan.counts[occupant(s) as "idle" | "booting"]++;
  return plan;
}
