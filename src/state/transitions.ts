// The assignment's changes of state as named functions, one per transition of the machine
// (model/states.ts TRANSITIONS) that more than the decision table makes. Each writes by
// compare-and-set (RecordStore.update re-reads and retries on a conflict), and only from a state
// its transition starts from and where the caller's `when` accepts the record as it stands then:
// a claim, completion or end that landed meanwhile wins. Each returns the record after, as the
// store does (the one it refused to change, when it refused; null when there is none); `changed`
// tells the caller whether this call made the change.
import { SETTLED_STATES, TRANSITIONS, WAITING, type AssignmentState, type TransitionName } from "../model/states.ts";
import type { AssignmentRecord, Interruption, RecordStore } from "./records.ts";

type Records = Pick<RecordStore, "update">;
type When = (r: AssignmentRecord) => boolean;
export interface Stepped {
  record: AssignmentRecord | null;
  changed: boolean;
}

const FROM = new Map<TransitionName, ReadonlySet<AssignmentState>>(TRANSITIONS.map((t) => [t.name, new Set<AssignmentState>(t.from)]));

/** The states transition `N` starts from. */
type FromOf<N extends TransitionName> = Extract<(typeof TRANSITIONS)[number], { name: N }>["from"][number];
/** A record standing in one of the states `S`. */
export type In<S extends AssignmentState> = Extract<AssignmentRecord, { state: S }>;

/** Whether transition `name` starts from the state `r` stands in. */
export function startsFrom<N extends TransitionName>(name: N, r: AssignmentRecord): r is In<FromOf<N>> {
  return FROM.get(name)!.has(r.state);
}

function step<N extends TransitionName>(records: Records, id: string, name: N, when: When, write: (r: In<FromOf<N>>) => AssignmentRecord): Promise<Stepped> {
  // `when` first: a caller that notes what it saw hears of every read, also of one this transition does not start from.
  return change(records, id, (r) => (when(r) && startsFrom(name, r) ? write(r) : undefined));
}

/** Writes what `write` makes of the record as it stands, by compare-and-set; `changed`: its last read gave a write. */
async function change(records: Records, id: string, write: (r: AssignmentRecord) => AssignmentRecord | undefined): Promise<Stepped> {
  let changed = false;
  const record = await records.update(id, (r) => {
    const next = write(r);
    changed = next !== undefined;
    return next;
  });
  return { record, changed };
}

const always: When = () => true;

/** terminate: ends the assignment (cancelled, not needed, moved, past its lifetime). `also`: fields written with the end (movedTo). */
export function terminate(
  records: Records,
  id: string,
  { at, reason, when = always, also = {} }: { at: string; reason: string; when?: When; also?: Pick<AssignmentRecord, "movedTo"> },
): Promise<Stepped> {
  return step(records, id, "terminate", when, (r) => ({ ...r, state: "terminated", terminatedAt: at, reason, ...also }));
}

/** claim: a runner took the assignment (its own, or a warm runner bound to its job: `bound`); `took`, the job it runs when not its own. */
export function claim(
  records: Records,
  id: string,
  { at, when = always, took, bound }: { at: string; when?: When; took?: string | undefined; bound?: AssignmentRecord["bound"] },
): Promise<Stepped> {
  return step(records, id, "claim", when, (r) => ({
    ...r,
    state: "claimed",
    claimedAt: at,
    ...(took && took !== id ? { took } : {}),
    ...(bound ? { bound } : {}),
  }));
}

/** complete: the runner finished (or, `unclaimed`, the forge says it ran without a claim reaching us). */
export function complete(records: Records, id: string, { at, when = always }: { at: string; when?: When }): Promise<Stepped> {
  return step(records, id, "complete", when, (r) => ({ ...r, state: "completed", completedAt: at }));
}

/**
 * revive: a moved job's end undone (its warm runner did not take it); a registration stored while
 * it was ended is not kept. It waits anew: a turn chosen before is over, and its next wait is a new
 * one (its entry, if it had one, went at the move), so its delivery puts it in the wait set again.
 */
export function revive(records: Records, id: string, when: When): Promise<Stepped> {
  return step(records, id, "revive", when, (r) => {
    const { terminatedAt: _t, reason: _r, movedTo: _m, runner: _dropped, claimedAt: _c, chosen: _over, heldBy: _before, ...waiting } = r;
    return { ...waiting, state: "capacity_wait" };
  });
}

/** start_over: a given-up job served afresh, as a new incarnation (tokens of the old one are refused). */
export function startOver(records: Records, id: string, { at, when }: { at: string; when: When }): Promise<Stepped> {
  return step(records, id, "start_over", when, (r) => {
    const { id, backend, contentHash, createdAt, job, warm } = r;
    return { id, backend, contentHash, createdAt, state: "received", receivedAt: at, updatedAt: at, ...(job ? { job } : {}), ...(warm ? { warm } : {}) };
  });
}

/** States in which its runner was asked for (or is about to be) and has not taken a job: the machine's WAITING. */
export type Waiting = "received" | "capacity_wait" | "quota_wait" | "backend_pending" | "backend_ready";

/** Whether `r`'s runner waits for a job: no runner took it, and it did not end. */
export function isWaiting(r: AssignmentRecord): r is In<Waiting> {
  return WAITING.has(r.state);
}

/**
 * Forgets runner `runnerId`'s identity (the forge no longer has it, or it outlived its claim
 * timeout), so that the next delivery registers afresh: ask_again from backend_ready, the state
 * kept otherwise. Only while the record names that runner and no runner took the job.
 */
export function forgetRunner(records: Records, id: string, runnerId: number, when: When = always): Promise<Stepped> {
  return change(records, id, (r) => {
    if (r.runner?.id !== runnerId || !isWaiting(r) || !when(r)) return undefined;
    const { runner: _gone, readyAt: _stale, ...rest } = r;
    return { ...rest, state: r.state === "backend_ready" ? "backend_pending" : r.state };
  });
}

// Marks: fields written without a change of state, by compare-and-set all the same.

/** Marks a waiting assignment chosen for its turn (FAIR_SHARE): a second pass that reads the mark does not choose it again. */
export function choose(records: Records, id: string): Promise<Stepped> {
  return change(records, id, (r) => (!SETTLED_STATES.has(r.state) && !r.chosen ? { ...r, chosen: true } : undefined));
}

/** Marks that a cloud VM of this boot attempt fetched its launch. Only while no runner took the job. */
export function markLaunched(records: Records, id: string, at: string): Promise<Stepped> {
  return change(records, id, (r) => (isWaiting(r) && !r.launchedAt ? { ...r, launchedAt: at } : undefined));
}

/** Marks this boot attempt's VM as reported late with its launch: said once. False in `changed` when another pass said it. */
export function markLaunchLate(records: Records, id: string, askedAt: string): Promise<Stepped> {
  return change(records, id, (r) => (isWaiting(r) && r.askedAt === askedAt && !r.launchedAt && !r.launchLate ? { ...r, launchLate: true } : undefined));
}

/** Marks an assignment whose runner waits for a job as a warm runner of its pool (it stands in a warm position). */
export function markWarm(records: Records, id: string): Promise<Stepped> {
  return change(records, id, (r) => (isWaiting(r) && !r.warm ? { ...r, warm: true } : undefined));
}

/**
 * ask_again after an interruption before the claim: its runner's machine is being taken back, so
 * a new runner is asked for, under a new incarnation (the old runner's claim token is refused) and
 * with its identity forgotten (the next delivery registers afresh). Only while no runner took it.
 */
export function replaceInterrupted(records: Records, id: string, interrupted: Interruption, when: When = always): Promise<Stepped> {
  return change(records, id, (r) => {
    if (!isWaiting(r) || !when(r)) return undefined;
    const { runner: _gone, readyAt: _r, askedAt: _a, askedBy: _b, heldUntil: _h, ...rest } = r;
    const asked = r.state === "backend_pending" || r.state === "backend_ready";
    return { ...rest, state: asked ? "backend_pending" : r.state, replaced: (r.replaced ?? 0) + 1, interrupted };
  });
}

/** terminate after an interruption after the claim: its job was lost with its runner. */
export function endInterrupted(records: Records, id: string, interrupted: Interruption, when: When = always): Promise<Stepped> {
  return step(
    records,
    id,
    "terminate",
    (r) => r.state === "claimed" && when(r),
    (r) => ({
      ...r,
      state: "terminated",
      terminatedAt: interrupted.at,
      reason: "its runner's machine was taken back after its job started",
      interrupted,
    }),
  );
}
