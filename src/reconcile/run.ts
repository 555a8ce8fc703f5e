// One reconciliation pass over every enabled backend, on one NATS connection, within a budget.
import type { BatchSummary } from "../model/events.ts";
import { consumerName } from "../nats/names.ts";
import { pullNoWait, type DeliveredMessage } from "../nats/pull.ts";
import { flushNats, type NatsHandle } from "../nats/connection.ts";
import { needsRenewal, renewMessages } from "../nats/renew.ts";
import { DEFAULT_DELAYS } from "./decide.ts";
import { HOLD_MS, holdForClaims } from "./hold.ts";
import { mapLimit } from "../model/limit.ts";
import { finishMessage, prepareBatch, type Prepared, type ProcessDeps } from "./process.ts";
import { admitWaiting, type Told } from "./admit-waiting.ts";
import { createTurnGate } from "./turn-gate.ts";

/** This isolate's turn-giving, one at a time per wait set (see turn-gate.ts). */
const gateTurns = createTurnGate();

/** Longest a revisited message is parked: bounds how late a claim is acked or a freed slot is seen. */
const MAX_PARK_MS = 5_000;
/** Rounds of turn-giving in one pass: each publishes waiting jobs that the next round pulls. */
const MAX_TURN_ROUNDS = 8;
/** Messages reconciled at once per backend; backend calls are limited separately. */
const PROCESS_CONCURRENCY = 16;

export interface PassOptions {
  stream: string;
  batchSize: number;
  deadline: number;
  trigger: string;
  /** Pulls wait up to this long from the start for messages to become available (after a claim: its nak delay). */
  firstPullWaitMs?: number;
  /** Keep deliveries waiting for their claim and ack them as claims land (see hold.ts). */
  holdClaims?: boolean;
  /**
   * An eager pass: stop after the first batch that held a first delivery (a new assignment), or
   * after `maxPulls`. Redeliveries of runners waiting for their claim come first in the consumer,
   * so a single small pull would often see only those.
   */
  untilNew?: { maxPulls: number };
  /**
   * Started for jobs just published (a webhook's, a publish's): with fair share, whether anybody
   * waits is asked alongside the first pull, which will bring a new job that asks it.
   */
  newJobs?: boolean;
}

export async function reconcileBackend(handle: NatsHandle, deps: ProcessDeps, opts: PassOptions): Promise<BatchSummary> {
  const started = deps.now();
  const summary: BatchSummary = {
    event: "reconcile_summary",
    backend: deps.backend,
    trigger: opts.trigger,
    fetched: 0,
    acked: 0,
    naked: 0,
    termed: 0,
    deferred: 0,
    revisited: 0,
    errors: 0,
    durationMs: 0,
  };
  // Each message is reconciled at most once per pass. A nak'd message that comes back within the
  // same pass goes back unprocessed, until this pass is over: spinning on it would only burn
  // deliveries (MaxDeliver) and crowd out the messages not seen yet; a claim acks its runner's message itself.
  const seen = new Set<number>();
  const held: Prepared[] = [];
  const minRevisitDelay = deps.policy.retryDelayMs ?? DEFAULT_DELAYS.claim;
  let pulls = 0;
  const waitUntil = Math.min(started + (opts.firstPullWaitMs ?? 0), opts.deadline);
  // An eager pass for new jobs gives turns only where its own work may have made one: a job it put
  // in the wait set (a slot may have been freed meanwhile) or a slot it freed. A slot freed
  // elsewhere starts a pass of its own (admission.release says so whenever anybody waits), and the
  // gateway runs a release's pass asked for while this one runs as a round with no `untilNew`.
  const turnsOnlyIfChanged = opts.newJobs === true && opts.untilNew !== undefined;
  // With fair share, a round of pulls ends by giving free slots to waiting jobs by turn. A held
  // job's runner is asked for by the turn itself; the assignments of jobs from before the hold,
  // published again, are what the next round pulls.
  let pull = true;
  for (let round = 0; round <= MAX_TURN_ROUNDS; round++) {
    pulls = 0;
    let changed = false;
    let joined = false;
    while (pull && deps.now() < opts.deadline && pulls++ < (opts.untilNew?.maxPulls ?? Infinity)) {
      const wait = Math.max(0, waitUntil - deps.now());
      // A waiting pull returns once its batch is full or it expires: with a batch of one it returns
      // at the first message, which may be a new assignment that must not wait for the rest of the
      // window (passes after a claim wait for its runner's message; new ones arrive meanwhile).
      // Fair share: an eager pass pulls a new job, which asks whether anybody waits; asked alongside
      // the pull, that is one round trip less between a webhook and its runner.
      // Not where another pass here is asking already: it most often takes the new jobs, and one
      // this pass does bring asks then (or takes that pass's "yes").
      const alongside = deps.waiting && opts.newJobs && round === 0 && pulls === 1 && !deps.waiting.set.asking?.(deps.backend);
      const askedWaiting = alongside ? deps.waiting!.set.any(deps.backend) : undefined;
      askedWaiting?.catch(() => undefined);
      const batch = await pullNoWait(handle.nc, opts.stream, consumerName(deps.backend), wait > 0 ? 1 : opts.batchSize, undefined, undefined, wait).catch(
        (err: unknown) => {
          // Nothing was pulled (an election, a lost connection): the pass ends here, its held deliveries still settled; the next pull asks again.
          summary.errors++;
          deps.sink.error("pull failed", { backend: deps.backend, reason: (err as Error).message });
          return undefined;
        },
      );
      if (!batch) break;
      const unseen = batch.filter((m) => !seen.has(m.seq));
      // Near MaxDeliver: published again and acknowledged (nats/renew.ts); its copy comes as a new delivery.
      const renewing = unseen.filter(needsRenewal);
      if (renewing.length) await renewMessages(handle.js, renewing);
      const fresh = unseen.filter((m) => !needsRenewal(m));
      // Seen ones that come back among unseen ones are crowding them out: park them for the rest of
      // the pass. Seen ones alone mean the pass is done: they go back with their usual delay.
      const revisitDelay = fresh.length ? Math.max(minRevisitDelay, Math.min(MAX_PARK_MS, opts.deadline - deps.now())) : minRevisitDelay;
      for (const m of batch) {
        if (seen.has(m.seq)) m.nak(revisitDelay);
        seen.add(m.seq);
      }
      summary.fetched += fresh.length;
      summary.revisited += batch.length - fresh.length;
      if (!fresh.length) break;
      // Fair share: new jobs go on while the records of redeliveries (runners booting) are read.
      // Jobs that wait for a slot wait in the wait set, not among redeliveries, so none is passed.
      const groups = deps.waiting ? [fresh.filter((m) => m.deliveryCount === 1), fresh.filter((m) => m.deliveryCount !== 1)] : [fresh];
      const outcomes = await Promise.all(groups.filter((g) => g.length).map((g) => reconcileBatch(deps, g, opts, summary, held, askedWaiting)));
      const intoWaitSet = outcomes.some((o) => o.intoWaitSet);
      changed ||= intoWaitSet || outcomes.some((o) => o.changed);
      joined ||= intoWaitSet;
      // A short batch means the consumer is drained, unless MaxAckPending cut it short: more jobs
      // may wait behind those that went into the wait set.
      if (batch.length < opts.batchSize && wait === 0 && !intoWaitSet) break;
      // Their naks (holds) reach the server before the next pull, which must not hand them out again.
      if (intoWaitSet) await flushNats(handle.nc);
      // Within a waiting window (after a claim) the pass stays for the message it waits for.
      if (opts.untilNew && wait === 0 && !intoWaitSet && fresh.some((m) => m.deliveryCount === 1)) break;
    }
    // A round after turns were given looks again only where the last look may have stopped at the
    // heads it read (64 repositories), with slots left: where it saw everyone waiting and gave
    // every turn it could, a second look finds the same (a job put in since, or a slot freed
    // since, starts a pass that looks).
    if (!deps.waiting || deps.now() >= opts.deadline || (turnsOnlyIfChanged && round === 0 && !changed)) break;
    const told: Told = { republished: 0 };
    const given = await gateTurns(
      `${deps.waiting.stream}/${deps.backend}`,
      () => admitWaiting(deps, { joined, deadline: opts.deadline, told, finish: finishMessage }),
      () => deps.now() < opts.deadline,
    ).catch((err: unknown) => {
      deps.sink.error("giving turns failed", { backend: deps.backend, reason: (err as Error).message });
      return 0;
    });
    // Only a turn published again has a message to pull. Turns that filled the backend leave no
    // turn for another look: a slot freed since starts a pass of its own.
    if (!given || ((told.filled || told.exhausted) && !told.republished)) break;
    pull = told.republished > 0;
  }
  await holdForClaims(deps, held, summary).catch((err) => {
    deps.sink.error("holding for claims failed", { backend: deps.backend, reason: (err as Error).message });
  });
  await flushNats(handle.nc);
  summary.durationMs = deps.now() - started;
  deps.sink.summary(summary);
  return summary;
}

/**
 * Prepares and finishes one batch of deliveries; whether any went into the wait set, and whether
 * anything may have changed what the wait set can be given (a slot freed, or a step that failed).
 */
async function reconcileBatch(
  deps: ProcessDeps,
  fresh: DeliveredMessage[],
  opts: PassOptions,
  summary: BatchSummary,
  held: Prepared[],
  askedWaiting: Promise<boolean> | undefined,
): Promise<{ intoWaitSet: boolean; changed: boolean }> {
  let prepared: Prepared[];
  try {
    prepared = await prepareBatch(deps, fresh, opts.deadline, askedWaiting);
  } catch (err) {
    // The state store failed for the whole batch: hand it back at once rather than leave it to AckWait.
    summary.errors += fresh.length;
    deps.sink.error("reconcile batch failed", { backend: deps.backend, reason: (err as Error).message });
    for (const m of fresh) m.nak(deps.policy.retryDelayMs ?? DEFAULT_DELAYS.claim);
    return { intoWaitSet: false, changed: true };
  }
  let intoWaitSet = false;
  let failed = false;
  await mapLimit(prepared, PROCESS_CONCURRENCY, async (p) => {
    try {
      if (p.failed) throw p.failed;
      const holdUntil = opts.holdClaims ? Math.min(deps.now() + HOLD_MS, opts.deadline) : undefined;
      const verdict = await finishMessage(deps, p, deps.now() >= opts.deadline, holdUntil);
      if (verdict.effects.includes("enter_wait_set")) intoWaitSet = true;
      if (verdict.held) held.push(p);
      else if (verdict.events.includes("deferred")) summary.deferred++;
      else summary[verdict.action.kind === "ack" ? "acked" : verdict.action.kind === "nak" ? "naked" : "termed"]++;
    } catch (err) {
      summary.errors++;
      failed = true;
      deps.sink.error("reconcile step failed", { backend: deps.backend, seq: p.msg.seq, reason: (err as Error).message });
      p.msg.nak(deps.policy.retryDelayMs ?? DEFAULT_DELAYS.claim);
    }
  });
  // Registrations of this batch that failed or never started (the budget ran out) end their
  // reservation: holding it would make the next delivery wait out its lease. One that did
  // register keeps it until the lease ends (see Prepared.registered).
  const reserved = prepared.filter((p) => p.reserved && !p.registered);
  // Held where each was admitted: a job spilled to another backend's pool reserved there.
  for (const backend of new Set(reserved.map((p) => p.placement?.backend ?? deps.backend))) {
    const ids = reserved.filter((p) => (p.placement?.backend ?? deps.backend) === backend).map((p) => p.assignment!.id);
    await deps.admission.endRegistrations(backend, ids).catch((err) => {
      deps.sink.error("ending registration reservations failed", { backend, reason: (err as Error).message });
    });
  }
  return { intoWaitSet, changed: failed || prepared.some((p) => p.freedSlot) };
}
