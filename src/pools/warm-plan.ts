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
  /** A warm runner by reuse: the parked server it is rebuilt on, and when it is given up (epoch ms). */
  reuse?: Reused | undefined;
}

/** A parked server a warm runner is (or may be) rebuilt on, and when that runner is given up: before the server's next paid hour. */
export interface Reused {
  server: number;
  until: number;
}

/** Why a warm runner is taken away (drain.ts tells each as its own event). */
export type DrainReason = "scaled_down" | "idle_recycled" | "boot_stalled" | "hour_end";

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
  /** Epoch ms its VM fetched its launch (the cloud drivers): its runner program runs, and polls. */
  launchedAt?: number;
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
  /**
   * Parked servers to rebuild as warm runners (reuse: "rebuild"), each into a position: an empty
   * one below the target first (they count towards it), else one above it, unused.
   */
  reuse: { index: number; revision: number; reused: Reused }[];
  /**
   * Warm runners to take away: above the target (oldest first), idle longer than maxIdleMs,
   * booting past any delivery's look (stalledAfterMs), or by reuse at the end of their paid hour.
   */
  drain: { slot: PlanSlot; reason: DrainReason }[];
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
  // A VM that fetched its launch runs its runner, which polls within seconds: the backend's own
  // word comes later, if at all (a cloud server's one status read, 90 s after it was asked for).
  if (record.state === "backend_ready" && record.readyAt !== undefined) return "idle";
  return record.launchedAt !== undefined && (record.state === "backend_pending" || record.state === "backend_ready") ? "idle" : "booting";
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
  /** The pool's parked servers (reuse: "rebuild"): each not yet under a warm runner gets one, rebuilt on it. */
  parked: readonly Reused[] = [],
): WarmPlan {
  const plan: WarmPlan = { fill: [], reuse: [], move: [], drain: [], clear: [], counts: { idle: 0, booting: 0 } };
  const occupant = (s: PlanSlot) => occupantOf(records.get(s.id), s, now, vacate);
  const live = slots.filter((s) => occupant(s) === "booting" || occupant(s) === "idle");
  const age = (s: PlanSlot) => records.get(s.id)?.receivedAt ?? s.since;
  // By reuse, at the end of its paid hour (less warmUntil): given up before the next one begins.
  const paidOut = live.filter((s) => s.reuse !== undefined && s.reuse.until <= now);
  for (const s of paidOut) plan.drain.push({ slot: s, reason: "hour_end" });
  // Idle too long: taken away and replaced (their positions are filled again below). One by reuse
  // is given up at its hour's end instead, which comes first.
  const idleSince = (s: PlanSlot) => records.get(s.id)?.readyAt ?? records.get(s.id)?.launchedAt ?? now;
  const stale = live.filter((s) => !s.reuse && occupant(s) === "idle" && now - idleSince(s) > maxIdleMs);
  for (const s of stale) plan.drain.push({ slot: s, reason: "idle_recycled" });
  const askedAt = (s: PlanSlot) => records.get(s.id)?.askedAt;
  const stalled = live.filter((s) => !paidOut.includes(s) && occupant(s) === "booting" && askedAt(s) !== undefined && now - askedAt(s)! > stalledAfterMs);
  for (const s of stalled) plan.drain.push({ slot: s, reason: "boot_stalled" });
  const fresh = live.filter((s) => !paidOut.includes(s) && !stale.includes(s) && !stalled.includes(s));
  // Above the target: the oldest go first. A runner by reuse costs nothing until its hour ends and
  // is never the surplus, nor counted to make another one surplus: that one's server would be
  // parked and rebuilt by reuse in its turn, in a loop. (Fills do count it towards the target.)
  const plain = fresh.filter((s) => !s.reuse);
  const surplus = [...plain].sort((a, b) => age(a) - age(b) || a.index - b.index).slice(0, Math.max(0, plain.length - target));
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
  // Parked servers no live runner is rebuilt on: the least of its hour left first, into the empty
  // positions below the target (a new server only where reuse leaves a gap), then above it.
  const covered = new Set(slots.filter((s) => s.reuse && occupant(s) !== "ended").map((s) => s.reuse!.server));
  const toReuse = parked.filter((p) => !covered.has(p.server)).sort((a, b) => a.until - b.until || a.server - b.server);
  const used = new Set(slots.map((s) => s.index));
  let above = target;
  for (const reused of toReuse) {
    const below = free.shift();
    if (below !== undefined) plan.reuse.push({ index: below, revision: byIndex.get(below)?.revision ?? 0, reused });
    else {
      while (used.has(above)) above++;
      plan.reuse.push({ index: above++, revision: 0, reused });
    }
  }
  for (const index of free) plan.fill.push({ index, revision: byIndex.get(index)?.revision ?? 0 });
  const moved = new Set(plan.move.map((m) => m.from.index));
  const drained = new Set(plan.drain.map((d) => d.slot.index));
  plan.clear = slots.filter((s) => s.index >= target && !moved.has(s.index) && !drained.has(s.index) && ["busy", "ended"].includes(occupant(s)));
  for (const s of kept) plan.counts[occupant(s) as "idle" | "booting"]++;
  return plan;
}
