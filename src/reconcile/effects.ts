// Carrying out a verdict's effects: all of its record changes (and a new runner identity) in one
// compare-and-set write, then the slot release and the teardown it calls for.
import type { Effect } from "./decide.ts";
import { SETTLED_STATES } from "../nats/names.ts";
import { isRetryable } from "../state/kv.ts";
import { incarnationOf, type AssignmentRecord, type RecordStore, type RunnerRef } from "../state/records.ts";
import { waitEntryOf } from "./admit-waiting.ts";
import { placeOf } from "./pool-facts.ts";
import type { Prepared, ProcessDeps } from "./types.ts";

/** All of a verdict's record changes, and a new runner identity, in one write. */
export async function applyEffects(
  deps: ProcessDeps,
  p: Prepared,
  effects: Effect[],
  ref: RunnerRef | undefined,
  holdUntil?: number,
): Promise<AssignmentRecord | null> {
  if (!p.assignment || !p.known) return null;
  const at = new Date(deps.now()).toISOString();
  const change = (r: AssignmentRecord): AssignmentRecord | undefined => {
    let next: AssignmentRecord = ref && !r.runner ? { ...r, runner: ref } : r;
    const { pool, backend } = p.placement ?? {};
    if (pool !== undefined && backend !== undefined && !next.placement) next = { ...next, placement: { pool, backend } };
    // State changes never overwrite a claim (or an end) that arrived meanwhile.
    if (!SETTLED_STATES.has(next.state)) {
      for (const effect of effects) {
        if (effect === "mark_waiting" && next.state !== "capacity_wait") next = { ...next, state: "capacity_wait" };
        if (effect === "mark_quota_wait" && next.state !== "quota_wait") next = { ...next, state: "quota_wait" };
        if (effect === "mark_pending" && (next.state !== "backend_pending" || !next.askedAt))
          next = { ...next, state: "backend_pending", askedAt: next.askedAt ?? at };
        if (effect === "mark_ready" && (next.state !== "backend_ready" || !next.readyAt)) {
          next = { ...next, state: "backend_ready", readyAt: next.readyAt ?? at, ...(holdUntil ? { heldUntil: new Date(holdUntil).toISOString() } : {}) };
        }
        if (effect === "forget_ready_and_teardown" || effect === "boot_retry") {
          const { readyAt: _forgotten, askedAt: _restarted, ...rest } = next;
          next = { ...rest, state: "backend_pending", ...(effect === "boot_retry" ? { bootAttempts: (next.bootAttempts ?? 0) + 1 } : {}) };
        }
        if (effect === "end_unneeded") next = { ...next, state: "terminated", terminatedAt: at, reason: "its job started on another runner" };
        if (effect === "give_up_boot") {
          const bootAttempts = (next.bootAttempts ?? 0) + 1;
          next = { ...next, state: "terminated", terminatedAt: at, reason: `its runner did not boot in ${bootAttempts} attempts`, gaveUpAt: at, bootAttempts };
        }
      }
    }
    return next === r ? undefined : next;
  };
  // A new registration must reach the record: while the records bucket elects a leader, reads
  // still answer but writes fail for seconds, and the pass's connection may have died with its
  // server. Keep trying, on a new connection, rather than register twice.
  if (effects.includes("enter_wait_set") && deps.waiting) await deps.waiting.set.add(deps.backend, waitEntryOf(p), incarnationOf(p.known.value));
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
  if (effects.includes("release_slot") || gaveUp || retried) await deps.admission.release(place, p.assignment.id);
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
