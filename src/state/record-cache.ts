// The records this isolate last read or wrote, with their revisions: where a record is changed by
// compare-and-set, the write is first tried at the revision kept here, without reading the record
// again. Never an answer on its own: a write at a revision that is no longer the latest fails
// (another writer, another isolate, an expiry), and the change is then made from a fresh read, as
// without the cache. So a claim that follows the pass's write, or a completion that follows its
// claim, in the same isolate (the gateway object) costs one write and no read.
import type { AssignmentRecord } from "./record.ts";
import type { Versioned } from "./kv.ts";
import { TERMINAL } from "../model/states.ts";

export interface RecordCache {
  /** The latest revision of `id` this isolate saw, if it still keeps it. */
  get(id: string): Versioned<AssignmentRecord> | undefined;
  /** Keeps what a read or a write saw, unless a later revision is kept already. */
  note(seen: Versioned<AssignmentRecord>): void;
}

/**
 * At most `limit` records of jobs that have not ended, the least recently seen going first: a
 * record is about 1.5 KB, and a miss costs only the read the cache saves.
 */
export function createRecordCache(limit = 5_000): RecordCache {
  const kept = new Map<string, Versioned<AssignmentRecord>>();
  return {
    get: (id) => kept.get(id),
    note(seen) {
      const id = seen.value.id;
      const before = kept.get(id);
      if (before && before.revision > seen.revision) return;
      kept.delete(id);
      // An ended record is seldom changed again (a repeated completion reads it): the cache holds
      // the jobs that live, not every job this isolate saw.
      if (TERMINAL.has(seen.value.state)) return;
      kept.set(id, seen);
      if (kept.size > limit) kept.delete(kept.keys().next().value!);
    },
  };
}
