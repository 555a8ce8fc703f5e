// Live runners per owner and per repository, for QUOTAS limits that hold at every instant across
// isolates: one record per owner and one per repository in the records bucket, each the list of
// the assignments holding a runner there, changed only by compare-and-set. A runner takes its
// owner's place, then its repository's, and gives the first back when the second is refused, as
// a pool's slot and its backend's are taken (state/admission.ts). A place ends when its runner is
// released, or, if that release is lost, after LEASE_TTL_MS as a slot does. An owner's places are
// kept whenever a limit applies (they count the owner's live runners); a repository's only under a
// repository limit. Each record's latest revision this isolate saw is kept
// (`kept`): a change is first written at it without a read, and made from a fresh read when that
// write fails (another writer since) or when the change would write nothing, since "already held"
// or "full" must not be told from a copy that may be stale.
import type { KV } from "@nats-io/kv";
import { subjectToken } from "../nats/names.ts";
import { casUpdateRevision, isWrongLastSequence, type Versioned } from "./kv.ts";

/** Holders as [assignment id, until epoch ms] pairs: ids are keys of no object (an id may be "constructor"). */
export interface Holders {
  holders: [string, number][];
}

/** The limits that apply to a job: an absent one is not kept. */
export interface PlaceLimits {
  owner?: number | undefined;
  repository?: number | undefined;
}

export interface QuotaLedger {
  /**
   * Takes a place for `id` under its owner's and its repository's limits (undefined: none). True
   * when it holds both (already, or now); false, holding neither, when either is at its limit.
   */
  take(owner: string, repository: string, id: string, limits: PlaceLimits): Promise<boolean>;
  /**
   * Gives `id`'s places back under the limits that apply now (both when none are given); one it
   * does not hold is ignored. A place kept under a limit a redeploy removed ends with its lease.
   */
  release(owner: string, repository: string, id: string, limits?: PlaceLimits): Promise<void>;
  /** Live places per owner, of the owners asked about (one request). */
  held(owners: readonly string[]): Promise<Map<string, number>>;
}

export const QUOTA_PREFIX = "q";
const ownerKey = (owner: string) => `${QUOTA_PREFIX}.o.${subjectToken(owner)}`;
const repositoryKey = (repository: string) => `${QUOTA_PREFIX}.r.${repository.split("/").map(subjectToken).join(".")}`;

export function createQuotaLedger(
  kv: KV,
  readMany: (keys: string[]) => Promise<Map<string, { value: Holders }>>,
  leaseTtlMs: number,
  now: () => number,
  kept: Map<string, Versioned<Holders>> = new Map(),
): QuotaLedger {
  const live = (h: Holders | undefined) => (h?.holders ?? []).filter(([, until]) => until > now());
  const remember = (key: string, seen: Versioned<Holders> | undefined) => {
    const before = kept.get(key);
    if (!seen) kept.delete(key);
    else if (!before || before.revision < seen.revision) kept.set(key, seen);
  };
  type Change<R> = (current: Versioned<Holders> | null) => { value: Holders | undefined; result: R };
  /** A compare-and-set of `key`: first at the kept revision when the change writes, else from a read. */
  const cas = async <R>(key: string, change: Change<R>): Promise<R> => {
    const known = kept.get(key);
    const first = known && change(known);
    if (known && first?.value) {
      try {
        remember(key, { value: first.value, revision: await kv.update(key, new TextEncoder().encode(JSON.stringify(first.value)), known.revision) });
        return first.result;
      } catch (err) {
        if (!isWrongLastSequence(err)) throw err;
      }
    }
    const last: { seen?: Versioned<Holders> | null; wrote?: Holders | undefined } = {};
    const { result, revision } = await casUpdateRevision<Holders, R>(kv, key, (current) => {
      const c = change(current);
      Object.assign(last, { seen: current, wrote: c.value });
      return c;
    });
    const value = last.wrote ?? last.seen?.value;
    remember(key, revision !== undefined && value ? { value, revision } : undefined);
    return result;
  };
  /** Adds `id` under `key` if below `limit` (Infinity: none); "held" if it was there already. */
  const add = (key: string, id: string, limit: number) =>
    cas<"taken" | "held" | "full">(key, (current) => {
      const holders = live(current?.value);
      if (holders.some(([h]) => h === id)) return { value: undefined, result: "held" };
      if (holders.length >= limit) return { value: undefined, result: "full" };
      return { value: { holders: [...holders, [id, now() + leaseTtlMs]] }, result: "taken" };
    });
  const remove = (key: string, id: string) =>
    cas<null>(key, (current) => {
      const holders = live(current?.value);
      return { value: current?.value.holders.some(([h]) => h === id) ? { holders: holders.filter(([h]) => h !== id) } : undefined, result: null };
    });
  return {
    async take(owner, repository, id, limits) {
      const first = await add(ownerKey(owner), id, limits.owner ?? Infinity);
      if (first === "full") return false;
      if (limits.repository === undefined || (await add(repositoryKey(repository), id, limits.repository)) !== "full") return true;
      if (first === "taken") await remove(ownerKey(owner), id);
      return false;
    },
    async release(owner, repository, id, limits) {
      await Promise.all([remove(ownerKey(owner), id), ...(!limits || limits.repository !== undefined ? [remove(repositoryKey(repository), id)] : [])]);
    },
    async held(owners) {
      const found = await readMany(owners.map(ownerKey));
      return new Map(owners.map((o) => [o, live(found.get(ownerKey(o))?.value).length]));
    },
  };
}
