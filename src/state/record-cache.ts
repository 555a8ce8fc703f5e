// The records this isolate last read or wrote, with their revisions: where a record is changed by
// compare-and-set, the write is first tried at the revision kept here, without reading the record
// again. Never an answer on its own: a write at a revision that is no longer the latest fails
// (another writer, another isolate, an expiry), and the change is then made from a fresh read, as
// without the cache. So a claim that follows the pass's write, or a completion that follows its
// claim, in the same isolate (the gateway object) costs one write and no read.
//
// One read it does answer: a message's first delivery, from the offer this isolate made for it
// moments ago, or from the turn it gave it (`offered`). The webhook's record is created here while
// the eager pass pulls its message, so the pass need not read the record back (a round trip on the
// way to the runner); a turn's republished message is most often pulled by the pass that gave it.
// What the pass decides from it is what it would decide from a read made a round trip later: its
// first write is at the offer's revision, and fails (then reads) if anybody wrote since.
import type { AssignmentRecord } from "./record.ts";
import type { Versioned } from "./kv.ts";
import { TERMINAL } from "../model/states.ts";
import { createHandOff } from "./hand-off.ts";

export interface RecordCache {
  /** The latest revision of `id` this isolate saw, if it still keeps it. */
  get(id: string): Versioned<AssignmentRecord> | undefined;
  /** Keeps what a read or a write saw, unless a later revision is kept already. */
  note(seen: Versioned<AssignmentRecord>): void;
  /** An offer of `id` in flight: what it will have seen (null if it failed), kept for OFFERED_MS. */
  offering(id: string, seen: Promise<Versioned<AssignmentRecord> | null>, now: number): void;
  /**
   * Once: what this isolate's offer of `id` saw, if made within OFFERED_MS; undefined when there
   * was none, it failed, or a later revision of the record was seen since (the caller reads it).
   */
  takeOffered(id: string, now: number): Promise<Versioned<AssignmentRecord> | undefined> | undefined;
}

/** How long an offer's record may answer its message's first delivery (an eager pass's, at once). */
export const OFFERED_MS = 2_000;

interface Offered {
  seen: Promise<Versioned<AssignmentRecord> | null>;
  /** The highest revision of the record noted since the offer began. */
  latest: number;
}

/**
 * At most `limit` records of jobs that have not ended, the least recently seen going first: a
 * record is about 1.5 KB, and a miss costs only the read the cache saves.
 */
export function createRecordCache(limit = 5_000): RecordCache {
  const kept = new Map<string, Versioned<AssignmentRecord>>();
  const offered = createHandOff<Offered>(OFFERED_MS, limit);
  return {
    get: (id) => kept.get(id),
    note(seen) {
      const id = seen.value.id;
      const offer = offered.peek(id);
      if (offer) offer.latest = Math.max(offer.latest, seen.revision);
      const before = kept.get(id);
      if (before && before.revision > seen.revision) return;
      kept.delete(id);
      // An ended record is seldom changed again (a repeated completion reads it): the cache holds
      // the jobs that live, not every job this isolate saw.
      if (TERMINAL.has(seen.value.state)) return;
      kept.set(id, seen);
      if (kept.size > limit) kept.delete(kept.keys().next().value!);
    },
    offering(id, seen, now) {
      offered.hand(id, { seen, latest: 0 }, now);
    },
    takeOffered(id, now) {
      const offer = offered.take(id, now);
      if (!offer) return undefined;
      return offer.seen.then((seen) => (seen && seen.revision >= offer.latest ? seen : undefined)).catch(() => undefined);
    },
  };
}
