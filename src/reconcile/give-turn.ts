// Giving one job its turn (fair share). A job whose message is held: its first delivery put it in
// the wait set with where its message went (its ack subject) and nak'd it for a long while
// (waitHoldDelay) rather than acking it. The pass that gives the turn takes its slot and asks for
// its runner itself, as the delivery would have: the registration stored first, at the revision
// read, so a job that ended meanwhile gets no workload. The held message stays the job's timer and
// its claim's ack: the claim acks it by the subject the registration names (askedBy), and a runner
// that never claims is looked at when the hold ends, as any redelivery is. Nothing is published
// again and nothing is delivered a second time. Only once its record has left the waiting states
// (its runner asked for, or it ended) is the job taken out of the wait set, by the pass once its
// turns are given (takeOut: the oldest together): a pass that dies before leaves it there, and the
// next pass gives the turn again (the slot is the same id's).
// A job of an entry from before the hold is published again instead (republishTurn).
import { decodeAssignment, type Assignment } from "../model/assignment.ts";
import type { PlaceOptions, Placement } from "../state/admission.ts";
import { fromBase64 } from "../model/crypto.ts";
import { SETTLED_STATES, UNADMITTED_STATES } from "../nats/names.ts";
import { isAckSubject } from "../nats/pull.ts";
import type { Versioned } from "../state/kv.ts";
import type { AssignmentRecord } from "../state/records.ts";
import { turnMessageId, type WaitHead } from "../state/wait-set.ts";
import { choose } from "../state/transitions.ts";
import { releaseQuota, takeQuota } from "../quotas/limits.ts";
import { emit } from "./emit.ts";
import { placesOf } from "./pool-facts.ts";
import type { Verdict } from "./decide.ts";
import type { Prepared, ProcessDeps, WaitingDeps } from "./types.ts";

export type TurnOutcome = "admitted" | "gone" | "full" | "backend_full" | "limited";

/** Finishes a prepared delivery (process.ts's finishMessage, passed in: process.ts leads here through prepare.ts). */
export type Finish = (deps: ProcessDeps, p: Prepared, budgetSpent: boolean) => Promise<Verdict>;

export interface HeldTurnOptions {
  /** The pass's budget: the runner is not asked for past it. */
  deadline: number;
  /** Where the asking is pushed: the pass awaits it. */
  started: Promise<void>[];
  finish: Finish;
  /** Says the entry at `seq` is done with (its job asked for, or ended): the pass takes it out (admit-waiting.ts). */
  done: (seq: number) => void;
}

/** A waiting job whose message is held: its entry says where (WaitEntry.ack). */
export type HeldHead = WaitHead & { ack: string };
/** Only a JetStream ack subject: an entry is data, and the pass publishes to what it names. */
export const isHeld = (head: WaitHead): head is HeldHead => typeof head.ack === "string" && isAckSubject(head.ack);

/**
 * Takes the slot for a held job's turn and starts asking for its runner; the asking is pushed on
 * `started` (the pass awaits it). `known`: its record, read with the pass's other reads, or null.
 */
export async function giveHeldTurn(
  deps: ProcessDeps,
  w: WaitingDeps,
  head: HeldHead,
  known: Versioned<AssignmentRecord> | null,
  { deadline, started, finish, done }: HeldTurnOptions,
): Promise<TurnOutcome> {
  const data = fromBase64(head.data);
  const decoded = decodeAssignment(data, deps.trustDomain);
  // Ended while it waited (cancelled, say), asked for already (another pass gave this turn, or its
  // message came back and took a slot), or undecodable: no turn to give. Its message, when its hold
  // ends, is acked or termed by its own delivery.
  if (!decoded.ok || !known || !UNADMITTED_STATES.has(known.value.state)) {
    done(head.seq);
    return "gone";
  }
  const assignment = decoded.assignment;
  const reserve = new Set(deps.needsIdentity && !known.value.runner ? [head.id] : []);
  const placed = await placeTurn(deps, w, head.id, assignment, known.value, reserve);
  if (typeof placed === "string") return placed;
  const { placement, reserved } = placed;
  const r = known.value;
  // The turn's verdict goes to the held message as a delivery's would, at its latest delivery (the
  // record names it once the message came back from a hold): a runner booting is looked at again
  // after the usual delay (its readiness, its claim timeout, a pool's accounting).
  const held = w.held(r.heldBy && isAckSubject(r.heldBy) ? r.heldBy : head.ack, data);
  const p: Prepared = {
    msg: held,
    facts: {
      now: deps.now(),
      budgetSpent: false,
      decoded: true,
      offer: "same",
      state: r.state,
      ...(r.reason ? { reason: r.reason } : {}),
      admitted: true,
      jitter: Math.random(),
    },
    assignment,
    known,
    reserved,
    placement,
  };
  emit(deps, "capacity_acquired", head.id);
  deps.sink.event({ event: "turn_given", assignment: head.id, backend: deps.backend });
  started.push(askForRunner(deps, w, head, p, { deadline, finish, done }));
  return "admitted";
}

/** The rest of the turn, alongside the pass's next turns: the runner asked for, then the entry done with. */
async function askForRunner(
  deps: ProcessDeps,
  w: WaitingDeps,
  head: HeldHead,
  p: Prepared,
  { deadline, finish, done }: Omit<HeldTurnOptions, "started">,
): Promise<void> {
  try {
    if (deps.now() >= deadline) {
      // Out of budget before its runner was asked for: its slot and QUOTAS place go back now, or
      // every pass would count the slot as held and give no turn. It keeps its entry and its hold:
      // a later pass gives the turn again.
      await deps.admission.release(p.placement!, head.id);
      if (w.ledger) await releaseQuota(w.ledger, head.id, p.assignment!.job?.repository, w.rules);
      return;
    }
    const verdict = await finish(deps, p, false);
    // Still waiting (a step found it so): it keeps its entry, and the next pass gives the turn again.
    if (!UNADMITTED_STATES.has(p.known!.value.state) || verdict.action.kind !== "nak") done(head.seq);
  } catch (err) {
    // A step that threw leaves the job waiting with its slot: stalled.ts finds it once ACK_WAIT_MS passed.
    deps.sink.error("giving a turn failed", { assignment: head.id, backend: deps.backend, reason: (err as Error).message });
  } finally {
    // A reservation whose registration failed or never started goes now (see run.ts).
    if (p.reserved && !p.registered) {
      await deps.admission.endRegistrations(p.placement?.backend ?? deps.backend, [head.id]).catch((err) => {
        deps.sink.error("ending registration reservations failed", { backend: deps.backend, reason: (err as Error).message });
      });
    }
  }
}

/**
 * A turn given to a job of an entry from before the hold (its message acked when it went in): it
 * is marked chosen, admitted, and its assignment published to the consumer again under one message
 * id per entry, which JetStream keeps once; only then is it taken out of the wait set. Its delivery
 * takes the slot handed on and the chosen record (turn-slots.ts, record-cache.ts).
 */
export async function republishTurn(deps: ProcessDeps, w: WaitingDeps, head: WaitHead): Promise<TurnOutcome> {
  const data = fromBase64(head.data);
  const decoded = decodeAssignment(data, deps.trustDomain);
  // Marked by compare-and-set, first at the revision this isolate knows (it marked the job waiting,
  // most often): a write that lands proves the record had not ended, and one that changes nothing
  // (chosen already, or ended) gives the record as the store has it (RecordStore.update).
  const chosen = decoded.ok ? (await choose(deps.records, head.id)).record : null;
  // Ended while it waited (cancelled, say), or undecodable: nothing to give a turn to.
  if (!decoded.ok || !chosen?.chosen || SETTLED_STATES.has(chosen.state)) {
    await w.set.remove(head.seq);
    return "gone";
  }
  // The slot taken is handed to the turn's delivery here (turn-slots.ts): it reserves in one publish.
  const placed = await placeTurn(deps, w, head.id, decoded.assignment, chosen, new Set(), { handOn: true });
  if (typeof placed === "string") return placed;
  const first = await w.set.republish(deps.backend, data, turnMessageId(head.id, head.seq));
  await w.set.remove(head.seq);
  // Another pass gave this turn at the same time: one turn, told once.
  if (!first) return "gone";
  // Its delivery, most often this pass's next round, starts from the chosen record, not a read.
  deps.records.republished(head.id);
  deps.sink.event({ event: "turn_given", assignment: head.id, backend: deps.backend });
  return "admitted";
}

/**
 * A turn's places: its QUOTAS place, then its slot (reserving its registration where `reserve`
 * names it); the place goes back when the slot is refused. The refusal's outcome, or where it runs.
 */
async function placeTurn(
  deps: ProcessDeps,
  w: WaitingDeps,
  id: string,
  assignment: Assignment,
  record: AssignmentRecord,
  reserve: ReadonlySet<string>,
  opts?: PlaceOptions,
): Promise<"limited" | "full" | "backend_full" | { placement: Placement; reserved: boolean }> {
  const repository = assignment.job?.repository;
  const quota = w.ledger ? await takeQuota(w.ledger, w.rules, id, repository) : "none";
  if (quota === "refused") return "limited";
  const { admitted, reserved, fullBackends } = await deps.admission.placeMany([{ id, places: placesOf(deps, record, assignment) }], reserve, opts);
  const placement = admitted.get(id);
  if (placement) return { placement, reserved: reserved.has(id) };
  if (quota === "taken") await releaseQuota(w.ledger!, id, repository);
  return fullBackends.has(deps.backend) ? "backend_full" : "full";
}

/**
 * Takes out the entries this pass is done with (each job asked for, or ended): those that are the
 * glance's first entries in one request, any other one on its own. The glance held every entry up
 * to its last: a first entry not done with (a turn not given, or left for the next pass) ends them.
 * One that stays (a request failed) is taken out by the next pass that looks: its job is no longer waiting.
 */
export async function takeOut(deps: ProcessDeps, w: WaitingDeps, oldest: readonly WaitHead[], done: ReadonlySet<number>): Promise<void> {
  let first = 0;
  while (first < oldest.length && done.has(oldest[first]!.seq)) first++;
  const through = first > 1 ? oldest[first - 1]!.seq : undefined;
  const alone = [...done].filter((seq) => through === undefined || seq > through);
  const failed = (err: unknown) => deps.sink.error("taking waiting jobs out failed", { backend: deps.backend, reason: (err as Error).message });
  await Promise.all([
    through !== undefined ? w.set.removeThrough(deps.backend, through).catch(failed) : undefined,
    ...alone.map((seq) => w.set.remove(seq).catch(failed)),
  ]);
}
