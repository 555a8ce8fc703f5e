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
    return {
      pool: p.name,
      backend: p.backend,
      target: idleTarget(p, new Date(now)),
      maxRunners: p.maxRunners ?? null,
      idle: count((r) => r.state === "backend_ready"),
      busy: count((r) => r.state === "claimed"),
      booting: count((r) => BOOTING.has(r.state)),
      warm: count((r) => r.warm === true && (r.state === "backend_ready" || BOOTING.has(r.state))),
      startup: histograms.get(p.name) ?? null,
    };
  });
}
