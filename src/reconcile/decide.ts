// The reconciliation decision table, as a pure function. The executor (prepare.ts, process.ts) gathers one
// fact at a time, in the order `decide` asks for them, and carries out the verdict.
import type { EventName } from "../model/events.ts";
import type { AssignmentState } from "../nats/names.ts";

export const DEFAULT_DELAYS = { capacity: 2_000, backendRetry: 15_000, pending: 2_000, claim: 2_000, refused: 60_000 } as const;

export interface Facts {
  now: number;
  budgetSpent: boolean;
  decoded?: boolean;
  offer?: "new" | "same" | "conflict";
  /** State of the assignment's record once offered. */
  state?: AssignmentState;
  /** Epoch ms the backend first reported ready, from the record. */
  readyAt?: number;
  reason?: string;
  admitted?: boolean;
  /** Not admitted, it waits its turn in the wait set (fair share) rather than in the consumer. */
  waitSet?: boolean;
  /** Not admitted because its owner or repository is at its QUOTAS limit. */
  quota?: boolean;
  /**
   * "auth_error": the backend refused our credentials (401/403), retried like any error but loud.
   * "refused": a cloud refused our credentials or a template's field by name (BackendRefused): not
   * transient, so retried once a minute, not at the backend retry's pace (a rate budget spent on refusals).
   */
  backend?: "error" | "auth_error" | "refused" | "unneeded" | "pending" | "ready";
  /** A random number in [0, 1), drawn by the caller: spreads the capacity waits (see capacityWaitDelay). */
  jitter?: number;
  /**
   * What is left of a new job's grace for the warm runners of its pool to take it (WARM_GRACE_MS):
   * set only when one of them is idle now. Its own runner is asked for once the grace is over.
   */
  warmGraceMs?: number;
  /** Epoch ms its runner was first asked of the backend, this attempt (from the record). */
  askedAt?: number;
  /** How long ago its record was made (its job queued here): how long its message is held while it waits. */
  waitedMs?: number;
  /** Runners asked for it before that did not boot in time (from the record). */
  bootAttempts?: number;
}

export interface Policy {
  /** Overrides every nak delay when set (the reference's RetryDelay). */
  retryDelayMs?: number;
  claimTimeoutMs: number;
  /** A runner not up this long after it was asked for is torn down and asked for again (its pool's bootTimeoutMs). */
  bootTimeoutMs?: number;
}

/** Runners asked for one assignment before its boot failures are given up on. */
export const MAX_BOOT_ATTEMPTS = 3;

/** The wait before asking again for a runner that did not boot: 15 s, then 30 s, 60 s … at most 5 min. */
export function bootRetryDelay(attempts: number): number {
  return Math.min(5 * 60_000, 15_000 * 2 ** Math.max(0, attempts - 1));
}

export type Action = { kind: "ack" } | { kind: "nak"; delayMs: number } | { kind: "term"; reason: string };

export const EFFECTS = [
  "enter_wait_set",
  "mark_quota_wait",
  "mark_waiting",
  "mark_pending",
  "mark_ready",
  "release_slot",
  "forget_ready_and_teardown",
  "boot_retry",
  "give_up_boot",
  "end_unneeded",
  "renew_ready",
] as const;
export type Effect = (typeof EFFECTS)[number];

export interface Verdict {
  next: "done";
  action: Action;
  events: EventName[];
  effects: Effect[];
}

export type Step = { next: "decode" | "offer" | "admit" | "call_backend" } | Verdict;

/**
 * The nak delay while a ready runner has not claimed: 2 s at first, then half the time waited so
 * far, at most 30 s. Every redelivery of a waiting runner costs a pass some work and stands in
 * front of new assignments in the consumer; a runner that has not claimed in a minute is not
 * going to in the next two seconds. A claim acks the message at its next delivery.
 */
export function claimWaitDelay(waitedMs: number): number {
  return Math.min(MAX_CLAIM_WAIT_DELAY_MS, Math.max(DEFAULT_DELAYS.claim, Math.floor(waitedMs / 2)));
}

const MAX_CLAIM_WAIT_DELAY_MS = 30_000;

/**
 * How long a job that waits in the wait set keeps its message out (a nak with this delay): its
 * turn is given by a pass, which asks for its runner itself and sends the turn's verdict to the
 * message (reconcile/give-turn.ts); it comes back on its own only while the job still waits, to be
 * held again. Half the time waited so far, from 2 to 5 min, spread by a fifth either way: a
 * backlog that drains within two minutes is delivered once per job (each return of a job still
 * waiting costs its pass a read, a publish, a record write and a nak), a long wait costs a
 * delivery every 5 minutes at most, and MaxDeliver (1000) is days away. RETRY_DELAY_MS does not
 * shorten it: this is no retry.
 */
export function waitHoldDelay(waitedMs = 0, jitter = 0.5): number {
  const base = Math.min(MAX_WAIT_HOLD_MS, Math.max(MIN_WAIT_HOLD_MS, Math.floor(waitedMs / 2)));
  return Math.round(base * (0.8 + 0.4 * Math.min(Math.max(jitter, 0), 1)));
}

export const MIN_WAIT_HOLD_MS = 120_000;
const MAX_WAIT_HOLD_MS = 5 * 60_000;

/**
 * The nak delay of an assignment waiting for capacity: 1 to 3 s, 2 s on average. A burst of
 * assignments is refused together; with one delay for all, they would come back together, and
 * a slot freed just after they did would sit idle until the next round. Spread out, one of them
 * comes back within a fraction of a second of any freed slot.
 */
export function capacityWaitDelay(jitter = 0.5): number {
  return Math.round(DEFAULT_DELAYS.capacity * (0.5 + Math.min(Math.max(jitter, 0), 1)));
}

const verdict = (action: Action, events: EventName[], effects: Effect[] = []): Verdict => ({ next: "done", action, events, effects });

export function decide(f: Facts, p: Policy): Step {
  const nak = (fallback: number): Action => ({ kind: "nak", delayMs: p.retryDelayMs ?? fallback });
  if (f.budgetSpent) return verdict({ kind: "nak", delayMs: 0 }, ["deferred"]);
  if (f.decoded === undefined) return { next: "decode" };
  if (!f.decoded) return verdict({ kind: "term", reason: "invalid assignment" }, ["invalid"]);
  if (f.offer === undefined) return { next: "offer" };
  if (f.offer === "conflict") return verdict({ kind: "term", reason: "conflicting assignment" }, ["conflict"]);
  // A runner already took it (or finished): acknowledge without asking the backend again, so a
  // finished runner is never provisioned a second time.
  if (f.state === "claimed" || f.state === "completed") return verdict({ kind: "ack" }, ["runner_claimed", "acked"]);
  // Ended after this pass took its slot (its runner's registration found it so): the slot goes back.
  if (f.state === "terminated") return verdict({ kind: "term", reason: f.reason ?? "terminated" }, ["already_done"], f.admitted ? ["release_slot"] : []);
  // Exact, not RETRY_DELAY_MS: the grace is measured against the warm runners' fetch interval.
  if (f.warmGraceMs !== undefined && f.warmGraceMs > 0 && f.admitted === undefined) return verdict({ kind: "nak", delayMs: f.warmGraceMs }, ["warm_grace"]);
  if (f.admitted === undefined) return { next: "admit" };
  // Its assignment is kept in the wait set, with where its message is held: a pass with a free slot
  // asks for its runner when its turn comes (reconcile/give-turn.ts), and the claim acks it.
  const hold: Action = { kind: "nak", delayMs: waitHoldDelay(f.waitedMs, f.jitter) };
  if (!f.admitted && f.waitSet && f.quota) return verdict(hold, ["quota_wait"], ["enter_wait_set", "mark_quota_wait"]);
  if (!f.admitted && f.waitSet) return verdict(hold, ["capacity_wait"], ["enter_wait_set", "mark_waiting"]);
  if (!f.admitted) return verdict(nak(capacityWaitDelay(f.jitter)), ["capacity_wait"], ["mark_waiting"]);
  // A runner the backend reported ready is left alone until its claim timeout, as the reference's
  // WaitClaimed does: asking again would cost a backend call per delivery, and one failed call
  // would give away a running runner's slot.
  const waiting = f.state === "backend_ready" && f.readyAt !== undefined;
  if (f.state === "backend_pending" && f.askedAt !== undefined && p.bootTimeoutMs !== undefined && f.now - f.askedAt > p.bootTimeoutMs) {
    const attempts = (f.bootAttempts ?? 0) + 1;
    // The job stays queued in Gitea: the sweep publishes it again later (gitea/sweep.ts).
    if (attempts >= MAX_BOOT_ATTEMPTS)
      return verdict({ kind: "term", reason: `its runner did not boot in ${attempts} attempts` }, ["boot_timeout", "boot_gave_up"], ["give_up_boot"]);
    return verdict(nak(bootRetryDelay(attempts)), ["boot_timeout"], ["boot_retry"]);
  }
  if (f.backend === undefined && !waiting) return { next: "call_backend" };
  if (f.backend === "error") return verdict(nak(DEFAULT_DELAYS.backendRetry), ["backend_retry"], ["release_slot", "mark_pending"]);
  if (f.backend === "auth_error") return verdict(nak(DEFAULT_DELAYS.backendRetry), ["backend_auth", "backend_retry"], ["release_slot", "mark_pending"]);
  // Its backend_refused event, naming the variable, is the executor's (process.ts): the table knows no variable.
  if (f.backend === "refused") return verdict(nak(DEFAULT_DELAYS.refused), ["backend_retry"], ["release_slot", "mark_pending"]);
  // What it was asked for is gone and nothing may stand in for it (WorkloadUnneeded): it ends.
  if (f.backend === "unneeded") return verdict({ kind: "term", reason: "what its runner was to run on is gone" }, ["backend_unneeded"], ["end_unneeded"]);
  if (f.backend === "pending") return verdict(nak(DEFAULT_DELAYS.pending), ["backend_pending"], ["mark_pending"]);
  const seen: EventName[] = f.backend === "ready" ? ["backend_ready"] : [];
  if (f.readyAt === undefined) return verdict(nak(DEFAULT_DELAYS.claim), [...seen, "claim_pending"], ["mark_ready"]);
  if (f.now - f.readyAt <= p.claimTimeoutMs) return verdict(nak(claimWaitDelay(f.now - f.readyAt)), [...seen, "claim_pending"]);
  return verdict(nak(DEFAULT_DELAYS.claim), [...seen, "claim_timeout"], ["forget_ready_and_teardown"]);
}
