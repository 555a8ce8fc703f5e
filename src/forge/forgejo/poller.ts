// One poll of Forgejo's waiting list, and what follows from it: new attempts published as
// assignments, running ones claimed, vanished ones completed or cancelled. Forgejo 15 sends no
// job webhook, so this list is the source of truth. The caller (object.ts, a Durable Object per
// scope) runs one poll at a time; publishing is idempotent anyway (message id per job, attempt
// and handle; records by assignment id), so a second poller would store nothing new.
import type { BackendAccess, Basics, ForgeAccess, Settings, StoreAccess } from "../../domain/context.ts";
import { Conflict } from "../../model/errors.ts";
import { claimAssignment, completeAssignmentRun, giteaRunnerOf, TERMINAL } from "../../domain/operations.ts";
import { createWarmBinder } from "./warm.ts";
import { isWaiting, movedBackMsgId, moveWaiting, reviveMoved, settleMoves, waitingForWarm } from "./move.ts";
import { publishAssignment } from "../../domain/publish.ts";
import { createLimiter } from "../../model/limit.ts";
import { releaseRunner } from "../../domain/teardown.ts";
import { placementOf, runnerAt } from "../../state/records.ts";
import type { Backend } from "../../nats/names.ts";
import { cancelAssignment } from "../../domain/cancel.ts";
import type { ForgejoClient, ForgejoJob } from "./client.ts";
import type { AssignmentRequest } from "../../model/assignment.ts";
import { memoryNames, repositoryNames, type NameStore } from "./names.ts";
import { runnerScope } from "./config.ts";
import { heldNow } from "../../reconcile/admit-waiting.ts";
import { keepsWarm } from "../../pools/maintain.ts";
import { inTurnOrder } from "../../quotas/fair-share.ts";
import { shareRules, whoseJob } from "../../quotas/config.ts";
import type { ForgejoConfig } from "./config.ts";
import { forgejoAssignment, forgejoAssignmentId, forgejoMsgId, jobKey, planPoll, type KnownJob, type KnownStore } from "./jobs.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings;

export type { KnownStore } from "./jobs.ts";

export interface PollOutcome {
  /** Forgejo answered the list. */
  ok: boolean;
  reason?: string;
  listed: number;
  published: number;
  /** New jobs given to idle warm runners instead. */
  bound: number;
  /** Jobs that waited for their own runners (or their turn), moved to idle warm runners. */
  moved: number;
  claimed: number;
  ended: number;
  /** Backends with new assignments, claims or freed slots: the caller runs a pass there now. */
  backends: Backend[];
}

/** A claimed job gone from the list whose runner Forgejo still has after this long ran elsewhere (or hangs). */
export const GONE_GRACE_MS = 30_000;
/** A handle bound to a warm runner whose record was not claimed for it this long ago was a poll that died midway. */
export const STALE_BINDING_MS = 30_000;
/** Calls in flight at once: one NATS connection and Forgejo calls stay within an invocation's six. */
const AT_ONCE = 4;

export async function pollForgejo(
  d: Deps,
  client: ForgejoClient,
  cfg: ForgejoConfig,
  store: KnownStore,
  names: NameStore = memoryNames(),
): Promise<PollOutcome> {
  const outcome: PollOutcome = { ok: true, listed: 0, published: 0, bound: 0, moved: 0, claimed: 0, ended: 0, backends: [] };
  let jobs: ForgejoJob[];
  try {
    jobs = await client.jobs(cfg.scope);
  } catch (err) {
    // Nothing is concluded from a list we did not get: no job counts as gone.
    return { ...outcome, ok: false, reason: (err as Error).message };
  }
  outcome.listed = jobs.length;
  const known = await store.all();
  if ([...known.values()].some((k) => k.moving)) await settleMoves(d, cfg, store, known, new Map(jobs.map((j) => [jobKey(j.id, j.attempt), j])));
  const plan = planPoll(known, jobs, d.now(), d.config.claimTimeoutMs);
  const binder = createWarmBinder(d);
  const limit = createLimiter(AT_ONCE);
  const each = <T>(items: T[], fn: (item: T) => Promise<void>) =>
    Promise.all(items.map((item) => limit(() => fn(item).catch((err) => d.sink.error("forgejo poll step failed", { reason: (err as Error).message })))));
  const skip = (job: ForgejoJob, skipped: NonNullable<KnownJob["skipped"]>) =>
    store.put(jobKey(job.id, job.attempt), {
      id: forgejoAssignmentId(job.id, job.attempt),
      job: job.id,
      attempt: job.attempt ?? 1,
      handle: job.handle ?? "",
      skipped,
    });
  const backends = new Set<Backend>();

  await each(plan.unbindable, async (job) => {
    d.sink.event({
      event: "unbindable_job",
      assignment: forgejoAssignmentId(job.id, job.attempt),
      backend: undefined,
      reason: "the job has no handle (created before Forgejo 15): no runner can be bound to it",
    });
    await skip(job, "unbindable");
  });
  await each(plan.conflicting, async (job) => {
    d.sink.event({
      event: "handle_conflict",
      assignment: forgejoAssignmentId(job.id, job.attempt),
      backend: undefined,
      reason: "listed with another handle than the one published",
    });
    const key = jobKey(job.id, job.attempt);
    const k = known.get(key);
    if (k) await store.put(key, { ...k, conflictHandle: job.handle });
  });
  // A job given to a warm runner that ended before taking it (its workload exited and said so) is
  // taken back at once, and published as any other this poll (its handle moves to its own runner
  // there): not left until CLAIM_TIMEOUT_MS.
  if (plan.boundWaiting.length) {
    const runners = await d.withState((s) => s.records.getMany(plan.boundWaiting.map((b) => b.known.id)));
    for (const { known: k, job } of plan.boundWaiting) {
      const r = runners.get(k.id)?.value;
      if (r && !TERMINAL.has(r.state)) continue;
      d.sink.event({
        event: "warm_exited",
        assignment: k.id,
        backend: r?.backend,
        reason: `its warm runner ended before taking job ${k.job}: the job is published as any other`,
      });
      await store.delete(jobKey(k.job, k.attempt));
      plan.publish.push(job);
    }
  }
  const routed: { job: ForgejoJob; request: AssignmentRequest }[] = [];
  const repositories = plan.publish.length ? await repositoryNames(plan.publish, cfg.scope, client, names, d.now(), d.sink) : new Map<number, string>();
  await each(plan.publish, async (job) => {
    const request = forgejoAssignment(d.config.pools, cfg.scope, job, repositories.get(job.repo_id ?? 0));
    if (request) return void routed.push({ job, request });
    d.sink.event({ event: "no_route", assignment: forgejoAssignmentId(job.id, job.attempt), backend: undefined });
    await skip(job, "no_route");
  });
  // Idle warm runners go one at a time, by turn (fewer runners than jobs: fair share decides who
  // gets them), to new jobs and to jobs that wait for their own runners alike; each takes its job's
  // QUOTAS places.
  const cold: typeof routed = [];
  const failed = (err: unknown) => void d.sink.error("forgejo poll step failed", { reason: (err as Error).message });
  for (const r of await inTurn(d, [...routed, ...(await waitingForWarm(d, cfg, binder, plan.waiting))])) {
    if (isWaiting(r)) {
      if (!(await moveWaiting(d, binder, store, r).catch(failed))) continue;
      outcome.moved++;
      // A slot its turn took may be free now, and the warm position is being refilled: a pass now.
      backends.add(r.request.backend);
      continue;
    }
    // One that fails midway may leave its handle bound to a warm runner it did not claim: the
    // publish below then leaves the job to a later poll (STALE_BINDING_MS).
    const warm = await binder.bind(r.job, r.request).catch(failed);
    if (!warm) {
      cold.push(r);
      continue;
    }
    outcome.bound++;
    // The warm position is being refilled: a pass now asks for the new runner.
    backends.add(r.request.backend);
    await store.put(jobKey(r.job.id, r.job.attempt), { id: warm, job: r.job.id, attempt: r.job.attempt ?? 1, handle: r.job.handle!, boundAt: d.now() });
  }
  cold.sort((a, b) => a.job.id - b.job.id);
  await each(cold, async ({ job, request }) => {
    // The handle decides who runs the attempt: its own runner, unless it is bound elsewhere.
    let holder = await d.withState((s) => s.handles.bind(job.handle!, request.id));
    // Taken back from a warm runner: its own assignment, ended if the job was moved there, waits again.
    let back = false;
    if (holder !== request.id) {
      const given = await d.withState((s) => s.records.get(holder));
      const bound = given?.bound;
      // A warm runner another poller (or this one, before it lost its storage) gave it to: followed, not doubled.
      if (bound && bound.handle === job.handle && !TERMINAL.has(given.state)) {
        return store.put(jobKey(job.id, job.attempt), {
          id: holder,
          job: job.id,
          attempt: job.attempt ?? 1,
          handle: job.handle,
          boundAt: Date.parse(bound.at),
        });
      }
      // Given to a warm runner that ended before taking it: the job's own runner runs it.
      if (bound && bound.handle === job.handle) holder = await d.withState((s) => s.handles.bind(job.handle!, request.id, holder));
      else if (given?.warm) {
        // Bound to a warm runner whose record another poll is claiming now (the next poll sees
        // how that ended), or whose poll died doing so (after STALE_BINDING_MS: the job's own runner).
        const since = await d.withState((s) => s.handles.since(job.handle!));
        if (since !== undefined && d.now() - since < STALE_BINDING_MS) return;
        holder = await d.withState((s) => s.handles.bind(job.handle!, request.id, holder));
      }
      back = holder === request.id && (await reviveMoved(d, request.id));
    }
    if (holder !== request.id) {
      d.sink.event({ event: "handle_conflict", assignment: request.id, backend: undefined, reason: "its handle is bound to another job attempt" });
      return skip(job, "conflict");
    }
    try {
      const published = await publishAssignment(d, request, { msgId: back ? movedBackMsgId(job, d.now()) : forgejoMsgId(job) });
      if (!published.duplicate || back) outcome.published++;
      backends.add(published.backend);
    } catch (err) {
      if (!(err instanceof Conflict)) throw err;
      d.sink.event({ event: "conflict", assignment: request.id, backend: request.backend, reason: "published before with other content" });
      return skip(job, "conflict");
    }
    await store.put(jobKey(job.id, job.attempt), { id: request.id, job: job.id, attempt: job.attempt ?? 1, handle: job.handle! });
  });
  await each(plan.claim, async (k) => {
    const record = await d.withState((s) => s.records.get(k.id));
    if (record && !record.runner && !TERMINAL.has(record.state)) {
      // No runner of ours exists to run it: one not bound by handle (an operator's own) took it.
      if (await cancelAssignment(d, k.id, "a runner not registered by the dispatcher took the job")) outcome.ended++;
    } else {
      // Bound by its handle, the task is our runner's: the job running is the claim.
      await claimAssignment(d, k.id).catch((err) => {
        if (!(err instanceof Conflict)) throw err;
      });
      outcome.claimed++;
      // A pass acks the claimed message now: held, it keeps a MaxAckPending place from the others.
      if (record) backends.add(record.backend);
    }
    await store.put(jobKey(k.job, k.attempt), { ...k, claimed: true });
  });
  await each(plan.unbind, async (k) => {
    // Its warm runner never took it: that runner goes, and the next poll publishes the job as any other.
    const done = await completeAssignmentRun(d, k.id, { unclaimed: true }).catch(() => undefined);
    if (done?.changed) await releaseRunner(d, k.id, done.runsOn, giteaRunnerOf(done));
    d.sink.event({
      event: "claim_timeout",
      assignment: k.id,
      backend: done?.backend,
      reason: `its warm runner did not take job ${k.job} within CLAIM_TIMEOUT_MS`,
    });
    await store.delete(jobKey(k.job, k.attempt));
    if (done?.changed) backends.add(done.runsOn);
  });
  await each(plan.gone, async (k) => {
    const freed = await settleGone(d, client, cfg, k, store);
    if (!freed) return;
    outcome.ended++;
    backends.add(freed);
  });
  outcome.backends = [...backends];
  return outcome;
}

/**
 * A published job no longer listed: it ended (its ephemeral runner is deleted after its task) or
 * was cancelled (its runner, if any, never got a task). The backend whose slot it freed, when its
 * assignment ended now.
 */
async function settleGone(d: Deps, client: ForgejoClient, cfg: ForgejoConfig, k: KnownJob, store: KnownStore): Promise<Backend | undefined> {
  const key = jobKey(k.job, k.attempt);
  const record = k.skipped ? null : await d.withState((s) => s.records.get(k.id));
  if (!record || TERMINAL.has(record.state)) {
    await store.delete(key);
    return undefined;
  }
  const runner = runnerAt(record);
  const backend = placementOf(record).backend;
  const present = runner ? (await client.getRunner(runnerScope(cfg, runner), runner.id)) !== null : false;
  if (runner && !present) {
    // Forgejo deleted it: it ran its job (a fast one may never have been seen running).
    const done = await completeAssignmentRun(d, k.id, { unclaimed: true });
    if (done.changed) await releaseRunner(d, k.id, backend, undefined);
  } else if (k.boundAt !== undefined && !k.claimed) {
    // Given to a warm runner that never took it (cancelled first): that runner goes too.
    const done = await completeAssignmentRun(d, k.id, { unclaimed: true });
    if (done.changed) await releaseRunner(d, k.id, backend, runner);
  } else if (k.claimed || record.state === "claimed") {
    // Ran, and its runner is still there: give Forgejo time to delete it; past that, another runner ran it.
    if (k.goneSince === undefined || d.now() - k.goneSince < GONE_GRACE_MS) {
      if (k.goneSince === undefined) await store.put(key, { ...k, goneSince: d.now() });
      return undefined;
    }
    const done = await completeAssignmentRun(d, k.id, { unclaimed: true });
    if (done.changed) await releaseRunner(d, k.id, backend, runner);
  } else {
    const cancelled = await cancelAssignment(d, k.id, "the job left Forgejo's waiting list before any runner took it");
    if (cancelled) await releaseRunner(d, k.id, backend, runner);
  }
  await store.delete(key);
  return backend;
}

/**
 * Jobs in the order idle warm runners go to them: oldest first, or, with fair share and jobs
 * of several repositories, by turn (the runners their owners hold now, on their first pool's
 * backend, two reads).
 */
async function inTurn<T extends { job: ForgejoJob; request: AssignmentRequest }>(d: Deps, routed: T[]): Promise<T[]> {
  if (!routed.length) return [];
  const oldest = [...routed].sort((a, b) => a.job.id - b.job.id);
  const whose = (r: T) => whoseJob(r.request.job?.repository);
  if (!d.config.fairShare || !d.config.pools.some(keepsWarm) || new Set(oldest.map((r) => whose(r).repository)).size < 2) return oldest;
  const backend = oldest[0]!.request.backend;
  const shares = await d.withState((s) => heldNow({ admission: s.admission, records: s.records, backend }, []));
  return inTurnOrder(oldest, whose, (r) => r.job.id, shares, shareRules(d.config.quotas));
}
