// Moving a job that waits for its own runner (a full backend, a QUOTAS limit, a pass to come) onto
// a warm runner that became idle, so that idle warm runners go to waiting jobs by turn, not only to
// the next new ones.
//
// Two records change, and neither write may happen alone. The job's own assignment is ended first,
// by compare-and-set from "not admitted, no runner registered": a pass that admits it at the same
// moment (a turn given, a slot taken) finds it ended when it stores the registration it made, which
// it does before it asks the backend for a workload (process.ts), and lets the slot go, as after a
// cancel; one that stored it first keeps the job. Only then does the handle move to the warm runner,
// and the runner's record get claimed for it. Should that claim fail (the runner was recycled
// meanwhile), the end is undone (`movedTo` says whose it was) and the job published again to wait
// as before. The poller writes its intent (`moving`) before the first write, so that a poll that
// dies midway is finished or undone by the next (settleMoves).
import type { AssignmentRequest } from "../../model/assignment.ts";
import type { BackendAccess, Basics, ForgeAccess, Settings, StoreAccess } from "../../domain/context.ts";
import { publishAssignment } from "../../domain/publish.ts";
import { UNADMITTED_STATES } from "../../nats/names.ts";
import { shareRules } from "../../quotas/config.ts";
import { takeQuota } from "../../quotas/limits.ts";
import { placementOf, type AssignmentRecord } from "../../state/records.ts";
import { revive, terminate } from "../../state/transitions.ts";
import type { ForgejoJob } from "./client.ts";
import type { ForgejoConfig } from "./config.ts";
import { forgejoAssignment, forgejoMsgId, jobKey, type KnownJob, type KnownStore } from "./jobs.ts";
import { claimWarm, quotaLedgerOf, releaseWarmPlaces, type WarmBinder } from "./warm.ts";
import { keepsWarm } from "../../pools/maintain.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings;

/** A job waiting for its own runner, as the poll found it. */
export interface WaitingJob {
  known: KnownJob;
  job: ForgejoJob;
  request: AssignmentRequest;
  /** Its own assignment's record, read this poll. */
  own: AssignmentRecord;
}

/**
 * Whether a job's own assignment could still give its job to a warm runner: not admitted, and no
 * runner registered for it. A turn tried while the backend was full (`chosen`) does not hold it back.
 */
export const movable = (r: AssignmentRecord) => UNADMITTED_STATES.has(r.state) && !r.runner && !r.movedTo;

/** The request its job was published with: the repository its record keeps (a rename since changes no content). */
export const requestOf = (cfg: ForgejoConfig, d: Deps, job: ForgejoJob, own: AssignmentRecord) =>
  forgejoAssignment(d.config.pools, cfg.scope, job, own.job?.repository);

export const isWaiting = (r: object): r is WaitingJob => "own" in r;

/**
 * The jobs that wait for their own runners and could take an idle warm runner instead: read only
 * while one of their pools has one idle (the idle list is read once per poll anyway).
 */
export async function waitingForWarm(d: Deps, cfg: ForgejoConfig, binder: WarmBinder, waiting: { known: KnownJob; job: ForgejoJob }[]): Promise<WaitingJob[]> {
  if (!waiting.length || !d.config.pools.some(keepsWarm)) return [];
  const routes = waiting.map((w) => ({ ...w, pool: forgejoAssignment(d.config.pools, cfg.scope, w.job)?.pools?.[0] }));
  const pools = [...new Set(routes.flatMap((w) => (w.pool ? [w.pool] : [])))];
  const idle = await Promise.all(pools.map(async (p) => ((await binder.idle(p)).length ? p : undefined)));
  const candidates = routes.filter((w) => w.pool !== undefined && idle.includes(w.pool));
  if (!candidates.length) return [];
  const records = await d.withState((s) => s.records.getMany(candidates.map((w) => w.known.id)));
  return candidates.flatMap(({ known, job }) => {
    const own = records.get(known.id)?.value;
    const request = own && movable(own) ? requestOf(cfg, d, job, own) : undefined;
    return own && request ? [{ known, job, request, own }] : [];
  });
}

/** Moves `w` to an idle warm runner of its first pool: that runner's id, or undefined (none idle, a QUOTAS limit, a pass admitted it first). */
export async function moveWaiting(d: Deps, binder: WarmBinder, store: KnownStore, w: WaitingJob): Promise<string | undefined> {
  const pool = w.request.pools?.[0];
  if (!pool || !w.job.handle) return undefined;
  const candidates = await binder.idle(pool);
  const to = candidates[0];
  if (to === undefined) return undefined;
  const repository = w.own.job?.repository;
  // Its places are taken under the warm runner's id, as a new job's are (warm.ts).
  const quota = await d.withState(async (s) => {
    const ledger = quotaLedgerOf(d, s);
    return ledger ? takeQuota(ledger, shareRules(d.config.quotas), to, repository) : "none";
  });
  if (quota === "refused") return undefined;
  candidates.shift();
  const at = d.now();
  const moving: KnownJob = { ...w.known, moving: { to, at } };
  const key = jobKey(w.known.job, w.known.attempt);
  await store.put(key, moving);
  const stamp = new Date(at).toISOString();
  const { record: ended } = await d.withState((s) =>
    terminate(s.records, w.own.id, { at: stamp, reason: `its job went to warm runner ${to}`, when: movable, also: { movedTo: to } }),
  );
  // A turn given to it meanwhile took a slot (and its QUOTAS places): they go back, as after a cancel.
  if (ended?.movedTo === to && ended.terminatedAt === stamp) await d.withState((s) => s.admission.release(placementOf(ended), ended.id));
  if (ended?.movedTo !== to || ended.terminatedAt !== stamp) {
    // A pass stored its runner's registration first (or it ended): it keeps its own runner, the warm runner stays idle.
    if (quota === "taken") await releaseWarmPlaces(d, to, repository);
    candidates.unshift(to);
    await store.put(key, w.known);
    return undefined;
  }
  d.sink.event({
    event: "moved_to_warm",
    assignment: w.own.id,
    backend: w.own.backend,
    reason: `its job went to warm runner ${to}, which is idle, while it waited its turn`,
  });
  return (await finishMove(d, store, moving, w.own, w.job, w.request)).boundAt !== undefined ? to : undefined;
}

/**
 * Finishes the moves that polls began and did not end (their intent is in `known`, updated here):
 * each is completed where its own assignment was ended for it, and undone where it was not.
 * `listed`: the jobs Forgejo lists now, by key (one that left needs no runner).
 */
export async function settleMoves(
  d: Deps,
  cfg: ForgejoConfig,
  store: KnownStore,
  known: Map<string, KnownJob>,
  listed: ReadonlyMap<string, ForgejoJob>,
): Promise<void> {
  for (const [key, k] of known) {
    if (!k.moving) continue;
    const own = await d.withState((s) => s.records.get(k.id));
    const job = listed.get(key);
    if (own?.movedTo === k.moving.to && own.state === "terminated") {
      known.set(key, await finishMove(d, store, k, own, job, job && requestOf(cfg, d, job, own)));
      continue;
    }
    // Died before its own assignment was ended: only the QUOTAS places go back.
    await releaseWarmPlaces(d, k.moving.to, own?.job?.repository);
    const { moving: _undone, ...back } = k;
    await store.put(key, back);
    known.set(key, back);
  }
}

/**
 * With its own assignment ended: the handle goes to the warm runner, and the runner is claimed for
 * the job. What the poller keeps of the job after: bound to the warm runner, or (undone) its own.
 */
async function finishMove(
  d: Deps,
  store: KnownStore,
  k: KnownJob,
  own: AssignmentRecord,
  job: ForgejoJob | undefined,
  request: AssignmentRequest | undefined,
): Promise<KnownJob> {
  const { to, at } = k.moving!;
  const key = jobKey(k.job, k.attempt);
  const bound = { job: k.job, attempt: k.attempt, handle: k.handle, repository: own.job?.repository ?? "", at: new Date(at).toISOString() };
  // Its pool refills the position now; for a job no longer listed, at its next tick.
  const pool = request?.pools?.[0] ?? "";
  const took = await d.withState(async (s) => {
    if ((await s.handles.bind(k.handle, to, k.id)) !== to) return false;
    if (await claimWarm(d, s, to, bound, pool, `given job ${k.job} attempt ${k.attempt}, which waited its turn`)) return true;
    // Recycled (or given another job) before it took this one: the handle goes back.
    await s.handles.bind(k.handle, k.id, to);
    return false;
  });
  const after: KnownJob = took ? { id: to, job: k.job, attempt: k.attempt, handle: k.handle, boundAt: at } : (({ moving: _undone, ...own }) => own)(k);
  if (!took) await undoMove(d, k, own, job, request);
  await store.put(key, after);
  return after;
}

/** The own assignment waits again: its end undone, its QUOTAS places under the warm runner given back, and its job published again (its message may be gone). */
async function undoMove(d: Deps, k: KnownJob, own: AssignmentRecord, job: ForgejoJob | undefined, request: AssignmentRequest | undefined): Promise<void> {
  const to = k.moving!.to;
  await releaseWarmPlaces(d, to, own.job?.repository);
  // Not listed any more, the job needs no runner: its assignment stays ended.
  if (!job || !request) return;
  if (await reviveMoved(d, own.id, to)) await publishAssignment(d, request, { msgId: movedBackMsgId(job, k.moving!.at) });
}

/**
 * Undoes the end of a job's own assignment whose job went to a warm runner (`to`, or any) that did
 * not take it: it waits again. True when this call did; the caller publishes the job again, under
 * movedBackMsgId (a pass may have termed its message, and dropped its wait-set entry, meanwhile).
 */
export async function reviveMoved(d: Deps, id: string, to?: string): Promise<boolean> {
  // A registration a pass stored while it was ended is not kept: the cleanup deletes that runner in Forgejo.
  const { record: back, changed } = await d.withState((s) => revive(s.records, id, (r) => r.movedTo !== undefined && (to === undefined || r.movedTo === to)));
  if (!back || !changed) return false;
  d.sink.event({
    event: "move_undone",
    assignment: id,
    backend: back.backend,
    reason: `the warm runner its job went to did not take it: it waits for its own runner again`,
  });
  return true;
}

/** A moved job's message id once its move was undone: not the one its first publish used (JetStream would drop it as a duplicate). */
export const movedBackMsgId = (job: ForgejoJob, at: number) => `${forgejoMsgId(job)}.back-${at}`;
