// What the status page and GET /v1/status show: the snapshot per backend, the most recent
// assignments, and the problems /healthz would name. A fixed number of NATS requests.
import type { Basics, ForgeAccess, Settings, StoreAccess } from "../domain/context.ts";
import { inspect } from "../nats/layout-inspect.ts";
import { recordsBucket } from "../nats/names.ts";
import { jobRepository, type AssignmentRecord } from "../state/records.ts";
import { recentRecords } from "./recent.ts";
import { takeSnapshot, type Snapshot } from "./snapshot.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & ForgeAccess & Settings;

export const RECENT_LIMIT = 50;

/** An assignment as the status page shows it: no sealed identity, no token. */
export interface RecentAssignment {
  id: string;
  backend: string;
  state: string;
  repository: string | null;
  job: string | null;
  createdAt: string;
  updatedAt: string;
  ageSeconds: number;
  runner: string | null;
  /** What happened, in the pool's words, where the state alone misleads: "ran on warm runner …", "warm runner of pool …". */
  note: string | null;
}

export interface Status extends Snapshot {
  at: string;
  problems: string[];
  recent: RecentAssignment[];
}

export async function readStatus(d: Deps): Promise<Status> {
  const [snapshot, { problems, recent }] = await Promise.all([
    takeSnapshot(d),
    d.withState(async (_state, handle) => {
      const [report, records] = await Promise.all([inspect(handle, d.config), recentRecords(handle, recordsBucket(d.config), RECENT_LIMIT)]);
      return { problems: report.problems, recent: records.map((r) => recentView(r, d.now())) };
    }),
  ]);
  return { at: new Date(d.now()).toISOString(), ...snapshot, problems, recent };
}

export function recentView(r: AssignmentRecord, now: number): RecentAssignment {
  return {
    id: r.id,
    backend: r.backend,
    state: r.state,
    repository: jobRepository(r) ?? null,
    job: r.job?.name ?? null,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
    ageSeconds: Math.max(0, Math.round((now - Date.parse(r.createdAt)) / 1_000)),
    runner: r.runner?.name ?? null,
    note: noteOf(r),
  };
}

/** A job whose runner a warm runner's take made surplus, ended (pools/taken.ts): the runner that ran it. */
const RAN_ON_WARM = /^its job ran on warm runner (\S+)$/;

function noteOf(r: AssignmentRecord): string | null {
  const ranOn = RAN_ON_WARM.exec(r.reason ?? "")?.[1];
  if (ranOn) return `ran on warm runner ${ranOn}`;
  if (!r.warm) return null;
  const pool = r.placement?.pool;
  const job = r.took ? `, ran ${r.took}` : r.bound ? `, given job ${r.bound.job}` : "";
  return `warm runner${pool ? ` of pool ${pool}` : ""}${job}`;
}
