// Who uses the runners right now, per owner, at a bounded size: the busiest owners by live
// runners (then by jobs waiting), the rest summed as `other`. Built from what the snapshot reads
// anyway (the slot holders' records and the wait set's counts), so it costs no request.
import { limitsOf, ownerOf, whoseJob, type Quotas } from "../quotas/config.ts";
import { jobRepository, type AssignmentRecord } from "../state/records.ts";

/** What an owner holds and waits for. `-` stands for jobs with no repository, `pool <name>` for a pool's warm runners without a job; `other` for the rest (and an owner named so). */
export interface OwnerSnapshot {
  owner: string;
  /** Slots its jobs hold now, on every backend: runners being provisioned, ready or running. */
  runners: number;
  /** Its jobs in the wait set, waiting for a free slot (capacity_wait). */
  waitingForCapacity: number;
  /** Its jobs in the wait set held back by a QUOTAS limit (quota_wait). */
  waitingForQuota: number;
}

export const OTHER_OWNERS = "other";

/**
 * Rows for the `top` busiest owners and one `other` row for the rest (only when there is a rest).
 * A repository's waiting jobs count as quota_wait where `limited` says (atQuotaLimit).
 */
export function ownerRows(
  held: readonly AssignmentRecord[],
  waiting: ReadonlyMap<string, number>,
  limited: (repository: string) => boolean,
  top: number,
): OwnerSnapshot[] {
  const rows = new Map<string, OwnerSnapshot>();
  const row = (owner: string) => rows.get(owner) ?? rows.set(owner, { owner, runners: 0, waitingForCapacity: 0, waitingForQuota: 0 }).get(owner)!;
  for (const r of held) row(ownerOfRunner(r)).runners++;
  for (const [repository, count] of waiting) {
    const r = row(whoseJob(repository).owner);
    if (limited(repository)) r.waitingForQuota += count;
    else r.waitingForCapacity += count;
  }
  // An owner actually named "other" is always counted in the rest: the row stays unambiguous.
  const named = rows.get(OTHER_OWNERS);
  rows.delete(OTHER_OWNERS);
  const sorted = [...rows.values()].sort(
    (a, b) => b.runners - a.runners || b.waitingForCapacity + b.waitingForQuota - (a.waitingForCapacity + a.waitingForQuota) || (a.owner < b.owner ? -1 : 1),
  );
  const rest = [...sorted.slice(top), ...(named ? [named] : [])];
  if (!rest.length) return sorted;
  const other: OwnerSnapshot = { owner: OTHER_OWNERS, runners: 0, waitingForCapacity: 0, waitingForQuota: 0 };
  for (const r of rest) {
    other.runners += r.runners;
    other.waitingForCapacity += r.waitingForCapacity;
    other.waitingForQuota += r.waitingForQuota;
  }
  return [...sorted.slice(0, top), other];
}

/**
 * Whose a live runner is: its job's owner, or, for a warm runner without one, its pool
 * (`pool <name>`: no owner name holds a space); `-` for a job with no repository.
 */
function ownerOfRunner(r: AssignmentRecord): string {
  const repository = jobRepository(r);
  if (!repository && r.warm && r.placement?.pool) return `pool ${r.placement.pool}`;
  return whoseJob(repository).owner;
}

/**
 * Whether a repository's jobs are held back by a QUOTAS limit, given the live runners `held`:
 * while its owner or the repository holds as many runners as its limit, what the wait set would
 * say of them if asked now.
 */
export function atQuotaLimit(held: readonly AssignmentRecord[], quotas: Quotas): (repository: string) => boolean {
  const count = new Map<string, number>();
  for (const r of held) {
    const at = ownerOf(jobRepository(r));
    if (!at) continue;
    for (const key of [`o:${at.owner}`, `r:${at.repository}`]) count.set(key, (count.get(key) ?? 0) + 1);
  }
  return (repository) => {
    const at = ownerOf(repository);
    if (!at) return false;
    const limits = limitsOf(quotas, at.repository);
    return (
      (limits.owner !== undefined && (count.get(`o:${at.owner}`) ?? 0) >= limits.owner) ||
      (limits.repository !== undefined && (count.get(`r:${at.repository}`) ?? 0) >= limits.repository)
    );
  };
}
