// What the HTTP API does, apart from HTTP: look up, claim and complete assignments (publishing
// is in publish.ts).
import { assignmentIdSchema } from "../model/assignment.ts";
import type { Basics, Settings, StoreAccess } from "./context.ts";
import { Conflict, NotFound, Refused } from "../model/errors.ts";
import { UNADMITTED_STATES, type AssignmentState, type Backend } from "../nats/names.ts";
import { ASKED_FOR, TERMINAL } from "../model/states.ts";
import { incarnationOf, placementOf, type AssignmentRecord, type Interruption } from "../state/records.ts";
import { startVia, type StartVia } from "../state/record.ts";
import { claim, complete } from "../state/transitions.ts";
import { ackDelivery } from "../nats/pull.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess;

export interface AssignmentView {
  id: string;
  backend: Backend;
  state: AssignmentState;
  createdAt: string;
  receivedAt: string;
  updatedAt: string;
  readyAt: string | null;
  claimedAt: string | null;
  completedAt: string | null;
  terminatedAt: string | null;
  reason: string | null;
  /** Id of the Gitea runner registered for it, if any. */
  giteaRunnerId: number | null;
  /** Where in Gitea that runner is registered (a scope key); null: GITEA_SCOPE, or none. */
  giteaRunnerScope: string | null;
  /** The pool that admitted it, once admitted. */
  pool: string | null;
  /** Its runner is kept warm for its pool (RUNNER_POOLS minIdle). */
  warm: boolean;
  /** Forgejo: the handle of the job attempt its runner runs (its job's, or the one its warm runner was given). */
  handle: string | null;
  /** Runners replaced after an interruption before the claim (part of the claim token's incarnation). */
  replaced: number;
  /** Its latest runner's interruption, if any. */
  interrupted: Interruption | null;
}

export function viewOf(r: AssignmentRecord): AssignmentView {
  return {
    id: r.id,
    backend: r.backend,
    state: r.state,
    createdAt: r.createdAt,
    receivedAt: r.receivedAt,
    updatedAt: r.updatedAt,
    readyAt: r.readyAt ?? null,
    claimedAt: r.claimedAt ?? null,
    completedAt: r.completedAt ?? null,
    terminatedAt: r.terminatedAt ?? null,
    reason: r.reason ?? null,
    giteaRunnerId: r.runner?.id ?? null,
    giteaRunnerScope: r.runner?.scope ?? null,
    pool: r.placement?.pool ?? null,
    warm: r.warm === true,
    handle: r.bound?.handle ?? r.jobHandle ?? null,
    replaced: r.replaced ?? 0,
    interrupted: r.interrupted ?? null,
  };
}

/** The view's Gitea runner, where Gitea keeps it. */
export function giteaRunnerOf(v: Pick<AssignmentView, "giteaRunnerId" | "giteaRunnerScope">): { id: number; scope?: string } | undefined {
  return v.giteaRunnerId === null ? undefined : { id: v.giteaRunnerId, ...(v.giteaRunnerScope ? { scope: v.giteaRunnerScope } : {}) };
}

export function parseId(raw: string): string {
  const id = assignmentIdSchema.safeParse(raw);
  if (!id.success) throw new NotFound("no such assignment");
  return id.data;
}

export async function getAssignment(d: Deps, id: string): Promise<AssignmentView> {
  const record = await d.withState((state) => state.records.get(id));
  if (!record) throw new NotFound(`no assignment ${id}`);
  return viewOf(record);
}

const CLAIMABLE = ASKED_FOR;
export { TERMINAL };

/**
 * A runner can claim once one was asked for, or registered for it in Gitea, and until it ends.
 * A claim token is handed out only in the request that asks a backend for the runner, so its
 * holder's claim also counts while the record does not say so yet: the pass writes the record
 * after the backend's answer, and a runner that starts at once comes first (the pass's write
 * never overwrites a claim). A Gitea runner's claim counts only once its registration is stored.
 */
export function canClaim(r: AssignmentRecord, caller: Caller = {}): boolean {
  if (caller.runnerId === undefined && ASKED_FOR_BY_TOKEN.has(r.state)) return true;
  return CLAIMABLE.has(r.state) || (r.runner !== undefined && !TERMINAL.has(r.state) && r.state !== "claimed");
}

/** States a token holder's claim may find while the pass that asked for its runner is still writing. */
const ASKED_FOR_BY_TOKEN = UNADMITTED_STATES;

/**
 * A claim's outcome. `held`: no pass is needed for its message (this call acked it, or a pass
 * holds it and will ack it within moments); `changed` when this call claimed it.
 */
export type Claimed = AssignmentView & { held: boolean; changed: boolean; via: StartVia };

/** A claim or completion by a Gitea runner that is not the one registered for the assignment. */
export class RunnerMismatch extends Refused {
  constructor(id: string, runnerId: number | undefined) {
    super(`runner ${runnerId ?? "(none)"} is not the runner registered for assignment ${id}`);
  }
}

/** Who is asking: a claim token holder (no runnerId), or the Gitea runner of a webhook. */
export interface Caller {
  /**
   * Webhooks: the Gitea runner id the event names (null when it names none). The change counts
   * only if it is the runner registered for the assignment: runner names are not unique in Gitea.
   */
  runnerId?: number | null;
  /**
   * Claim tokens: the incarnation the token was signed for. A token of an earlier record under the
   * same id (expired, then the id used again) is refused.
   */
  incarnation?: string;
}

/** A claim token made for an earlier record under the same id. */
export class StaleClaimToken extends Refused {
  constructor(id: string) {
    super(`claim token is of an earlier assignment ${id}`);
  }
}

const sameIncarnation = (r: AssignmentRecord, caller: Caller) => caller.incarnation === undefined || incarnationOf(r) === caller.incarnation;

/** Refuses a caller that is not the assignment's runner: another Gitea runner, or an old token. */
function requireCaller(record: AssignmentRecord, id: string, caller: Caller): void {
  if (!sameIncarnation(record, caller)) throw new StaleClaimToken(id);
  if (!isRegistered(record, caller)) throw new RunnerMismatch(id, caller.runnerId ?? undefined);
}

const isRegistered = (r: AssignmentRecord, caller: Caller) =>
  caller.runnerId === undefined || (caller.runnerId !== null && r.runner !== undefined && r.runner.id === caller.runnerId);

/** The runner took the assignment. Idempotent; refused once completed or terminated. */
export async function claimAssignment(d: Deps, id: string, caller: Caller = {}, took?: string): Promise<Claimed> {
  const at = new Date(d.now()).toISOString();
  let inWrite = false;
  // `took`: the job its runner runs is another's (see pools/taken.ts), written with the claim
  // so that whoever follows the swap after this claim finds it.
  let acked = false;
  const { record, changed } = await d.withState(async (state, handle) => {
    const claimed = await claim(state.records, id, {
      at,
      took,
      when: (r) => {
        const may = sameIncarnation(r, caller) && isRegistered(r, caller) && canClaim(r, caller);
        inWrite = may && ASKED_FOR_BY_TOKEN.has(r.state);
        return may;
      },
    });
    // Only after the claim is stored: the message of the pass that asked for the runner is acked
    // here, so that no pass waits out its nak delay for it. Should this fail, a pass acks it.
    const by = claimed.changed && claimed.record?.state === "claimed" ? claimed.record.askedBy : undefined;
    // A warm runner took a job: the jobs promised one in their grace here wait for one fewer.
    const pool = claimed.changed && claimed.record?.warm ? claimed.record.placement?.pool : undefined;
    if (pool !== undefined) state.warmLook.tookJob(pool);
    if (by)
      acked = await ackDelivery(handle.nc, by, CLAIM_ACK_TIMEOUT_MS).then(
        () => true,
        () => false,
      );
    return claimed;
  });
  if (!record) throw new NotFound(`no assignment ${id}`);
  requireCaller(record, id, caller);
  if (record.state !== "claimed") throw new Conflict(`assignment ${id} is ${record.state} and cannot be claimed`);
  if (changed) d.sink.event({ event: "claimed", assignment: id, backend: record.backend });
  // As a pass tells its ack of a claimed runner's message.
  if (acked) for (const event of ["runner_claimed", "acked"] as const) d.sink.event({ event, assignment: id, backend: record.backend });
  // The holder's last look comes after heldUntil; a claim well before it is sure to be seen. A
  // claim that came before the pass's write is seen by that write, which acks (or, should that
  // pass die, by the message's next delivery): no pass of its own is needed either. A claim that
  // changed nothing needs none: the first one started it.
  const held = !changed || inWrite || acked || (record.heldUntil !== undefined && Date.parse(record.heldUntil) - HOLD_MARGIN_MS > d.now());
  return { ...viewOf(record), held, changed, via: startVia(record) };
}

/** How long a claim waits for the server to confirm its ack: past it, a pass acks instead. */
const CLAIM_ACK_TIMEOUT_MS = 2_000;

const HOLD_MARGIN_MS = 250;

/**
 * The runner finished: the assignment completes and its admission slot is released. Idempotent.
 * `unclaimed` also completes an assignment whose claim never arrived (Gitea says its runner ran).
 */
export async function completeAssignmentRun(d: Deps & Settings<"stream">, id: string, opts: Caller & { unclaimed?: boolean } = {}): Promise<Completed> {
  // The runner's own completion and Gitea's `completed` come together: in one isolate (the
  // gateway), the second waits for the first and, when that one completed and released it, asks
  // NATS nothing (four operations: a read, a write that loses the race, the leader's read, a purge).
  const key = `${d.config.stream}/${id}`;
  const first = completing.get(key);
  const settled = first && (await first.catch(() => undefined));
  if (settled) {
    requireCaller(settled, id, opts);
    return { ...viewOf(settled), contended: false, changed: false, runsOn: placementOf(settled).backend };
  }
  const at = new Date(d.now()).toISOString();
  let changed = false;
  let contended = false;
  let released = false;
  const completable = (r: AssignmentRecord) =>
    sameIncarnation(r, opts) && isRegistered(r, opts) && (r.state === "claimed" || (opts.unclaimed === true && canClaim(r, opts)));
  const work = d.withState(async (state) => {
    const done = await complete(state.records, id, { at, when: completable });
    changed = done.changed;
    const r = done.record;
    // Released on every call, so a retried complete frees a slot a failed release left behind;
    // only the call that completed it asks whether anyone waits for the slot.
    if (r?.state === "completed" && sameIncarnation(r, opts) && isRegistered(r, opts)) {
      if (changed) contended = await state.admission.release(placementOf(r), id);
      else await state.admission.releaseAgain(placementOf(r), id);
      released = true;
    }
    return r;
  });
  // Shared only once completed and released: a waiter whose first failed does its own.
  const shared = work.then((r) => (released && r ? r : Promise.reject(new Error("not released"))));
  shared.catch(() => undefined);
  if (!first) {
    completing.set(key, shared);
    void shared.finally(() => completing.get(key) === shared && completing.delete(key)).catch(() => undefined);
  }
  const record = await work;
  if (!record) throw new NotFound(`no assignment ${id}`);
  requireCaller(record, id, opts);
  if (record.state !== "completed") throw new Conflict(`assignment ${id} is ${record.state} and cannot be completed`);
  if (changed) d.sink.event({ event: "completed", assignment: id, backend: record.backend });
  return { ...viewOf(record), contended, changed, runsOn: placementOf(record).backend };
}

/** Completions in flight in this isolate, by stream and id: what a concurrent one may share. */
const completing = new Map<string, Promise<AssignmentRecord>>();

/**
 * A completion's outcome. `changed`: this call completed it, so its runner is to be torn down;
 * a repeated completion tears nothing down (a teardown that failed is the tick's to retry).
 */
export type Completed = Released<AssignmentView> & { changed: boolean; runsOn: Backend };

/** `contended`: the freed slot was one of a full pool, so an assignment may be waiting for it. */
export type Released<T> = T & { contended: boolean };
