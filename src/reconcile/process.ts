// Carries out reconciliation for a batch of deliveries: gathers the facts `decide` asks for,
// batched where the state store allows (one read of all records, one admission update), then
// per message one backend call, at most one record write, and the verdict's ack/nak/term.
import { decodeAssignment, type Assignment } from "../assignment.ts";
import { BackendError, type RunnerBackend, type RunnerRequest } from "../backends/types.ts";
import type { EventName, EventSink } from "../events.ts";
import type { Backend } from "../names.ts";
import type { DeliveredMessage } from "../nats/pull.ts";
import type { Admission, Placement } from "../state/admission.ts";
import { isRetryable, type Versioned } from "../state/kv.ts";
import { contentHash, placementOf, sameContent, type AssignmentRecord, type RecordStore, type RunnerRef } from "../state/records.ts";
import { decide, type Effect, type Facts, type Policy, type Verdict } from "./decide.ts";

export type PreparedRequest = { request: RunnerRequest; ref?: RunnerRef } | "busy";

export interface ProcessDeps {
  backend: Backend;
  trustDomain: string;
  policy: Policy;
  records: RecordStore;
  admission: Admission;
  /** The driver of each enabled backend: a job spilled to another pool runs on that pool's. */
  runnersFor(backend: Backend): RunnerBackend;
  /** The configured pools by name, for the places an assignment's `pools` name. */
  pools: ReadonlyMap<string, { backend: Backend; maxIdleMs: number; bootTimeoutMs: number }>;
  /** WARM_GRACE_MS: how long a new job waits for an idle warm runner of its pool before its own is asked for. */
  warmGraceMs: number;
  /** Warm runners of `pool` idle now (read once per pass). */
  idleWarm(pool: string): Promise<number>;
  /** True when provisioning needs a registered runner identity (Gitea integration on). */
  needsIdentity: boolean;
  /** Records are replicated (JETSTREAM_REPLICAS > 1): a read may come from a replica that lags. */
  replicated: boolean;
  /** Runs `fn` on a new connection: the pass's own may have died with its server. */
  withFreshRecords<T>(fn: (records: RecordStore) => Promise<T>): Promise<T>;
  /** What the backend receives (claim token, URLs, runner identity); "busy" while another invocation registers it. */
  runnerRequest(assignment: Assignment, record: AssignmentRecord, reserved: boolean, placement: Placement): Promise<PreparedRequest>;
  /** Runs a backend call within the invocation's connection limit and timeout. */
  callBackend<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<T>;
  sink: EventSink;
  now(): number;
}

/**
 * Where an assignment may run, in order: where it was admitted before (its runner may be there),
 * else each of its pools (spill-over), else its own backend. A pool no longer configured is
 * skipped; with none left, its own backend takes it.
 */
function placesOf(deps: ProcessDeps, p: Prepared): Placement[] {
  const record = p.known!.value;
  if (record.placement) return [record.placement];
  const places = (p.assignment!.pools ?? []).flatMap((pool) => {
    const found = deps.pools.get(pool);
    return found ? [{ backend: found.backend, pool }] : [];
  });
  return places.length ? places : [{ backend: deps.backend }];
}

/**
 * A new job (no runner asked for yet) whose first pool has an idle warm runner waits out its grace
 * first: that runner polls Gitea every few seconds and takes it, and the job's own runner is never
 * made (GARM's job-age backoff). Counted from when the dispatcher first saw it.
 */
async function graceFor(deps: ProcessDeps, p: Prepared): Promise<void> {
  const r = p.known!.value;
  const pool = p.assignment!.pools?.[0];
  if (deps.warmGraceMs <= 0 || r.state !== "received" || r.warm || r.runner || !p.assignment!.job || !pool) return;
  const left = deps.warmGraceMs - (deps.now() - Date.parse(r.receivedAt));
  p.facts.warmGraceMs = left > 0 && (await deps.idleWarm(pool)) > 0 ? left : 0;
}

/**
 * A warm runner waits for any job for as long as its pool keeps it idle (maxIdleMs, after which
 * pool maintenance replaces it); only then is its wait a claim timeout. Ticks make the margin.
 */
function policyOf(deps: ProcessDeps, p: Prepared): Policy {
  const r = p.known?.value;
  const pool = deps.pools.get(r?.placement?.pool ?? p.placement?.pool ?? "");
  const boot = pool ? { bootTimeoutMs: pool.bootTimeoutMs } : {};
  if (!r?.warm) return { ...deps.policy, ...boot };
  return { ...deps.policy, ...boot, claimTimeoutMs: Math.max(deps.policy.claimTimeoutMs, (pool?.maxIdleMs ?? 0) + WARM_MARGIN_MS) };
}

const WARM_MARGIN_MS = 5 * 60_000;

/** Where this delivery's runner is: as admitted now, else as its record says. */
const placeOf = (p: Prepared): Placement => p.placement ?? (p.known ? placementOf(p.known.value) : { backend: p.assignment!.backend });

/** One delivery on its way through the table. */
export interface Prepared {
  msg: DeliveredMessage;
  facts: Facts;
  assignment?: Assignment;
  known?: Versioned<AssignmentRecord>;
  reserved: boolean;
  /** Where admission put it (its pool and that pool's backend). */
  placement?: Placement;
  /**
   * This pass registered a runner. Its reservation stays until its lease ends: the record write
   * may have failed, and even once written, a replica that lags (direct gets are answered by any
   * replica) may show the record without it for a moment; a pass that read that and held no
   * reservation would register a second runner.
   */
  registered?: true;
  /** Epoch ms until which the pass holds this delivery for its claim (see hold.ts). */
  heldUntil?: number;
}

const idOf = (p: Prepared) => p.assignment?.id ?? `seq-${p.msg.seq}`;

/** Decodes, offers and admits a whole batch: one read of all records, the slot requests sent together. */
export async function prepareBatch(deps: ProcessDeps, msgs: DeliveredMessage[], deadline: number): Promise<Prepared[]> {
  const batch: Prepared[] = msgs.map((msg) => ({ msg, facts: { now: deps.now(), budgetSpent: deps.now() >= deadline, jitter: Math.random() }, reserved: false }));
  for (const p of batch) {
    if (decide(p.facts, deps.policy).next !== "decode") continue;
    const decoded = decodeAssignment(p.msg.data, deps.trustDomain);
    p.facts.decoded = decoded.ok && decoded.assignment.backend === deps.backend;
    if (decoded.ok) p.assignment = decoded.assignment;
    if (p.facts.decoded) emit(deps, "received", idOf(p));
  }
  const offering = batch.filter((p) => decide(p.facts, deps.policy).next === "offer");
  const records = await deps.records.getMany(offering.map((p) => p.assignment!.id));
  await Promise.all(
    offering.map(async (p) => {
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
    }),
  );
  await Promise.all(batch.filter((p) => decide(p.facts, deps.policy).next === "admit").map((p) => graceFor(deps, p)));
  const admitting = batch.filter((p) => decide(p.facts, deps.policy).next === "admit");
  if (admitting.length) {
    const reserve = new Set(deps.needsIdentity ? admitting.filter((p) => !p.known!.value.runner).map((p) => p.assignment!.id) : []);
    const candidates = admitting.map((p) => ({ id: p.assignment!.id, places: placesOf(deps, p) }));
    const { admitted, reserved } = await deps.admission.placeMany(candidates, reserve);
    for (const p of admitting) {
      const placement = admitted.get(p.assignment!.id);
      p.facts.admitted = placement !== undefined;
      if (placement) p.placement = placement;
      p.reserved = reserved.has(p.assignment!.id);
      if (p.facts.admitted) emit(deps, "capacity_acquired", idOf(p));
    }
  }
  return batch;
}

/**
 * Finishes one prepared delivery: backend call, record write, ack/nak/term. With `holdUntil`, a
 * delivery left waiting for its claim is not nak'd: `held` says the caller now owns it, and a
 * runner that just became ready has the hold recorded, so that its claim need not start a pass.
 */
export async function finishMessage(deps: ProcessDeps, p: Prepared, budgetSpent: boolean, holdUntil?: number): Promise<Verdict & { held?: true }> {
  if (budgetSpent) p.facts.budgetSpent = true;
  let ref: RunnerRef | undefined;
  for (;;) {
    const step = decide(p.facts, policyOf(deps, p));
    if (step.next === "call_backend") {
      try {
        if (deps.replicated && p.reserved && !p.known!.value.runner) {
          // About to register: only the leader's copy can say that no runner is stored yet.
          const latest = await deps.records.getFromLeader(p.assignment!.id);
          if (latest?.value.runner) p.known = latest;
        }
        const place = placeOf(p);
        const prepared = await deps.runnerRequest(p.assignment!, p.known!.value, p.reserved, place);
        if (prepared !== "busy") ref = prepared.ref;
        if (ref) {
          p.registered = true;
          emit(deps, "runner_registered", idOf(p));
        }
        p.facts.backend = prepared === "busy" ? "pending" : await deps.callBackend((signal) => deps.runnersFor(place.backend).accept(prepared.request, signal));
      } catch (err) {
        const status = err instanceof BackendError ? err.status : undefined;
        p.facts.backend = status === 401 || status === 403 ? "auth_error" : "error";
        deps.sink.error("backend accept failed", { assignment: idOf(p), backend: deps.backend, reason: (err as Error).message });
      }
      continue;
    }
    if (step.next !== "done") throw new Error(`unprepared step ${step.next} for ${idOf(p)}`);
    const holding = holdUntil !== undefined && step.events.at(-1) === "claim_pending";
    const after = await applyEffects(deps, p, step.effects, ref, holding ? holdUntil : undefined);
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

const settled = new Set(["claimed", "completed", "terminated"]);

/** All of a verdict's record changes, and a new runner identity, in one write. */
async function applyEffects(deps: ProcessDeps, p: Prepared, effects: Effect[], ref: RunnerRef | undefined, holdUntil?: number): Promise<AssignmentRecord | null> {
  if (!p.assignment || !p.known) return null;
  const at = new Date(deps.now()).toISOString();
  const change = (r: AssignmentRecord): AssignmentRecord | undefined => {
    let next: AssignmentRecord = ref && !r.runner ? { ...r, runner: ref } : r;
    const { pool, backend } = p.placement ?? {};
    if (pool !== undefined && backend !== undefined && !next.placement) next = { ...next, placement: { pool, backend } };
    // State changes never overwrite a claim (or an end) that arrived meanwhile.
    if (!settled.has(next.state)) {
      for (const effect of effects) {
        if (effect === "mark_waiting" && next.state !== "capacity_wait") next = { ...next, state: "capacity_wait" };
        if (effect === "mark_pending" && (next.state !== "backend_pending" || !next.askedAt)) next = { ...next, state: "backend_pending", askedAt: next.askedAt ?? at };
        if (effect === "mark_ready" && (next.state !== "backend_ready" || !next.readyAt)) {
          next = { ...next, state: "backend_ready", readyAt: next.readyAt ?? at, ...(holdUntil ? { heldUntil: new Date(holdUntil).toISOString() } : {}) };
        }
        if (effect === "forget_ready_and_teardown" || effect === "boot_retry") {
          const { readyAt: _forgotten, askedAt: _restarted, ...rest } = next;
          next = { ...rest, state: "backend_pending", ...(effect === "boot_retry" ? { bootAttempts: (next.bootAttempts ?? 0) + 1 } : {}) };
        }
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
  const write = (records: RecordStore) => records.updateFrom(p.known!, change);
  const after = ref
    ? await retryUnavailable((attempt) => (attempt === 0 ? write(deps.records) : deps.withFreshRecords(write)), deps.now, REF_WRITE_RETRY_MS).catch((err) => {
        deps.sink.error("storing a runner registration failed", { assignment: p.assignment!.id, backend: deps.backend, reason: (err as Error).message });
        throw err;
      })
    : await write(deps.records);
  const place = placeOf(p);
  const gaveUp = effects.includes("give_up_boot") && after?.gaveUpAt === at;
  const retried = effects.includes("boot_retry") && after?.state === "backend_pending" && !after.askedAt;
  if (effects.includes("release_slot") || gaveUp || retried) await deps.admission.release(place, p.assignment.id);
  // Tear down only when the claim did not win the race: a claimed runner is left alone. The Gitea
  // runner of one given up on goes with the sweep's next look (its record is terminated).
  const forgot = effects.includes("forget_ready_and_teardown") && after?.state === "backend_pending" && !after.readyAt;
  if (forgot || gaveUp || retried) {
    const id = p.assignment.id;
    await deps.callBackend((signal) => deps.runnersFor(place.backend).teardown(id, signal)).catch((err) => {
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
