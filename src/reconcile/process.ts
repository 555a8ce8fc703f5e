// Carries out reconciliation for a batch of deliveries: gathers the facts `decide` asks for,
// batched where the state store allows (one read of all records, one admission update), then
// per message one backend call, at most one record write, and the verdict's ack/nak/term.
import { decodeAssignment } from "../model/assignment.ts";
import { BackendError } from "../domain/backend.ts";
import type { EventName } from "../model/events.ts";
import type { DeliveredMessage } from "../nats/pull.ts";
import { contentHash, sameContent, type AssignmentRecord, type RunnerRef } from "../state/records.ts";
import { decide, type Verdict } from "./decide.ts";
import { applyEffects } from "./effects.ts";
import { graceFor, placeOf, placesOf, policyOf } from "./pool-facts.ts";
import type { Prepared, PreparedRequest, ProcessDeps } from "./types.ts";
import { SETTLED_STATES } from "../nats/names.ts";
import { TERMINAL } from "../model/states.ts";
import { releaseQuota, takeQuota } from "../quotas/limits.ts";
import { needsTurn, orderByTurn } from "./admit-waiting.ts";
import { isTurnMessage } from "../state/wait-set.ts";

export type { Prepared, PreparedRequest, ProcessDeps } from "./types.ts";
export { REF_WRITE_RETRY_MS } from "./effects.ts";

const idOf = (p: Prepared) => p.assignment?.id ?? `seq-${p.msg.seq}`;

/** Decodes, offers and admits a whole batch: one read of all records, the slot requests sent together. */
export async function prepareBatch(deps: ProcessDeps, msgs: DeliveredMessage[], deadline: number, askedWaiting?: Promise<boolean>): Promise<Prepared[]> {
  const batch: Prepared[] = msgs.map((msg) => ({
    msg,
    facts: { now: deps.now(), budgetSpent: deps.now() >= deadline, jitter: Math.random() },
    reserved: false,
  }));
  for (const p of batch) {
    if (decide(p.facts, deps.policy).next !== "decode") continue;
    const decoded = decodeAssignment(p.msg.data, deps.trustDomain);
    p.facts.decoded = decoded.ok && decoded.assignment.backend === deps.backend;
    if (decoded.ok) p.assignment = decoded.assignment;
    if (p.facts.decoded) emit(deps, "received", idOf(p));
  }
  const offering = batch.filter((p) => decide(p.facts, deps.policy).next === "offer");
  // Fair share: whether anybody waits is read alongside the records, not after them (one round
  // trip less between a webhook and its runner), when a first delivery may be a new job that asks.
  // An eager pass asked already, alongside its pull (`askedWaiting`): its batch of redeliveries,
  // split from its new jobs, takes that answer too rather than asking again. A turn's message
  // (published again when its turn came) asks nothing: its job's turn is given.
  const first = offering.filter((p) => p.msg.deliveryCount === 1);
  const asking = first.filter((p) => !isTurnMessage(p.msg.msgId));
  const waitingNow = deps.waiting && asking.length ? (askedWaiting ?? deps.waiting.set.any(deps.backend)) : askedWaiting;
  // Read later, or never: a failure is the reader's (awaiting it still throws), not an unhandled one.
  waitingNow?.catch(() => undefined);
  // A first delivery's record is the one its publish's offer just made here, where it was (record-cache.ts).
  const records = await deps.records.getMany(
    offering.map((p) => p.assignment!.id),
    new Set(first.map((p) => p.assignment!.id)),
  );
  await eachAlone(offering, async (p) => {
    const a = p.assignment!;
    const known = records.get(a.id);
    if (known) {
      p.known = known;
      p.facts.offer = sameContent(known.value, await contentHash(a)) ? "same" : "conflict";
    } else {
      // Published straight into the stream: this delivery creates its record.
      const offered = await deps.records.offer(a);
      p.known = { value: offered.record, revision: offered.revision };
      p.facts.offer = offered.result;
    }
    const r = p.known.value;
    Object.assign(p.facts, {
      state: r.state,
      reason: r.reason,
      readyAt: r.readyAt ? Date.parse(r.readyAt) : undefined,
      askedAt: r.askedAt ? Date.parse(r.askedAt) : undefined,
      bootAttempts: r.bootAttempts,
    });
  });
  await eachAlone(
    batch.filter((p) => !p.failed && decide(p.facts, deps.policy).next === "admit"),
    (p) => graceFor(deps, p),
  );
  const admitting = batch.filter((p) => !p.failed && decide(p.facts, deps.policy).next === "admit");
  // Fair share: while others wait their turn, a new job joins them, unless its turn came already.
  // One admitted before (its runner asked for: a redelivery while it boots) keeps its slot.
  const waits = (p: Prepared) => needsTurn(p.known!.value);
  if (deps.waiting && admitting.some(waits) && (await (waitingNow ?? deps.waiting.set.any(deps.backend)))) {
    for (const p of admitting) if (waits(p)) Object.assign(p.facts, { admitted: false, waitSet: true });
  }
  const quotaTaken = await takeQuotas(
    deps,
    admitting.filter((p) => p.facts.admitted === undefined),
  );
  const trying = admitting.filter((p) => !p.failed && p.facts.admitted === undefined);
  if (trying.length) {
    const reserve = new Set(deps.needsIdentity ? trying.filter((p) => !p.known!.value.runner).map((p) => p.assignment!.id) : []);
    // Fair share: in turn order, when there are fewer slots than jobs of several repositories.
    const ordered = deps.waiting ? await orderByTurn(deps, trying) : trying;
    const candidates = ordered.map((p) => ({ id: p.assignment!.id, places: placesOf(deps, p.known!.value, p.assignment!) }));
    const { admitted, reserved } = await deps.admission.placeMany(candidates, reserve);
    for (const p of trying) {
      const placement = admitted.get(p.assignment!.id);
      p.facts.admitted = placement !== undefined;
      if (!placement && deps.waiting) p.facts.waitSet = true;
      if (!placement && quotaTaken.has(p.assignment!.id)) await releaseQuota(deps.waiting!.ledger!, p.assignment!.id, p.assignment!.job?.repository);
      if (placement) p.placement = placement;
      p.reserved = reserved.has(p.assignment!.id);
      if (p.facts.admitted) emit(deps, "capacity_acquired", idOf(p));
    }
  }
  return batch;
}

/** QUOTAS: takes each job's places; one at a limit waits (quota_wait). The ids that took places. */
async function takeQuotas(deps: ProcessDeps, batch: Prepared[]): Promise<Set<string>> {
  const ledger = deps.waiting?.ledger;
  const taken = new Set<string>();
  if (!ledger) return taken;
  for (const p of batch) {
    await eachAlone([p], async () => {
      const got = await takeQuota(ledger, deps.waiting!.rules, p.assignment!.id, p.assignment!.job?.repository);
      if (got === "taken") taken.add(p.assignment!.id);
      if (got === "refused") Object.assign(p.facts, { admitted: false, waitSet: true, quota: true });
    });
  }
  return taken;
}

/**
 * Runs a step for each delivery on its own: one whose step fails (its data, or a store refusing
 * its key) is marked failed and goes no further, while the rest of its batch goes on.
 */
async function eachAlone(batch: Prepared[], fn: (p: Prepared) => Promise<void>): Promise<void> {
  await Promise.all(
    batch.map(async (p) => {
      try {
        await fn(p);
      } catch (err) {
        p.failed = err as Error;
      }
    }),
  );
}

/**
 * Finishes one prepared delivery: backend call, record write, ack/nak/term. With `holdUntil`, a
 * delivery left waiting for its claim is not nak'd: `held` says the caller now owns it, and a
 * runner that just became ready has the hold recorded, so that its claim need not start a pass.
 */
export async function finishMessage(deps: ProcessDeps, p: Prepared, budgetSpent: boolean, holdUntil?: number): Promise<Verdict & { held?: true }> {
  if (budgetSpent) p.facts.budgetSpent = true;
  let ref: RunnerRef | undefined;
  /** This delivery asked the backend for a workload (answered or not: a late answer may have made one). */
  let asked: "answered" | "failed" | undefined;
  for (;;) {
    const step = decide(p.facts, policyOf(deps, p));
    if (step.next === "call_backend") {
      const place = placeOf(p);
      let prepared: PreparedRequest;
      try {
        if (deps.replicated && p.reserved && !p.known!.value.runner) {
          // About to register: only the leader's copy can say that no runner is stored yet.
          const latest = await deps.records.getFromLeader(p.assignment!.id);
          if (latest?.value.runner) p.known = latest;
        }
        prepared = await deps.runnerRequest(p.assignment!, p.known!.value, p.reserved, place);
      } catch (err) {
        backendFailed(deps, p, err);
        continue;
      }
      if (prepared !== "busy" && prepared.ref) {
        ref = prepared.ref;
        p.registered = true;
        emit(deps, "runner_registered", idOf(p));
        // Stored before the backend is asked, at the revision this pass read: a job that ended
        // meanwhile (cancelled, or taken by a warm runner) is seen here and gets no workload, and
        // one that ends after it finds its pool in the record (a warm runner in the making).
        const stored = await applyEffects(deps, p, ["mark_pending"], ref);
        if (stored && SETTLED_STATES.has(stored.state)) {
          Object.assign(p.facts, { state: stored.state, reason: stored.reason });
          continue;
        }
      }
      try {
        if (prepared !== "busy") asked = "failed";
        p.facts.backend = prepared === "busy" ? "pending" : await deps.callBackend((signal) => deps.runnersFor(place.backend).accept(prepared.request, signal));
        if (asked) asked = "answered";
      } catch (err) {
        backendFailed(deps, p, err);
      }
      continue;
    }
    if (step.next !== "done") throw new Error(`unprepared step ${step.next} for ${idOf(p)}`);
    if (step.effects.includes("forget_ready_and_teardown") && (await startedElsewhere(deps, p))) {
      // Not asked for again: the job it was made for runs (or ran) on another runner.
      const ended: Verdict = {
        next: "done",
        action: { kind: "term", reason: "its job started on another runner" },
        events: ["claim_timeout", "job_started_elsewhere"],
        effects: ["end_unneeded"],
      };
      await applyEffects(deps, p, ended.effects, ref);
      for (const event of ended.events) emit(deps, event, idOf(p), ended);
      p.msg.term(ended.action.kind === "term" ? ended.action.reason : "");
      return ended;
    }
    const holding = holdUntil !== undefined && step.events.at(-1) === "claim_pending";
    const after = await applyEffects(deps, p, step.effects, ref, holding ? holdUntil : undefined);
    if (asked) {
      await endIfEnded(deps, p, asked === "answered" ? after : undefined);
      asked = undefined;
    }
    if (step.events.includes("claim_pending") && after?.state === "claimed") {
      // The claim won the race with our write: the runner is there, acknowledge now.
      emit(deps, "backend_ready", idOf(p));
      p.facts.state = "claimed";
      continue;
    }
    for (const event of step.events) emit(deps, event, idOf(p), step);
    if (holding) {
      p.heldUntil = holdUntil;
      return { ...step, held: true };
    }
    if (step.action.kind === "ack") await p.msg.ackAck();
    else if (step.action.kind === "nak") p.msg.nak(step.action.delayMs);
    else p.msg.term(step.action.reason);
    return step;
  }
}

/**
 * An assignment that ended (cancelled, completed) while its backend call was in flight: the
 * ender's teardown may have reached the backend before the request did, and made nothing go.
 * `after` is the record this delivery's write saw; without one (the call failed, so the write
 * may have changed nothing and read nothing) it is read.
 */
async function endIfEnded(deps: ProcessDeps, p: Prepared, after: AssignmentRecord | null | undefined) {
  const id = idOf(p);
  try {
    const now = after === undefined ? await deps.records.get(id) : after;
    if (now && TERMINAL.has(now.state)) await deps.endWorkload(id, placeOf(p).backend);
  } catch (err) {
    // The delivery's own verdict stands (its nak or ack); this look is the extra.
    deps.sink.error("looking for an end during the backend call failed", { assignment: id, backend: deps.backend, reason: (err as Error).message });
  }
}

// A failed registration or backend call is retried as an error, loud when our credentials were refused.
function backendFailed(deps: ProcessDeps, p: Prepared, err: unknown) {
  const status = err instanceof BackendError ? err.status : undefined;
  p.facts.backend = status === 401 || status === 403 ? "auth_error" : "error";
  deps.sink.error("backend accept failed", { assignment: idOf(p), backend: deps.backend, reason: (err as Error).message });
}

/**
 * At its claim timeout, a job's runner whose job Gitea no longer lists as queued is not needed:
 * another runner took the job (a swap whose settling was lost) or it ended. A Gitea that cannot
 * say keeps the usual course.
 */
async function startedElsewhere(deps: ProcessDeps, p: Prepared): Promise<boolean> {
  const job = p.assignment?.job;
  if (!job || p.known?.value.warm || !deps.jobQueued) return false;
  return (await deps.jobQueued(job.repository, job.id).catch(() => true)) === false;
}

export function emit(deps: ProcessDeps, event: EventName, assignment: string, step?: Verdict) {
  const action = step?.action;
  deps.sink.event({
    event,
    assignment,
    backend: deps.backend,
    ...(action?.kind === "nak" && event !== "runner_claimed" ? { retryDelayMs: action.delayMs } : {}),
    ...(action?.kind === "term" ? { reason: action.reason } : {}),
  });
}
