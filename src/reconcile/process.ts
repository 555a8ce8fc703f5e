// Carries out reconciliation for a batch of deliveries: the batch is prepared first (prepare.ts:
// one read of all records, one admission update), then per message one backend call, at most one
// record write, and the verdict's ack/nak/term.
import { BackendError, BackendRefused, WorkloadUnneeded } from "../domain/backend.ts";
import type { AssignmentRecord, RunnerRef } from "../state/records.ts";
import { DEFAULT_DELAYS, decide, type Verdict } from "./decide.ts";
import { applyEffects } from "./effects.ts";
import { placeOf, policyOf } from "./pool-facts.ts";
import type { Prepared, PreparedRequest, ProcessDeps } from "./types.ts";
import { SETTLED_STATES, UNADMITTED_STATES } from "../nats/names.ts";
import { TERMINAL } from "../model/states.ts";
import { emit, idOf } from "./emit.ts";
import { watchLaunch } from "./launch-watch.ts";

export type { Prepared, PreparedRequest, ProcessDeps } from "./types.ts";
export { REF_WRITE_RETRY_MS } from "./effects.ts";
export { prepareBatch } from "./prepare.ts";

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
        const runners = deps.runnersFor(place.backend);
        p.facts.backend = prepared === "busy" ? "pending" : await deps.callBackend((signal) => runners.accept(prepared.request, signal));
        if (prepared !== "busy") p.made = runners.made?.(prepared.request.assignment.id);
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
    const held = step.effects.includes("forget_ready_and_teardown") ? await heldByForge(deps, p) : undefined;
    if (held) {
      // Not made again: its runner waits for the job, which waits its turn in the forge.
      const kept: Verdict = { next: "done", action: { kind: "nak", delayMs: DEFAULT_DELAYS.claim }, events: ["claim_held"], effects: ["renew_ready"] };
      await applyEffects(deps, p, kept.effects, ref);
      deps.sink.event({ event: "claim_held", assignment: idOf(p), backend: deps.backend, retryDelayMs: DEFAULT_DELAYS.claim, reason: held });
      p.msg.nak(DEFAULT_DELAYS.claim);
      return kept;
    }
    const holding = holdUntil !== undefined && step.events.at(-1) === "claim_pending";
    const after = await applyEffects(deps, p, step.effects, ref, holding ? holdUntil : undefined, step.action.kind === "term" ? step.action.reason : undefined);
    if (asked) {
      await endIfEnded(deps, p, asked === "answered" ? after : undefined);
      asked = undefined;
    }
    if (step.effects.includes("enter_wait_set") && after && !UNADMITTED_STATES.has(after.state)) {
      // Read waiting, its turn given (or its job ended) before the write: the wait is stale. A
      // settled record decides the verdict again; one whose runner was asked for is looked at soon.
      Object.assign(p.facts, { state: after.state, reason: after.reason });
      if (SETTLED_STATES.has(after.state)) continue;
      const delayMs = deps.policy.retryDelayMs ?? DEFAULT_DELAYS.pending;
      const stale: Verdict = { next: "done", action: { kind: "nak", delayMs }, events: ["stale_delivery"], effects: [] };
      emit(deps, "stale_delivery", idOf(p), stale);
      p.msg.nak(delayMs);
      return stale;
    }
    if (step.events.includes("claim_pending") && after?.state === "claimed") {
      // The claim won the race with our write: the runner is there, acknowledge now.
      emit(deps, "backend_ready", idOf(p));
      // Its claim acks this very delivery (the one its registration names) and tells it, as in
      // hold.ts: a second ack would cost a round trip and say it twice.
      if (after.askedBy === p.msg.ackSubject) return { next: "done", action: { kind: "ack" }, events: [], effects: [] };
      p.facts.state = "claimed";
      continue;
    }
    for (const event of step.events) emit(deps, event, idOf(p), step);
    // A cloud VM booting or up, its runner not yet claimed: has it fetched its launch by now?
    if (deps.launchWatch && (step.events.includes("backend_pending") || step.events.includes("claim_pending")))
      await watchLaunch(deps, after ?? p.known?.value, placeOf(p).pool).catch((err: unknown) =>
        deps.sink.error("the launch watch failed", { assignment: idOf(p), backend: deps.backend, reason: (err as Error).message }),
      );
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
  if (err instanceof BackendRefused) {
    // Not transient: said by its variable, kept for /healthz, and asked again only once a minute.
    p.facts.backend = "refused";
    const backend = placeOf(p).backend;
    deps.sink.event({ event: "backend_refused", assignment: idOf(p), backend, reason: err.message });
    void deps
      .noteRefusal?.(backend, { variable: err.variable, kind: err.kind, message: err.message })
      .catch((e: unknown) => deps.sink.error("noting a backend's refusal failed", { backend, reason: (e as Error).message }));
    return;
  }
  if (err instanceof WorkloadUnneeded) {
    p.facts.backend = "unneeded";
    return;
  }
  // A full cloud project (its server limit) is waited out like any retry, but said as what it is, not as an error or refused credentials.
  if ((err as { full?: unknown }).full === true) {
    p.facts.backend = "error";
    deps.sink.event({ event: "backend_full", assignment: idOf(p), backend: placeOf(p).backend, reason: (err as Error).message });
    return;
  }
  p.facts.backend = status === 401 || status === 403 ? "auth_error" : "error";
  deps.sink.error("backend accept failed", { assignment: idOf(p), backend: deps.backend, reason: (err as Error).message });
}

/**
 * At its claim timeout, a job's runner whose job Gitea no longer lists as queued is not needed:
 * another runner took the job (a swap whose settling was lost) or it ended. A Gitea that cannot
 * say keeps the usual course.
 */
/** The forge's reason to keep a cold runner past its claim timeout (forge.ts claimHeld); undefined when it gives none, or cannot be asked. */
async function heldByForge(deps: ProcessDeps, p: Prepared): Promise<string | undefined> {
  const job = p.assignment?.job;
  const runner = p.known?.value.runner;
  if (!job || !runner || p.known?.value.warm || !deps.claimHeld) return undefined;
  return deps.claimHeld({ id: job.id, handle: job.handle }, { id: runner.id, scope: runner.scope }).catch(() => undefined);
}

async function startedElsewhere(deps: ProcessDeps, p: Prepared): Promise<boolean> {
  const job = p.assignment?.job;
  if (!job || p.known?.value.warm || !deps.jobQueued) return false;
  return (await deps.jobQueued(job.repository, job.id).catch(() => true)) === false;
}
