// Carrying out a verdict's effects: all of its record changes (and a new runner identity) in one
// compare-and-set write, then the slot release and the teardown it calls for.
import type { Effect } from "./decide.ts";
import { isWaiting, type In, type Waiting } from "../state/transitions.ts";
import { isRetryable } from "../state/kv.ts";
import { incarnationOf, type AssignmentRecord, type RecordStore, type RunnerRef } from "../state/records.ts";
import { whoseJob } from "../quotas/config.ts";
import { base64 } from "../model/crypto.ts";
import type { WaitEntry } from "../state/wait-set.ts";
import { placeOf } from "./pool-facts.ts";
import { UNADMITTED_STATES } from "../nats/names.ts";
import { ASKED_FOR } from "../model/states.ts";
import type { Prepared, ProcessDeps } from "./types.ts";

/** All of a verdict's record changes, and a new runner identity, in one write. */
export async function applyEffects(
  deps: ProcessDeps,
  p: Prepared,
  effects: Effect[],
  ref: RunnerRef | undefined,
  holdUntil?: number,
  /** Why it ends, for an effect that ends it (end_unneeded): the verdict's term reason. */
  reason?: string,
): Promise<AssignmentRecord | null> {
  if (!p.assignment || !p.known) return null;
  const at = new Date(deps.now()).toISOString();
  /** The state this delivery decided from: a wait decided on a record its turn has moved on since is stale. */
  const decidedFrom = p.known.value.state;
  const change = (r: AssignmentRecord): AssignmentRecord | undefined => {
    let next: AssignmentRecord = ref && !r.runner ? { ...r, runner: ref } : r;
    const { pool, backend } = p.placement ?? {};
    if (pool !== undefined && backend !== undefined && !next.placement) next = { ...next, placement: { pool, backend } };
    // How its machine was made, as its backend said after the ask (a claim read it for its start-up's split).
    if (p.made && isWaiting(next) && next.made !== p.made) next = { ...next, made: p.made };
    // State changes never overwrite a claim (or an end) that arrived meanwhile.
    for (const effect of effects) {
      if (!isWaiting(next)) break;
      // A delivery back from its hold that read its job waiting must not undo the turn given
      // meanwhile (the compare-and-set failed, and the change is made again on the turn's record).
      if (WAITS.has(effect) && ASKED_FOR.has(next.state) && next.state !== decidedFrom) continue;
      next = stateAfter(next, effect, { at, holdUntil, askedBy: p.msg.ackSubject, reason });
    }
    // A job that waits in the wait set: the record names its message's latest delivery, which its
    // turn naks (a nak naming an earlier delivery is ignored once the message came back), and the
    // wait its entry was put in for. A turn chosen before is over: the next one is chosen anew.
    if (entering && UNADMITTED_STATES.has(next.state) && (next.heldBy !== p.msg.ackSubject || next.waits !== entering.wait || next.chosen)) {
      const { chosen: _over, ...rest } = next;
      next = { ...rest, heldBy: p.msg.ackSubject, waits: entering.wait };
    }
    return next === r ? undefined : next;
  };
  // A new registration must reach the record: while the records bucket elects a leader, reads
  // still answer but writes fail for seconds, and the pass's connection may have died with its
  // server. Keep trying, on a new connection, rather than register twice.
  // Put in before the record says it waits, so that a record that waits always has its entry: a
  // pass that dies in between is repeated with the same wait's id, which JetStream keeps once. A
  // return from its hold finds the record in this wait already, and its entry there (an entry goes
  // only once its record left the waiting states): nothing to put in, after an hour neither.
  const entering = effects.includes("enter_wait_set") && deps.waiting ? { wait: waitNumber(p.known.value) } : undefined;
  if (entering && entering.wait !== (p.known.value.waits ?? 0))
    await deps.waiting!.set.add(deps.backend, waitEntryOf(p), waitKey(p.known.value, entering.wait));
  const write = (records: RecordStore) => records.updateFrom(p.known!, change);
  const written = ref
    ? await retryUnavailable((attempt) => (attempt === 0 ? write(deps.records) : deps.withFreshRecords(write)), deps.now, REF_WRITE_RETRY_MS).catch((err) => {
        deps.sink.error("storing a runner registration failed", { assignment: p.assignment!.id, backend: deps.backend, reason: (err as Error).message });
        throw err;
      })
    : await write(deps.records);
  // The next write of this delivery (a registration is stored before its backend call) starts from here.
  if (written) p.known = written;
  const after = written?.value ?? null;
  const place = placeOf(p);
  const gaveUp = effects.includes("give_up_boot") && after?.gaveUpAt === at;
  if (gaveUp && place.pool) {
    await deps
      .countGiveUp(place.pool)
      .catch((err) => deps.sink.error("counting a boot give-up failed", { assignment: p.assignment!.id, reason: (err as Error).message }));
  }
  const retried =
    (effects.includes("boot_retry") && after?.state === "backend_pending" && !after.askedAt) ||
    (effects.includes("end_unneeded") && after?.terminatedAt === at);
  if (effects.includes("release_slot") || gaveUp || retried) {
    p.freedSlot = true;
    await deps.admission.release(place, p.assignment.id);
  }
  // Tear down only when the claim did not win the race: a claimed runner is left alone. The Gitea
  // runner of one given up on goes with the sweep's next look (its record is terminated).
  const forgot = effects.includes("forget_ready_and_teardown") && after?.state === "backend_pending" && !after.readyAt;
  if (forgot || gaveUp || retried) {
    const id = p.assignment.id;
    await deps
      .callBackend((signal) => deps.runnersFor(place.backend).teardown(id, signal))
      .catch((err) => {
        deps.sink.event({ event: "teardown_failed", assignment: id, backend: deps.backend, reason: (err as Error).message });
      });
  }
  return after;
}

const WAITS: ReadonlySet<Effect> = new Set(["mark_waiting", "mark_quota_wait"]);

/**
 * The number of the wait a delivery that enters the wait set is in: its record's own while the
 * record waits there already (a return from its hold: it names the message held for that wait),
 * the next one otherwise (its entry was taken out at its turn, it was revived, or it never had
 * one; a pass repeated after it died before its write reads the same record, so the same number).
 * A record from before the count that waits there is in wait 0: its entry (of the old id) is there.
 */
export function waitNumber(r: AssignmentRecord): number {
  const n = r.waits ?? 0;
  const inIt = (r.state === "capacity_wait" || r.state === "quota_wait") && r.heldBy !== undefined && !r.chosen;
  return inIt ? n : n + 1;
}

/** The wait's part of its entry's message id: the record's life, and the wait within it. */
export const waitKey = (r: AssignmentRecord, wait: number) => `${incarnationOf(r)}-${wait}`;

/** What the wait set keeps of a delivery that waits: its assignment, whose it is, and where its message is held. */
export function waitEntryOf(p: Prepared): WaitEntry {
  const at = whoseJob(p.assignment?.job?.repository);
  return { id: p.assignment!.id, owner: at.owner, repository: at.repository, data: base64(p.msg.data), ack: p.msg.ackSubject };
}

/** How long a pass keeps trying to store a new runner registration (a JetStream leader election). */
export const REF_WRITE_RETRY_MS = 20_000;

async function retryUnavailable<T>(fn: (attempt: number) => Promise<T>, now: () => number, withinMs: number): Promise<T> {
  const until = now() + withinMs;
  for (let attempt = 0, pause = 250; ; attempt++, pause = Math.min(pause * 2, 2_000)) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (!isRetryable(err) || now() + pause > until) throw err;
      await new Promise((r) => setTimeout(r, pause));
    }
  }
}

/** What an effect's write says of the delivery: its time, a cron pass's hold, the delivery's ack subject. */
interface Written {
  at: string;
  holdUntil: number | undefined;
  askedBy: string;
  reason: string | undefined;
}

/**
 * The record after one of the decision's effects on a record whose runner still waits: itself where the effect changes nothing of it.
 * The write that asks for a runner (or finds it ready) names the delivery, for the claim to ack.
 */
function stateAfter(r: In<Waiting>, effect: Effect, { at, holdUntil, askedBy, reason }: Written): AssignmentRecord {
  switch (effect) {
    case "mark_waiting":
      return r.state === "capacity_wait" ? r : { ...r, state: "capacity_wait" };
    case "mark_quota_wait":
      return r.state === "quota_wait" ? r : { ...r, state: "quota_wait" };
    case "mark_pending":
      return r.state === "backend_pending" && r.askedAt ? r : { ...r, state: "backend_pending", askedAt: r.askedAt ?? at, askedBy };
    case "mark_ready":
      return r.state === "backend_ready" && r.readyAt
        ? r
        : { ...r, state: "backend_ready", readyAt: r.readyAt ?? at, askedBy, ...(holdUntil ? { heldUntil: new Date(holdUntil).toISOString() } : {}) };
    case "forget_ready_and_teardown":
    case "boot_retry": {
      // A new boot attempt: what was seen of the last VM's launch is not this one's.
      const { readyAt: _forgotten, askedAt: _restarted, launchedAt: _l, launchLate: _ll, made: _m, ...rest } = r;
      return { ...rest, state: "backend_pending", ...(effect === "boot_retry" ? { bootAttempts: (r.bootAttempts ?? 0) + 1 } : {}) };
    }
    case "end_unneeded":
      return { ...r, state: "terminated", terminatedAt: at, reason: reason ?? "its job started on another runner" };
    // Its job cannot be taken yet, but its runner is alive: a new claim window, the same runner.
    case "renew_ready":
      return r.state === "backend_ready" ? { ...r, readyAt: at } : r;
    case "give_up_boot": {
      const bootAttempts = (r.bootAttempts ?? 0) + 1;
      return { ...r, state: "terminated", terminatedAt: at, reason: `its runner did not boot in ${bootAttempts} attempts`, gaveUpAt: at, bootAttempts };
    }
    default:
      return r;
  }
}
