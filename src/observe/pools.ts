// Each runner pool as /status and /metrics show it: its runners by what they are doing (from the
// records of the slot holders the snapshot reads anyway), its warm target now, and its job
// start-up times (one more request for every pool together).
import type { Pool } from "../pools/config.ts";
import { idleTarget } from "../pools/schedule.ts";
import type { AssignmentRecord } from "../state/records.ts";
import type { StartupHistogram } from "../state/startup-times.ts";
import { BOOTING } from "../model/states.ts";

export interface PoolSnapshot {
  pool: string;
  backend: string;
  /** Warm runners it keeps now (minIdle, or its schedule window's). */
  target: number;
  maxRunners: number | null;
  /** Up and waiting for a job. */
  idle: number;
  /** Running a job. */
  busy: number;
  /** Asked for, not up yet. */
  booting: number;
  /** Of idle and booting, those kept warm. */
  warm: number;
  /** Of the warm ones, those rebuilt on a finished job's server (reuse: "rebuild"). */
  warmByReuse?: number;
  startup: StartupHistogram | null;
}

export function poolSnapshots(
  pools: readonly Pool[],
  holders: readonly AssignmentRecord[],
  histograms: ReadonlyMap<string, StartupHistogram>,
  now: number,
): PoolSnapshot[] {
  return pools.map((p) => {
    const mine = holders.filter((r) => r.placement?.pool === p.name);
    const count = (pick: (r: AssignmentRecord) => boolean) => mine.filter(pick).length;
    const warmNow = (r: AssignmentRecord) => r.warm === true && (r.state === "backend_ready" || BOOTING.has(r.state));
    return {
      pool: p.name,
      backend: p.backend,
      target: idleTarget(p, new Date(now)),
      maxRunners: p.maxRunners ?? null,
      // A VM that fetched its launch runs its runner: idle, before its backend says so (as warm-plan.ts counts it).
      idle: count((r) => r.state === "backend_ready" || (BOOTING.has(r.state) && r.launchedAt !== undefined)),
      busy: count((r) => r.state === "claimed"),
      booting: count((r) => BOOTING.has(r.state) && r.launchedAt === undefined),
      warm: count(warmNow),
      warmByReuse: count((r) => warmNow(r) && r.reuse !== undefined),
      startup: histograms.get(p.name) ?? null,
    };
  });
}
