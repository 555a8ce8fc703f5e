// A turn given to a job whose message is held (fair share): its first delivery put it in the wait
// set with where its message went (its ack subject) and nak'd it for a long while (waitHoldDelay)
// rather than acking it. The pass that gives the turn takes its slot and asks for its runner
// itself, as the delivery would have: the registration stored first, at the revision read, so a
// job that ended meanwhile gets no workload. The held message stays the job's timer and its
// claim's ack: the claim acks it by the subject the registration names (askedBy), and a runner
// that never claims is looked at when the hold ends, as any redelivery is. Nothing is published
// again and nothing is delivered a second time. Only once its record has left the waiting states
// (its runner asked for, or it ended) is the job taken out of the wait set: a pass that dies
// before leaves it there, and the next pass gives the turn again (the slot is the same id's).
import { decodeAssignment } from "../model/assignment.ts";
import { fromBase64 } from "../model/crypto.ts";
import { UNADMITTED_STATES } from "../nats/names.ts";
import { isAckSubject } from "../nats/pull.ts";
import type { Versioned } from "../state/kv.ts";
import type { AssignmentRecord } from "../state/records.ts";
import type { WaitHead } from "../state/wait-set.ts";
import { releaseQuota, takeQuota } from "../quotas/limits.ts";
import { emit } from "./emit.ts";
import { placesOf } from "./pool-facts.ts";
import type { Verdict } from "./decide.ts";
import type { Prepared, ProcessDeps, WaitingDeps } from "./types.ts";

export type TurnOutcome = "admitted" | "gone" | "full" | "backend_full" | "limited";

/** Finishes a prepared delivery (process.ts's finishMessage, passed in: process.ts leads here through prepare.ts). */
export type Finish = (deps: ProcessDeps, p: Prepared, budgetSpent: boolean) => Promise<Verdict>;

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
  { deadline, started, finish }: { deadline: number; started: Promise<void>[]; finish: Finish },
): Promise<TurnOutcome> {
  const data = fromBase64(head.data);
  const decoded = decodeAssignment(data, deps.trustDomain);
  // Ended while it waited (cancelled, say), asked for already (another pass gave this turn, or its
  // message came back and took a slot), or undecodable: no turn to give. Its message, when its hold
  // ends, is acked or termed by its own delivery.
  if (!decoded.ok || !known || !UNADMITTED_STATES.has(known.value.state)) {
    await w.set.remove(head.seq);
    return "gone";
  }
  const assignment = decoded.assignment;
  const repository = assignment.job?.repository;
  const quota = w.ledger ? await takeQuota(w.ledger, w.rules, head.id, repository) : "none";
  if (quota === "refused") return "limited";
  const reserve = new Set(deps.needsIdentity && !known.value.runner ? [head.id] : []);
  const { admitted, reserved, fullBackends } = await deps.admission.placeMany([{ id: head.id, places: placesOf(deps, known.value, assignment) }], reserve);
  const placement = admitted.get(head.id);
  if (!placement) {
    if (quota === "taken") await releaseQuota(w.ledger!, head.id, repository);
    return fullBackends.has(deps.backend) ? "backend_full" : "full";
  }
  const r = known.value;
  // A nak of the verdict is left undone: the hold is the job's timer. A backend that failed is the
  // exception: its retry comes after the usual delay where the subject still names the delivery.
  const held = w.held(head.ack, data);
  let retryIn: number | undefined;
  const p: Prepared = {
    msg: { ...held, nak: (delayMs) => void (retryIn = delayMs) },
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
    reserved: reserved.has(head.id),
    placement,
  };
  emit(deps, "capacity_acquired", head.id);
  deps.sink.event({ event: "turn_given", assignment: head.id, backend: deps.backend });
  started.push(
    askForRunner(
      deps,
      w,
      head,
      p,
      { deadline, finish },
      () => retryIn,
      (delayMs) => held.nak(delayMs),
    ),
  );
  return "admitted";
}

/** The rest of the turn, alongside the pass's next turns: the runner asked for, then the entry removed. */
async function askForRunner(
  deps: ProcessDeps,
  w: WaitingDeps,
  head: HeldHead,
  p: Prepared,
  { deadline, finish }: { deadline: number; finish: Finish },
  retryIn: () => number | undefined,
  nak: (delayMs: number) => void,
): Promise<void> {
  try {
    const verdict = await finish(deps, p, deps.now() >= deadline);
    if (verdict.events.includes("backend_retry") && retryIn() !== undefined) nak(retryIn()!);
    // Still waiting (the budget ran out first): it keeps its entry and its slot, and the next pass
    // gives the turn again.
    if (!UNADMITTED_STATES.has(p.known!.value.state) || verdict.action.kind !== "nak") await w.set.remove(head.seq);
  } catch (err) {
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
