// Slots held by jobs nobody asks a runner for: a turn, or a new job's pass, took the slot and then
// died (a deploy, an evicted isolate) or failed before it asked, and its record still says no
// runner was asked for. Nothing else gives such a slot back before its lease (LEASE_TTL_MS, hours),
// and a backend whose slots they hold looks full to every turn. A slot is presumed stalled once it
// is older than ACK_WAIT_MS with its record unadmitted: the longest a live pass takes to ask (its
// budget and its backend call) is shorter, as JetStream presumes a delivery lost after it. A live
// pass taken for dead asks a second time for the same assignment: drivers make one workload per
// assignment id, and the registration reservation lets only one pass register its runner.
import { SETTLED_STATES, UNADMITTED_STATES } from "../nats/names.ts";
import type { Versioned } from "../state/kv.ts";
import { placementOf, type AssignmentRecord } from "../state/records.ts";
import type { WaitHead, WaitView } from "../state/wait-set.ts";
import { giveHeldTurn, isHeld, type HeldHead, type HeldTurnOptions } from "./give-turn.ts";
import type { ProcessDeps, WaitingDeps } from "./types.ts";

/**
 * The holders among `holders` whose slot is stalled, with their records as read now. Costs nothing
 * when each holder is kept here as claimed or ended; otherwise one read of when the slots were
 * taken, and one of the records of those older than `stallAfterMs`.
 */
export async function stalledHolders(
  deps: Pick<ProcessDeps, "records" | "admission" | "backend" | "now">,
  w: Pick<WaitingDeps, "stallAfterMs">,
  holders: readonly string[],
): Promise<Map<string, Versioned<AssignmentRecord>>> {
  if (w.stallAfterMs === undefined || !holders.length) return new Map();
  // A record this isolate kept as settled never goes back to waiting for its turn.
  const kept = deps.records.kept(holders);
  const suspects = holders.filter((id) => !SETTLED_STATES.has(kept.get(id)?.state ?? "received"));
  if (!suspects.length) return new Map();
  const since = await deps.admission.heldSince(deps.backend);
  const now = deps.now();
  const old = suspects.filter((id) => {
    const at = since.get(id);
    return at !== undefined && now - at > w.stallAfterMs!;
  });
  if (!old.length) return new Map();
  const read = await deps.records.getMany(old);
  return new Map([...read].filter(([, r]) => UNADMITTED_STATES.has(r.value.state)));
}

/**
 * Gives back the slots and QUOTAS places of stalled holders whose turn cannot be given here (no
 * entry of theirs in the look): their message comes back within ACK_WAIT_MS and asks again.
 */
async function releaseStalled(deps: Pick<ProcessDeps, "admission" | "backend" | "sink">, records: readonly AssignmentRecord[]): Promise<void> {
  await Promise.all(
    records.map(async (r) => {
      await deps.admission.release(placementOf(r), r.id);
      deps.sink.event({ event: "slot_reclaimed", assignment: r.id, backend: deps.backend });
    }),
  );
}

/**
 * A full backend's stalled holders, sorted: those whose entry the look holds (`oldest`) get their
 * turn again first (`resume`: the slot is theirs); the others' slots go back now, and `counted`
 * is the holders without them.
 */
export async function sortStalled(
  deps: Pick<ProcessDeps, "admission" | "backend" | "sink">,
  holders: readonly string[],
  oldest: readonly WaitHead[],
  stalled: ReadonlyMap<string, Versioned<AssignmentRecord>>,
): Promise<{ resume: HeldHead[]; counted: string[] }> {
  const resume = [...new Map(oldest.filter((h): h is HeldHead => stalled.has(h.id) && isHeld(h)).map((h) => [h.id, h])).values()];
  const orphans = [...stalled.values()].map((r) => r.value).filter((r) => !resume.some((h) => h.id === r.id));
  if (orphans.length) await releaseStalled(deps, orphans);
  return { resume, counted: holders.filter((id) => !orphans.some((r) => r.id === id)) };
}

/** Gives the stalled jobs' turns again, before any other: how many, and the heads with each one's repository's next in its place. */
export async function resumeTurns(
  deps: ProcessDeps,
  w: WaitingDeps,
  resume: readonly HeldHead[],
  stalled: ReadonlyMap<string, Versioned<AssignmentRecord>>,
  view: Pick<WaitView, "heads" | "next">,
  opts: HeldTurnOptions,
): Promise<{ given: number; heads: WaitHead[] }> {
  let heads = view.heads;
  let given = 0;
  for (const h of resume) {
    const outcome = await giveHeldTurn(deps, w, h, stalled.get(h.id)!, opts);
    if (outcome !== "admitted" && outcome !== "gone") continue;
    if (outcome === "admitted") {
      given++;
      deps.sink.event({ event: "turn_resumed", assignment: h.id, backend: deps.backend });
    }
    const after = await view.next(h.repository, h.seq);
    heads = [...heads.filter((x) => x.seq !== h.seq), ...(after ? [after] : [])];
  }
  return { given, heads };
}
