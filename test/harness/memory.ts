// In-memory fakes of the narrow state interfaces, for fast unit tests of policy.
import type { QuotaLedger } from "../../src/state/quota-ledger.ts";

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
