// The orphan sweep's decision for one listed cloud workload (a Hetzner server, an EC2 instance), a
// pure function of what the sweep read: its age, its pool, the driver's note of it and its
// assignment's record. Shared by the cloud drivers, whose sweeps list and delete.

/** What the decision reads of a listed workload. */
export interface Workload {
  /** When it was created (ISO time). */
  created: string;
  /** Its pool, by its label or tag. */
  pool: string | undefined;
}

/** A workload not yet noted (its create answered, its note not yet written) is left this long. */
export const ORPHAN_GRACE_MS = 10 * 60_000;
/** The age cap of a workload of no pool (the pools' default maxLifetimeMs). */
export const DEFAULT_LIFETIME_MS = 6 * 3_600_000;

export type SweepVerdict = { delete: false; adopt?: true } | { delete: true; reason: string };

/** What the sweep knows of a listed workload's assignment. */
export interface Known {
  id: string;
  /**
   * "noted": the driver's note names this workload. "adoptable": its label or tag and its note's
   * pending create name it (or, with no note, its label is a plain assignment id), but no note names
   * it yet: its create was answered to a Worker that died. "superseded": the note names another
   * workload (this one's bootstrap was revoked before that one's was issued).
   */
  how: "noted" | "adoptable" | "superseded";
  /** Epoch ms its current assignment began on it: a reused server's job counts from its own start. */
  since?: number | undefined;
}

/**
 * Whether a listed workload goes: a pure decision over what the sweep read. A workload whose label
 * names a live assignment of this deployment is adopted, never deleted as unknown.
 */
export function judgeWorkload(
  w: Workload,
  now: number,
  known: Known | undefined,
  record: { ended: boolean } | undefined,
  lifetimes: ReadonlyMap<string, number>,
): SweepVerdict {
  const created = Date.parse(w.created);
  const age = now - (known && known.how !== "superseded" && known.since !== undefined ? known.since : created);
  const cap = lifetimeOf(w.pool, lifetimes);
  // Its teardown failed (or has not come yet): nothing needs it, whatever its age.
  if (known && record?.ended) return { delete: true, reason: "its assignment has ended" };
  if (!(age >= 0)) return { delete: false };
  if (age > cap + ORPHAN_GRACE_MS) return { delete: true, reason: `older than its lifetime (${Math.round(cap / 60_000)} min)` };
  if (known?.how === "adoptable" && record) return { delete: false, adopt: true };
  // One not (yet) known may be a create whose note is on its way, or whose record is.
  if (!(now - created > ORPHAN_GRACE_MS)) return { delete: false };
  if (!known) return { delete: true, reason: "no assignment of this dispatcher knows it" };
  if (known.how === "superseded") return { delete: true, reason: "another workload runs its assignment" };
  if (!record) return { delete: true, reason: "its assignment is unknown" };
  return { delete: false };
}

/** Its pool's maxLifetimeMs, or the pools' default for a workload of none. */
export function lifetimeOf(pool: string | undefined, lifetimes: ReadonlyMap<string, number>): number {
  return (pool !== undefined && lifetimes.get(pool)) || DEFAULT_LIFETIME_MS;
}

/** Runs the writes a sweep decided (notes of adopted workloads) a batch at a time: never one round trip after another for a long list. */
export async function inBatches(work: readonly (() => Promise<unknown>)[], size = 32): Promise<void> {
  for (let i = 0; i < work.length; i += size) await Promise.all(work.slice(i, i + size).map((w) => w()));
}

/** How many deletes a sweep runs at once (each one connection of the invocation's six). */
export const SWEEP_PARALLEL = 4;

/**
 * Deletes the judged workloads, SWEEP_PARALLEL at once, starting none once `goOn` says no (the
 * tick's time is spent, or a failure stops them all): what is deleted stays deleted. `one` says
 * whether it deleted; a failure leaves that workload to the next tick, and the others go on.
 * Throws the first failure only when nothing was deleted.
 */
export async function deleteEach<T>(items: T[], one: (item: T) => Promise<boolean>, goOn: (failures: readonly unknown[]) => boolean): Promise<number> {
  let deleted = 0;
  const failures: unknown[] = [];
  const next = async (): Promise<void> => {
    for (let item = items.shift(); item !== undefined && goOn(failures); item = items.shift()) {
      try {
        if (await one(item)) deleted++;
      } catch (err) {
        failures.push(err);
      }
    }
  };
  await Promise.all(Array.from({ length: SWEEP_PARALLEL }, next));
  if (failures.length && !deleted) throw failures[0];
  return deleted;
}
