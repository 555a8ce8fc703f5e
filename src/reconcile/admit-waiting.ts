// Giving free slots to waiting jobs, by turn (fair share): while the pass's backend has room, the
// job whose turn it is (fair-share.ts) gets it (give-turn.ts): a job whose message is held has its
// runner asked for by this pass; one of an entry from before the hold is published again. A pass
// that dies between two steps leaves the job in the wait set, and the next pass repeats them,
// each idempotent. Also here: the turn order of a batch of new jobs, and the shares it is read from.
import { UNADMITTED_STATES } from "../nats/names.ts";
import type { Prepared, ProcessDeps, WaitingDeps } from "./types.ts";
import { glanceAt, lookAt, type WaitHead } from "../state/wait-set.ts";
import { jobRepository, type AssignmentRecord } from "../state/records.ts";
import type { Versioned } from "../state/kv.ts";
import { whoseJob } from "../quotas/config.ts";
import { inTurnOrder, pickNext, taken, type Shares } from "../quotas/fair-share.ts";
import { resumeTurns, sortStalled, stalledHolders } from "./stalled.ts";
import { giveHeldTurn, isHeld, republishTurn, takeOut, type Finish, type HeldTurnOptions, type TurnOutcome } from "./give-turn.ts";

/**
 * Turns refused by their pools' caps (maxRunners) in a row before the pass gives up: the backend
 * may have room for the next job, of another pool. A refusal by the backend itself ends the pass
 * at once: a slot freed a moment later belongs to the turn of the pass its release starts, not to
 * whichever repository this pass would try next (it would jump the queue).
 */
const FULL_IN_A_ROW = 3;

export interface TurnOptions {
  /** The pass put a job in the wait set, so somebody waits: the holders are read first. */
  joined?: boolean;
  /** The pass's budget: a held job's runner is not asked for past it. */
  deadline?: number;
  /** What the pass's next round needs to know of this one's (run.ts). */
  told?: Told;
  /** How a held job's runner is asked for (process.ts's finishMessage); without it, held jobs get no turn. */
  finish?: Finish;
}

/** What a turn-giving told its pass; the last look's (the turn gate may give turns twice for one pass). */
export interface Told {
  /** Turns whose assignment was published again: the pass's next round pulls them. */
  republished: number;
  /** The backend was found full, or the turns filled it: a slot freed since starts a pass of its own. */
  filled?: boolean;
  /** The look saw every repository waiting and left nobody it could give a turn to: a job put in since looks for itself. */
  exhausted?: boolean;
}

/** Gives the free slots of the pass's backend to waiting jobs, by turn; how many it gave. */
export async function admitWaiting(deps: ProcessDeps, { joined = false, deadline = Infinity, told, finish }: TurnOptions = {}): Promise<number> {
  const w = deps.waiting;
  if (!w) return 0;
  // A full backend has no turn to give: the release that frees a slot starts a pass of its own
  // (admission.release says so whenever anybody waits), which reads the holders after its purge.
  const full = (holders: string[]) => w.capacity !== undefined && holders.length >= w.capacity;
  if (told) Object.assign(told, { filled: false, exhausted: false });
  const filled = () => {
    if (told) told.filled = true;
    return 0;
  };
  // Most passes find nobody waiting: one request, and nothing more. One that just put a job in
  // the wait set most often finds the backend full: one request too, or two while a holder's
  // record is not known here as settled (stalled.ts).
  const first = joined ? await deps.admission.holders(deps.backend) : undefined;
  const stalledFirst = first && full(first) ? await stalledHolders(deps, w, first) : undefined;
  if (stalledFirst && !stalledFirst.size) return filled();
  // The oldest jobs waiting, in one request: most often every one, and then the heads of every
  // repository, and each turn's next, come from it (lookAt).
  const glance = await glanceAt(w.set, deps.backend);
  if (!glance.oldest.length) {
    if (told) told.exhausted = true;
    return 0;
  }
  let holders = first ?? (await deps.admission.holders(deps.backend));
  // A full backend whose slots include some nobody asks a runner for is not full: such a job
  // whose entry the look holds gets its turn again first (its slot is its own); any other's slot
  // goes back (its message comes back and asks).
  const stalled = stalledFirst ?? (full(holders) ? await stalledHolders(deps, w, holders) : new Map<string, Versioned<AssignmentRecord>>());
  const { resume, counted: holding } = await sortStalled(deps, holders, glance.oldest, stalled);
  holders = holding;
  if (!resume.length && full(holders)) return filled();
  // The records of the held jobs among them are read with the holders' (one request): a turn
  // starts from its record as the store has it.
  const [view, { read, ...counted }] = await Promise.all([
    lookAt(w.set, deps.backend, glance),
    heldNow(
      deps,
      [],
      holders,
      glance.oldest.filter((h) => isHeld(h) && !stalled.has(h.id)).map((h) => h.id),
    ),
  ]);
  const started: Promise<void>[] = [];
  const done = new Set<number>();
  const opts = { deadline, started, told, read, finish, done: (seq: number) => void done.add(seq) };
  try {
    const resumed = finish ? await resumeTurns(deps, w, resume, stalled, view, { ...opts, finish }) : { given: 0, heads: view.heads };
    const heads = resumed.heads;
    if (full(holders)) {
      filled();
      return resumed.given;
    }
    // A glance that found some holds a head of each of their repositories: never none.
    return resumed.given + (await giveTurns(deps, w, view, { ...counted, heads }, heads, holders, opts));
  } finally {
    await Promise.all(started);
    await takeOut(deps, w, glance.oldest, done);
  }
}

/** The turn loop: picks whose turn it is while the backend has room. */
async function giveTurns(
  deps: ProcessDeps,
  w: WaitingDeps,
  view: { complete: boolean; next(repository: string, afterSeq: number): Promise<WaitHead | undefined> },
  start: Shares,
  firstHeads: WaitHead[],
  holders: string[],
  opts: Omit<HeldTurnOptions, "finish"> & { told: TurnOptions["told"]; read: Map<string, Versioned<AssignmentRecord>>; finish: Finish | undefined },
): Promise<number> {
  let shares = start;
  let heads = firstHeads;
  let given = 0;
  let refused = 0;
  let held = holders.length;
  for (;;) {
    const next = pickNext(shares, w.rules);
    // Nobody left that this look saw who may have a turn now (each repository's head given, or
    // held back by a limit or a full pool, which a release ends): a further look finds the same.
    if (!next && opts.told) opts.told.exhausted = view.complete;
    if (!next) break;
    const head = heads.find((h) => h.seq === next.seq)!;
    const outcome: TurnOutcome = !isHeld(head)
      ? await republishTurn(deps, w, head)
      : opts.finish
        ? await giveHeldTurn(deps, w, head, opts.read.get(head.id) ?? (await deps.records.getMany([head.id])).get(head.id) ?? null, {
            ...opts,
            finish: opts.finish,
          })
        : "full";
    if (outcome === "admitted" && !isHeld(head) && opts.told) opts.told.republished++;
    if (outcome === "backend_full" && opts.told) opts.told.filled = true;
    if (outcome === "backend_full" || (outcome === "full" && ++refused >= FULL_IN_A_ROW)) break;
    if (outcome !== "full") refused = 0;
    // At a QUOTAS limit the pick thought it was under (another pass took the place), or its pool
    // is full: its repository waits for this pass.
    if (outcome === "limited" || outcome === "full") {
      heads = heads.filter((h) => h.repository !== head.repository);
      shares = { ...shares, heads };
      continue;
    }
    if (outcome === "admitted" && !holders.includes(head.id)) held++;
    if (outcome === "admitted" && w.capacity !== undefined && held >= w.capacity) {
      // Every slot the holders' read left is given: a slot freed since starts a round of its own
      // (its release's pass asks this one for it), which reads the holders again.
      if (opts.told) opts.told.filled = true;
      given++;
      break;
    }
    const after = await view.next(head.repository, head.seq);
    heads = [...heads.filter((h) => h !== head), ...(after ? [after] : [])];
    shares = outcome === "admitted" ? taken({ ...shares, heads }, next) : { ...shares, heads };
    if (outcome === "admitted") given++;
  }
  return given;
}

/**
 * The order in which a batch's deliveries try for slots while nobody is in the wait set: turn
 * order (weights, QUOTAS, repository, then oldest), not stream order, so that when there are fewer
 * slots than deliveries they go as admitWaiting would give them. Jobs whose turn was given already
 * (chosen), and redeliveries of jobs admitted before (they hold their slot), go first. Costs
 * heldNow's two reads, and only for a batch of new jobs of several repositories.
 */
export async function orderByTurn(deps: ProcessDeps, batch: Prepared[]): Promise<Prepared[]> {
  const fresh = batch.filter((p) => needsTurn(p.known!.value));
  const chosen = batch.filter((p) => !fresh.includes(p));
  const whose = (p: Prepared) => whoseJob(p.assignment!.job?.repository);
  if (!deps.waiting || new Set(fresh.map((p) => whose(p).repository)).size < 2) return batch;
  return [...chosen, ...inTurnOrder(fresh, whose, (p) => p.msg.seq, await heldNow(deps, []), deps.waiting.rules)];
}

/** A job that needs its turn: no slot asked for yet (unadmitted), and none given it (chosen). */
export const needsTurn = (r: Pick<AssignmentRecord, "chosen" | "state">) => !r.chosen && UNADMITTED_STATES.has(r.state);

/**
 * Live runners per owner and repository on the pass's backend: its slot holders' records (two
 * requests; one when the holders are known). A record this isolate keeps is not read again: whose
 * job a record is never changes.
 */
export async function heldNow(
  deps: Pick<ProcessDeps, "admission" | "records" | "backend">,
  heads: WaitHead[],
  known?: string[],
  /** Records read in the same request, returned as `read`. */
  alsoRead: readonly string[] = [],
): Promise<Shares & { read: Map<string, Versioned<AssignmentRecord>> }> {
  const holders = known ?? (await deps.admission.holders(deps.backend));
  const kept = deps.records.kept(holders);
  const unknown = holders.filter((id) => !kept.has(id));
  const asked = [...new Set([...unknown, ...alsoRead])];
  const read = asked.length ? await deps.records.getMany(asked) : new Map<string, Versioned<AssignmentRecord>>();
  const heldByOwner = new Map<string, number>();
  const heldByRepository = new Map<string, number>();
  for (const value of [...kept.values(), ...unknown.flatMap((id) => read.get(id)?.value ?? [])]) {
    const at = whoseJob(jobRepository(value));
    heldByOwner.set(at.owner, (heldByOwner.get(at.owner) ?? 0) + 1);
    heldByRepository.set(at.repository, (heldByRepository.get(at.repository) ?? 0) + 1);
  }
  return { heads, heldByOwner, heldByRepository, read };
}
