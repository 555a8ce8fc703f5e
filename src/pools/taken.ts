// A runner took a job that is not its own (Gitea hands each polling runner the oldest queued job
// its labels cover). A cold runner that does leaves its own job to the runner of the job it took:
// the count of runners still matches the count of jobs, and the record remembers the swap. A warm
// runner that does makes one runner too many: the one asked for the job it took, or, when that
// runner is already running another job, the one standing for that job in turn. That runner
// becomes warm if its pool is below its target, and is torn down otherwise; one not yet made is
// never made.
import type { BackendAccess, Basics, ForgeAccess, Settings, State, StoreAccess } from "../domain/context.ts";
import type { Backend } from "../nats/names.ts";
import { isNatsUnavailable } from "../nats/connection.ts";
import { isRetryable } from "../state/kv.ts";
import { cancelAssignment } from "../domain/cancel.ts";
import { releaseRunner } from "../domain/teardown.ts";
import { placementOf, runnerAt, type AssignmentRecord } from "../state/records.ts";
import type { StartVia } from "../state/record.ts";
import type { Startup } from "../state/startup-times.ts";
import { adoptWarm, maintainPools } from "./maintain.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings;
/** The stores this module's steps use (domain/context.ts State). */
type Stores = Pick<State, "admission" | "records" | "startups" | "warm">;

/** What an in_progress said: the job's own assignment, the runner's, and whether that one was warm. */
export interface Taken {
  own: string;
  by: string;
  warm: boolean;
  /** The pool of the runner that took it. */
  pool: string | null;
}

const MAX_HOPS = 8;

/** A job started (its first in_progress) on a runner of `pool`, at epoch ms `at`. */
export interface Started {
  pool: string;
  own: string;
  at: number;
  /** The job's created_at from the payload: when its own record is gone, the start is timed from it. */
  createdAt?: string | undefined;
  /** When its own record was received, where the claim read it (the runner made for it took it): no read then. */
  queuedAt?: string | undefined;
  /** How the runner that took it came (its record's startVia). */
  via?: StartVia;
}

/**
 * Records the jobs' start-up times in their pools' histograms: from when the dispatcher first saw
 * each queued (its own record) to its in_progress. A payload time that does not parse is no time.
 * One read for the records not handed over, one write per pool, whatever the number of jobs.
 */
export async function observeStartups(d: Deps, started: readonly Started[]): Promise<void> {
  await d.withState(async (state) => {
    const unread = started.filter((s) => s.queuedAt === undefined).map((s) => s.own);
    const read = unread.length ? await state.records.getMany(unread) : new Map<string, { value: { receivedAt: string } }>();
    const byPool = new Map<string, Startup[]>();
    for (const s of started) {
      const receivedAt = s.queuedAt ?? read.get(s.own)?.value.receivedAt;
      const queuedAt = Date.parse(receivedAt ?? s.createdAt ?? "");
      if (!Number.isFinite(queuedAt) || queuedAt <= 0 || queuedAt > s.at) continue;
      byPool.set(s.pool, [...(byPool.get(s.pool) ?? []), { seconds: (s.at - queuedAt) / 1_000, ...(s.via ? { via: s.via } : {}) }]);
    }
    await Promise.all([...byPool].map(([pool, seen]) => state.startups.observe(pool, seen)));
  });
}

/** One job's start-up time (see observeStartups). */
export const observeStartup = (d: Deps, s: Started): Promise<void> => observeStartups(d, [s]);

/**
 * Settles a job taken by a runner not made for it. The warm runner's position is this settling's
 * to fill (kept from other passes for a moment, see warm-plan.ts): first with the runner made for
 * the job it took, else with a new warm runner. `filled` hears the backend of a pool that got a
 * new one, whose assignment waits for a pass.
 */
export async function settleTaken(d: Deps, t: Taken, filled: (backend: Backend) => Promise<unknown> = () => Promise.resolve()): Promise<void> {
  // Nothing else settles it: a surplus runner would wait for its claim timeout. So through a
  // leader election (or a server lost), on a connection of its own, for up to SETTLE_RETRY_MS.
  const until = d.now() + SETTLE_RETRY_MS;
  for (let attempt = 0, pause = 250; ; attempt++, pause = Math.min(pause * 2, 2_000)) {
    try {
      return await settleOnce(d, t, filled, attempt === 0 ? d.withState : d.withFreshState);
    } catch (err) {
      if (!(isRetryable(err) || isNatsUnavailable(err)) || d.now() + pause > until) throw err;
      await new Promise((r) => setTimeout(r, pause));
    }
  }
}

const SETTLE_RETRY_MS = 20_000;
/** Below the hold on a vacated position (LEAVING_MS in warm-plan.ts): no other pass fills it meanwhile. */
const BUSY_WAIT_MS = 8_000;
const BUSY_POLL_MS = 250;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function settleOnce(d: Deps, t: Taken, filled: (backend: Backend) => Promise<unknown>, withState: StoreAccess["withFreshState"]): Promise<void> {
  const backends = await withState(async (state) => {
    // A cold runner's swap is written with its claim (operations.ts): nothing more to settle.
    if (!t.warm) return [];
    const vacate = new Set([t.by]);
    // A surplus runner Gitea says is busy took a job whose in_progress is on its way: once its
    // claim (and swap) is written, the runner standing for the job is the next in the chain. Not
    // waited for, that one would idle until its claim timeout while a new warm runner is made.
    const until = d.now() + BUSY_WAIT_MS;
    for (let surplus = await standIn(state, t.own); surplus && (await adoptOrEnd(d, state, surplus, t.by, vacate)) === "busy";) {
      const busy = surplus;
      while (d.now() < until && (await state.records.get(busy.id))?.state === busy.state) await sleep(BUSY_POLL_MS);
      if (d.now() >= until) break;
      surplus = await standIn(state, t.own);
    }
    const summaries = t.pool ? await maintainPools(d, state, [t.pool], vacate) : [];
    return summaries.filter((s) => s.filled > 0).map((s) => d.config.pools.find((p) => p.name === s.pool)!.backend);
  });
  await Promise.all([...new Set(backends)].map(filled));
}

/**
 * The assignment id standing for job `own` now (see standIn), for a job that ended without a
 * runner (cancelled): `own` itself when nothing stands for it.
 */
export async function standInFor(d: Deps, own: string): Promise<string> {
  return (await d.withState((state) => standIn(state, own)))?.id ?? own;
}

/** The assignment standing for job `own` now: its own, or, where its runner ran another job, that job's, in turn. */
async function standIn(state: Stores, own: string): Promise<AssignmentRecord | undefined> {
  let id = own;
  for (let hop = 0; hop < MAX_HOPS; hop++) {
    const r = await state.records.get(id);
    if (!r || r.state === "completed" || r.state === "terminated") return undefined;
    if (r.state !== "claimed") return r;
    if (!r.took || r.took === id) return undefined;
    id = r.took;
  }
  return undefined;
}

async function adoptOrEnd(d: Deps, state: Stores, r: AssignmentRecord, by: string, vacate: ReadonlySet<string>): Promise<"busy" | "settled"> {
  // Its runner may have just taken a job whose in_progress is still on its way (webhooks come
  // concurrently): Gitea knows. A busy one is left to its claim.
  const runner = runnerAt(r);
  const directory = d.forge?.runners;
  if (runner && directory && (await directory.get(runner).catch(() => null))?.busy) return "busy";
  // Admitted (its pool is in its record): its runner is made, or being made by a pass right now.
  // One never admitted (still in its warm grace) is never made: it ends.
  const pool = r.placement?.pool;
  // Only a runner registered where the pool's warm runners are may become one: a runner of one
  // repository (RUNNER_SCOPE) would wait for that repository's jobs alone.
  const fits = !d.forge || !r.runner || d.forge.fitsWarm(r.runner.scope, d.config.pools.find((p) => p.name === pool)?.scope);
  if (pool && fits && (await adoptWarm(d, state, r.id, pool, vacate))) {
    d.sink.event({ event: "warm_converted", assignment: r.id, backend: r.backend, pool, reason: `its job ran on ${by}` });
    return "settled";
  }
  const cancelled = await cancelAssignment(d, r.id, `its job ran on warm runner ${by}`);
  // Neither kept nor ended: its runner took a job meanwhile, and the runner standing for the
  // job is the next in the chain (as for a busy one).
  if (!cancelled) return (await state.records.get(r.id))?.state === "claimed" ? "busy" : "settled";
  d.sink.event({ event: "taken_by_other", assignment: r.id, backend: r.backend, ...(pool ? { pool } : {}), reason: `its job ran on warm runner ${by}` });
  await releaseRunner(d, r.id, placementOf(cancelled.record).backend, runnerAt(cancelled.record));
  return "settled";
}
