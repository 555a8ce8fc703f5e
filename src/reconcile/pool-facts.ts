// The facts runner pools add to a delivery: where it may run (its pools, in order, or where it was
// admitted before), its grace for a warm runner, and the boot and claim limits of its pool.
import type { Policy } from "./decide.ts";
import type { Placement } from "../state/admission.ts";
import { placedRepository, placementOf, type AssignmentRecord } from "../state/records.ts";
import type { Assignment } from "../model/assignment.ts";
import type { Prepared, ProcessDeps } from "./types.ts";

/**
 * Where an assignment may run, in order: where it was admitted before (its runner may be there),
 * else each of its pools (spill-over), else its own backend. A pool no longer configured is
 * skipped; with none left, its own backend takes it.
 */
export function placesOf(deps: Pick<ProcessDeps, "pools" | "backend">, record: AssignmentRecord, assignment: Pick<Assignment, "pools">): Placement[] {
  if (record.placement) return [record.placement];
  const places = (assignment.pools ?? []).flatMap((pool) => {
    const found = deps.pools.get(pool);
    return found ? [{ backend: found.backend, pool }] : [];
  });
  return places.length ? places : [{ backend: deps.backend }];
}

/**
 * A new job (no runner asked for yet) whose first pool has an idle warm runner waits out its grace
 * first: that runner polls Gitea every few seconds and takes it, and the job's own runner is never
 * made (GARM's job-age backoff). Counted from when the dispatcher first saw it. A pool with
 * waitForReuseMs counts its booting warm runners too (a server being rebuilt comes up sooner than a
 * new one), and its jobs wait up to that long.
 */
export async function graceFor(deps: ProcessDeps, p: Prepared): Promise<void> {
  const r = p.known!.value;
  const pool = p.assignment!.pools?.[0];
  if (deps.warmGraceMs <= 0 || r.state !== "received" || r.warm || r.runner || !p.assignment!.job || !pool || !deps.warmPools.has(pool)) return;
  const graceMs = Math.max(deps.warmGraceMs, deps.pools.get(pool)?.waitForReuseMs ?? 0);
  const left = graceMs - (deps.now() - Date.parse(r.receivedAt));
  p.facts.warmGraceMs = left > 0 && (await deps.takeIdleWarm(pool, deps.now() + left)) ? left : 0;
}

/**
 * A warm runner waits for any job for as long as its pool keeps it idle (maxIdleMs, after which
 * pool maintenance replaces it); only then is its wait a claim timeout. Ticks make the margin.
 */
export function policyOf(deps: ProcessDeps, p: Prepared): Policy {
  const r = p.known?.value;
  const pool = deps.pools.get(r?.placement?.pool ?? p.placement?.pool ?? "");
  const boot = pool ? { bootTimeoutMs: pool.bootTimeoutMs } : {};
  if (!r?.warm) return { ...deps.policy, ...boot };
  return { ...deps.policy, ...boot, claimTimeoutMs: Math.max(deps.policy.claimTimeoutMs, (pool?.maxIdleMs ?? 0) + WARM_MARGIN_MS) };
}

const WARM_MARGIN_MS = 5 * 60_000;

/** Where this delivery's runner is: as admitted now, else as its record says. */
export const placeOf = (p: Prepared): Placement => ({
  ...(p.placement ?? (p.known ? placementOf(p.known.value) : { backend: p.assignment!.backend })),
  ...placedRepository(p.assignment?.job?.repository),
});
