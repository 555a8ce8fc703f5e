// Keeps each pool's warm runners at its target: one short pass, run by the cron tick and right
// after a warm runner takes a job. It reads every pool's warm positions and their runners' records
// (two requests, plus one for the records), plans each pool (warm-plan.ts) and carries the plan
// out with compare-and-set writes: a position another isolate changed since the read is left to
// it, so passes that run at once never keep more than the target warm.
import type { BackendAccess, Basics, ForgeAccess, Settings, State, StoreAccess } from "../domain/context.ts";
import { publishAssignment } from "../domain/publish.ts";
import type { Pool } from "./config.ts";
import { idleTarget } from "./schedule.ts";
import { drainWarm } from "./drain.ts";
import { WAITING } from "./end.ts";
import { occupantOf, planPool, type PlanRecord, type PlanSlot, type Reused } from "./warm-plan.ts";
import type { Versioned } from "../state/kv.ts";
import type { AssignmentRecord } from "../state/records.ts";
import { markWarm } from "../state/transitions.ts";
import type { WarmSlot } from "../state/warm-slots.ts";
import type { ParkedServer } from "../domain/backend.ts";
import type { Backend } from "../nats/names.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings;
/** The stores this module's steps use (domain/context.ts State). */
type Stores = Pick<State, "admission" | "records" | "warm">;

export interface PoolSummary {
  pool: string;
  target: number;
  idle: number;
  booting: number;
  filled: number;
  drained: number;
}

/** Pools that keep warm runners, now or in some window, or rebuild their finished jobs' servers as warm runners. */
export const keepsWarm = (p: Pool) => p.minIdle > 0 || (p.schedule ?? []).some((w) => w.minIdle > 0) || p.reuse === "rebuild";

/** `vacate`: warm runners that took a job whose settling runs this pass: their positions may be filled now. */
export async function maintainPools(d: Deps, state: Stores, only?: readonly string[], vacate: ReadonlySet<string> = new Set()): Promise<PoolSummary[]> {
  const all = await state.warm.list();
  // A pool with positions left from before (a target lowered to 0, a pool removed) is maintained
  // too, down to nothing.
  const pools = d.config.pools.filter((p) => (keepsWarm(p) || all.has(p.name)) && (!only || only.includes(p.name)));
  if (!pools.length) return [];
  const ids = pools.flatMap((p) => (all.get(p.name) ?? []).map((s) => s.id));
  const [records, parked] = await Promise.all([state.records.getMany(ids), parkedOf(d, pools)]);
  const now = d.now();
  return Promise.all(
    pools.map(async (pool) => {
      const target = idleTarget(pool, new Date(now));
      const { slots, known } = planInputs(all.get(pool.name) ?? [], records);
      // A parked server is rebuilt as a warm runner only while its hour has more than warmUntil left.
      const reusable = (parked.get(pool.name) ?? []).map((p) => ({ server: p.server, until: p.paidUntil - pool.warmUntil })).filter((p) => p.until > now);
      const plan = planPool(target, slots, known, now, pool.maxIdleMs, vacate, pool.bootTimeoutMs + 2 * d.config.ackWaitMs, reusable);
      const summary: PoolSummary = { pool: pool.name, target, ...plan.counts, filled: 0, drained: 0 };
      for (const m of plan.move) {
        if (await state.warm.put(pool.name, m.to.index, m.id, m.to.revision, m.from.reuse)) await state.warm.clear(pool.name, m.from.index, m.from.revision);
      }
      for (const { slot, reason } of plan.drain) {
        if (await drainWarm(d, state, slot.id, reason, pool.name)) summary.drained++;
        if (slot.index >= target) await state.warm.clear(pool.name, slot.index, slot.revision);
      }
      for (const s of plan.clear) await state.warm.clear(pool.name, s.index, s.revision);
      // The position first, then the runner: a position whose publish was lost is empty a minute on
      // (UNRECORDED_GRACE_MS), and is filled again then (a parked server, still parked, rebuilt then).
      const fills: { index: number; revision: number; reused?: Reused }[] = [...plan.fill, ...plan.reuse];
      for (const { index, revision, reused } of fills) {
        const id = warmId(pool.name, index, now);
        if (!(await state.warm.put(pool.name, index, id, revision, reused))) continue;
        const reuse = reused ? { reuse: { server: reused.server } } : {};
        await publishAssignment(d, { version: 1, id, backend: pool.backend, labels: pool.labels, pools: [pool.name], warm: true, ...reuse }, { warm: true });
        const told = reused ? { event: "warm_reuse_filled" as const, reason: `server ${reused.server}` } : { event: "warm_filled" as const };
        d.sink.event({ ...told, assignment: id, backend: pool.backend, pool: pool.name });
        summary.filled++;
        summary.booting++;
      }
      return summary;
    }),
  );
}

/**
 * After a runner of `pool` was torn down: a pool that reuses its servers has just parked that
 * one, and rebuilds it as a warm runner now rather than at the next tick. `filled` hears the
 * backend when a warm runner was published, whose assignment waits for a pass.
 */
export async function maintainAfterRelease(d: Deps, pool: string | null | undefined, filled: (backend: Backend) => Promise<unknown>): Promise<void> {
  const reusing = pool ? d.config.pools.find((p) => p.name === pool && p.reuse === "rebuild") : undefined;
  if (!reusing) return;
  const [summary] = await d.withState((state) => maintainPools(d, state, [reusing.name]));
  if (summary && summary.filled > 0) await filled(reusing.backend);
}

/** Each pool's parked servers, for the pools that rebuild theirs (reuse: "rebuild"), one request per pool. */
async function parkedOf(d: Deps, pools: readonly Pool[]): Promise<Map<string, ParkedServer[]>> {
  const reusing = pools.filter((p) => p.reuse === "rebuild");
  const read = async (p: Pool): Promise<ParkedServer[]> => {
    try {
      return (await d.runnersFor(p.backend).parked?.(p.name)) ?? [];
    } catch (err) {
      // The rest of the pass goes on: the next one rebuilds them.
      d.sink.error("reading a pool's parked servers failed", { pool: p.name, reason: (err as Error).message });
      return [];
    }
  };
  const found = await Promise.all(reusing.map(async (p) => [p.name, await read(p)] as const));
  return new Map(found);
}

/** Positions and their runners' records, as warm-plan.ts takes them. */
function planInputs(listed: readonly WarmSlot[], records: ReadonlyMap<string, Versioned<AssignmentRecord>>) {
  const slots: PlanSlot[] = listed.map((s) => ({ index: s.index, id: s.id, since: Date.parse(s.since), revision: s.revision, reuse: s.reuse }));
  const known = new Map<string, PlanRecord>();
  for (const s of slots) {
    const r = records.get(s.id)?.value;
    if (r) {
      known.set(s.id, {
        state: r.state,
        receivedAt: Date.parse(r.receivedAt),
        ...(r.readyAt ? { readyAt: Date.parse(r.readyAt) } : {}),
        ...(r.claimedAt ? { claimedAt: Date.parse(r.claimedAt) } : {}),
        ...(r.askedAt ? { askedAt: Date.parse(r.askedAt) } : {}),
        ...(r.launchedAt ? { launchedAt: Date.parse(r.launchedAt) } : {}),
      });
    }
  }
  return { slots, known };
}

/**
 * Makes a job's runner, whose job another runner ran, a warm runner of `poolName`, if the pool is
 * below its target: it takes an empty position (compare-and-set) and its record is marked warm.
 * False when the pool is full, or the runner took a job meanwhile.
 */
export async function adoptWarm(d: Deps, state: Stores, id: string, poolName: string, vacate: ReadonlySet<string> = new Set()): Promise<boolean> {
  const pool = d.config.pools.find((p) => p.name === poolName);
  if (!pool) return false;
  const now = d.now();
  const listed = (await state.warm.list()).get(pool.name) ?? [];
  const { slots, known } = planInputs(listed, await state.records.getMany(listed.map((s) => s.id)));
  const plan = planPool(idleTarget(pool, new Date(now)), slots, known, now, pool.maxIdleMs, vacate);
  // The position the settling vacated first: another empty one is another settling's, or a tick's.
  const vacated = new Set(slots.filter((s) => vacate.has(s.id)).map((s) => s.index));
  const fill = [...plan.fill].sort((a, b) => Number(vacated.has(b.index)) - Number(vacated.has(a.index)));
  for (const { index, revision } of fill) {
    const at = await state.warm.put(pool.name, index, id, revision);
    if (at === null) continue;
    const { record: r } = await markWarm(state.records, id);
    if (r?.warm === true && WAITING.has(r.state)) return true;
    // Its runner took a job meanwhile (or it ended): the position goes back to the runner it
    // pointed at (kept for the settling that vacated it, see warm-plan.ts), or back to empty.
    const before = slots.find((s) => s.index === index);
    await (before ? state.warm.put(pool.name, index, before.id, at, before.reuse) : state.warm.clear(pool.name, index, at));
    return false;
  }
  return false;
}

/**
 * Idle warm runners of each pool now, and booting ones too for the pools in `booting` (those that
 * wait for a server being rebuilt: waitForReuseMs): every position, and the records it points at (two requests).
 */
export async function idleWarmCounts(state: Stores, now: number, booting: ReadonlySet<string> = new Set()): Promise<Map<string, number>> {
  const all = await state.warm.list();
  const records = await state.records.getMany([...all.values()].flat().map((s) => s.id));
  const counts = new Map<string, number>();
  for (const [pool, listed] of all) {
    const { slots, known } = planInputs(listed, records);
    const counted = new Set(booting.has(pool) ? ["idle", "booting"] : ["idle"]);
    counts.set(pool, slots.filter((s) => counted.has(occupantOf(known.get(s.id), s, now))).length);
  }
  return counts;
}

/** A warm runner's assignment id: its pool, its position and when, unique per fill. */
export function warmId(pool: string, index: number, now: number): string {
  return `warm-${pool}-${index}-${now.toString(36)}${Math.floor(Math.random() * 36 ** 3).toString(36)}`;
}
