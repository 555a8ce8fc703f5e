// QUOTAS limits around admission: a job takes its owner's and repository's places (quota-ledger.ts)
// before a slot, and gives them back when the slot is refused or released. A job with no limit
// that applies costs nothing here.
import type { Admission, Placement } from "../state/admission.ts";
import type { QuotaLedger } from "../state/quota-ledger.ts";
import type { ShareRules } from "./fair-share.ts";
import { ownerOf } from "./config.ts";

const hasLimit = (l: { owner?: number; repository?: number }) => l.owner !== undefined || l.repository !== undefined;

/**
 * Takes the QUOTAS places of a job of `repository` (undefined: none): "taken" (to be given back
 * if no slot follows), "refused" (at a limit), or "none" (no limit applies).
 */
export async function takeQuota(ledger: QuotaLedger, rules: ShareRules, id: string, repository: string | undefined): Promise<"taken" | "refused" | "none"> {
  const at = ownerOf(repository);
  const limits = at ? rules.limits(at.repository) : {};
  if (!at || !hasLimit(limits)) return "none";
  return (await ledger.take(at.owner, at.repository, id, limits)) ? "taken" : "refused";
}

/**
 * Gives a job's QUOTAS places back (held or not): with `rules`, only under the limits that apply
 * to it now (none, nothing to give); without, under both.
 */
export async function releaseQuota(ledger: QuotaLedger, id: string, repository: string | undefined, rules?: ShareRules): Promise<void> {
  const at = ownerOf(repository);
  const limits = at && rules ? rules.limits(at.repository) : undefined;
  if (at && (!limits || hasLimit(limits))) await ledger.release(at.owner, at.repository, id, limits);
}

/** Admission whose releases give QUOTAS places back too (the placement names the repository). */
export function withQuotaRelease(admission: Admission, ledger: QuotaLedger, rules?: ShareRules): Admission {
  const giveBack = async (place: Backend | Placement, ids: string[]) => {
    if (typeof place !== "string" && place.repository) await Promise.all(ids.map((id) => releaseQuota(ledger, id, place.repository, rules)));
  };
  return {
    ...admission,
    async release(place: Backend | Placement, ...ids: string[]) {
      const contended = await admission.release(place, ...ids);
      await giveBack(place, ids);
      return contended;
    },
    async releaseAgain(place: Backend | Placement, ...ids: string[]) {
      await admission.releaseAgain(place, ...ids);
      await giveBack(place, ids);
    },
  };
}

type Backend = Placement["backend"];
