// Live runners per owner and per repository, for QUOTAS limits that hold at every instant across
// isolates: one record per owner and one per repository in the records bucket, each the list of
// the assignments holding a runner there, changed only by compare-and-set. A runner takes its
// owner's place, then its repository's, and gives the first back when the second is refused, as
// a pool's slot and its backend's are taken (state/admission.ts). A place ends when its runner is
// released, or, if that release is lost, after LEASE_TTL_MS as a slot does.
import type { KV } from "@nats-io/kv";
import { subjectToken } from "../nats/names.ts";
import { casUpdateRevision } from "./kv.ts";

/** Holders as [assignment id, until epoch ms] pairs: ids are keys of no object (an id may be "constructor"). */
interface Holders {
  holders: [string, number][];
}

export interface QuotaLedger {
  /**
   * Takes a place for `id` under its owner's and its repository's limits (undefined: none). True
   * when it holds both (already, or now); false, holding neither, when either is at its limit.
   */
  take(owner: string, repository: string, id: string, limits: { owner?: number; repository?: number }): Promise<boolean>;
  /** Gives `id`'s places back; one it does not hold is ignored. */
  release(owner: string, repository: string, id: string): Promise<void>;
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
): QuotaLedger {
  const live = (h: Holders | undefined) => (h?.holders ?? []).filter(([, until]) => until > now());
  /** Adds `id` under `key` if below `limit`; "held" if it was there already. */
  const add = async (key: string, id: string, limit: number | undefined): Promise<"taken" | "held" | "full"> => {
    const { result } = await casUpdateRevision<Holders, "taken" | "held" | "full">(kv, key, (current) => {
      const holders = live(current?.value);
      if (holders.some(([h]) => h === id)) return { value: undefined, result: "held" };
      if (limit !== undefined && holders.length >= limit) return { value: undefined, result: "full" };
      return { value: { holders: [...holders, [id, now() + leaseTtlMs]] }, result: "taken" };
    });
    return result;
  };
  const remove = async (key: string, id: string) => {
    await casUpdateRevision<Holders, null>(kv, key, (current) => {
      const holders = live(current?.value);
      return { value: current?.value.holders.some(([h]) => h === id) ? { holders: holders.filter(([h]) => h !== id) } : undefined, result: null };
    });
  };
  return {
    async take(owner, repository, id, limits) {
      const first = await add(ownerKey(owner), id, limits.owner);
      if (first === "full") return false;
      if ((await add(repositoryKey(repository), id, limits.repository)) !== "full") return true;
      if (first === "taken") await remove(ownerKey(owner), id);
      return false;
    },
    async release(owner, repository, id) {
      await Promise.all([remove(ownerKey(owner), id), remove(repositoryKey(repository), id)]);
    },
    async held(owners) {
      const found = await readMany(owners.map(ownerKey));
      return new Map(owners.map((o) => [o, live(found.get(ownerKey(o))?.value).length]));
    },
  };
}
