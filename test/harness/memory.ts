// In-memory fakes of the narrow state interfaces, for fast unit tests of policy.
import type { QuotaLedger } from "../../src/state/quota-ledger.ts";
import type { AssignmentRecord, RecordStore } from "../../src/state/records.ts";
import { canTransition } from "../../src/model/states.ts";
import { IllegalTransition } from "../../src/model/errors.ts";

/** An in-memory QuotaLedger: places per owner and per repository, each a set of ids. */
export function memoryLedger(): QuotaLedger & { places: Map<string, Set<string>> } {
  const places = new Map<string, Set<string>>();
  const at = (key: string) => places.get(key) ?? places.set(key, new Set()).get(key)!;
  return {
    places,
    async take(owner, repository, id, limits) {
      const o = at(`o:${owner}`);
      const r = at(`r:${repository}`);
      const hadOwner = o.has(id);
      if (!hadOwner && o.size >= (limits.owner ?? Infinity)) return false;
      o.add(id);
      if (!r.has(id) && r.size >= (limits.repository ?? Infinity)) {
        if (!hadOwner) o.delete(id);
        return false;
      }
      r.add(id);
      return true;
    },
    async release(owner, repository, id) {
      at(`o:${owner}`).delete(id);
      at(`r:${repository}`).delete(id);
    },
    async held(owners) {
      return new Map(owners.map((o) => [o, at(`o:${o}`).size]));
    },
  };
}

/**
 * In-memory records behind RecordStore's compare-and-set `update`, refusing (like the real
 * store) any change of state the machine does not have. `between(id)` runs once before the next
 * write of `id`, after its read: a concurrent writer that wins the race (the write is then
 * tried again on what it wrote).
 */
export function memoryRecords(initial: AssignmentRecord[] = []) {
  const rows = new Map(initial.map((r) => [r.id, structuredClone(r)]));
  const pending = new Map<string, (r: AssignmentRecord) => AssignmentRecord>();
  let writes = 0;
  const records: Pick<RecordStore, "get" | "update" | "updateFrom"> = {
    async get(id) {
      return structuredClone(rows.get(id) ?? null);
    },
    async update(id, change) {
      for (;;) {
        const read = rows.get(id);
        if (!read) return null;
        const next = change(structuredClone(read));
        const race = pending.get(id);
        if (race) {
          pending.delete(id);
          rows.set(id, race(structuredClone(read)));
          continue;
        }
        if (!next) return structuredClone(read);
        if (!canTransition(read.state, next.state)) throw new IllegalTransition(`assignment ${id}: no transition from ${read.state} to ${next.state}`);
        writes++;
        rows.set(id, structuredClone(next));
        return structuredClone(next);
      }
    },
    // As the pass writes: from the record it read, here the row as it is now (a race is `between`'s).
    async updateFrom(known, change) {
      const value = await records.update(known.value.id, change);
      return value ? { value, revision: known.revision + 1 } : null;
    },
  };
  return {
    records,
    rows,
    writes: () => writes,
    between(id: string, write: (r: AssignmentRecord) => AssignmentRecord) {
      pending.set(id, write);
    },
  };
}

/**
 * A record as a test writes it by hand, standing for another writer (or a stored record of
 * another shape): the types of a record's standing are not asked of it.
 */
export const written = (r: object): AssignmentRecord => r as AssignmentRecord;
