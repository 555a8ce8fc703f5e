// Prepares a batch of deliveries for the table: decodes each, reads all their records in one
// request (a first delivery's from this isolate's offer), offers the ones with none, and admits
// those the table sends to admission, the slot requests sent together (fair share: in turn order,
// or into the wait set while others wait).
import { decodeAssignment } from "../model/assignment.ts";
import type { DeliveredMessage } from "../nats/pull.ts";
import { contentHash, sameContent } from "../state/records.ts";
import { decide } from "./decide.ts";
import { graceFor, placesOf } from "./pool-facts.ts";
import type { Prepared, ProcessDeps } from "./types.ts";
import { releaseQuota, takeQuota } from "../quotas/limits.ts";
import { needsTurn, orderByTurn } from "./admit-waiting.ts";
import { isTurnMessage } from "../state/wait-set.ts";
import { emit, idOf } from "./emit.ts";

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
      waitedMs: Math.max(0, p.facts.now - Date.parse(r.receivedAt)),
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
    // A job delivered again that holds a slot already took it for its turn, and its pass died or
    // failed before asking (a deploy, a step that threw, the budget): it asks now, with that slot.
    const again = admitting.some((p) => waits(p) && p.msg.deliveryCount > 1);
    const holding = again ? new Set(await deps.admission.holders(deps.backend)) : new Set<string>();
    for (const p of admitting) if (waits(p) && !holding.has(p.assignment!.id)) Object.assign(p.facts, { admitted: false, waitSet: true });
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
    // A turn's slot is handed only to its message's first delivery: a redelivery may follow a
    // delivery elsewhere that gave the slot back (a backend call that failed).
    const turns = new Set(trying.filter((p) => p.msg.deliveryCount === 1 && isTurnMessage(p.msg.msgId)).map((p) => p.assignment!.id));
    const { admitted, reserved } = await deps.admission.placeMany(candidates, reserve, { turns });
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
