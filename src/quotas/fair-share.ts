// Who gets the next free slot of a full backend, as a pure function of what is waiting and what
// each owner and repository holds: weighted max-min between owners (the fewest runners for its
// weight first), then between the owner's repositories (the fewest runners first), first in, first
// out within a repository. Ties go to the job that waited longest. An owner or repository at its
// limit (QUOTAS) is passed over: its jobs wait (quota_wait) without holding back anyone else's.

/** A waiting job: the oldest of its repository, as the wait set lists it. */
export interface Waiting {
  id: string;
  owner: string;
  repository: string;
  /** Its place in the wait set: lower came first. */
  seq: number;
}

export interface Shares {
  /** The oldest waiting job of each repository that has one. */
  heads: readonly Waiting[];
  /** Live runners per owner and per repository (lower case). */
  heldByOwner: ReadonlyMap<string, number>;
  heldByRepository: ReadonlyMap<string, number>;
}

export interface ShareRules {
  weight(owner: string): number;
  limits(repository: string): { owner?: number; repository?: number };
}

/** Whether a head may take a slot now: neither its owner nor its repository is at its limit. */
export function withinLimits(s: Shares, rules: ShareRules, w: Waiting): boolean {
  const limits = rules.limits(w.repository);
  return (s.heldByOwner.get(w.owner) ?? 0) < (limits.owner ?? Infinity) && (s.heldByRepository.get(w.repository) ?? 0) < (limits.repository ?? Infinity);
}

/** The job the next free slot goes to, or undefined when every waiting job is at a limit. */
export function pickNext(s: Shares, rules: ShareRules): Waiting | undefined {
  const open = s.heads.filter((w) => withinLimits(s, rules, w));
  if (!open.length) return undefined;
  const share = (owner: string) => (s.heldByOwner.get(owner) ?? 0) / rules.weight(owner);
  const oldest = (ws: readonly Waiting[]) => Math.min(...ws.map((w) => w.seq));
  const owners = [...new Set(open.map((w) => w.owner))];
  const heads = (owner: string) => open.filter((w) => w.owner === owner);
  owners.sort((a, b) => share(a) - share(b) || oldest(heads(a)) - oldest(heads(b)));
  const mine = [...heads(owners[0]!)];
  mine.sort((a, b) => (s.heldByRepository.get(a.repository) ?? 0) - (s.heldByRepository.get(b.repository) ?? 0) || a.seq - b.seq);
  return mine[0];
}

/** Counts after `w` took a slot. */
export function taken(s: Shares, w: Waiting): Shares {
  const plus = (m: ReadonlyMap<string, number>, k: string) => new Map(m).set(k, (m.get(k) ?? 0) + 1);
  return { heads: s.heads, heldByOwner: plus(s.heldByOwner, w.owner), heldByRepository: plus(s.heldByRepository, w.repository) };
}

/** `items` in turn order (turnOrder), each read as a job by `whose` (its owner and repository) and `seq` (lower came first). */
export function inTurnOrder<T>(
  items: readonly T[],
  whose: (t: T) => { owner: string; repository: string },
  seq: (t: T) => number,
  s: Shares,
  rules: ShareRules,
): T[] {
  const jobs = items.map((t, i) => ({ ...whose(t), id: String(i), seq: seq(t) }));
  return turnOrder(s, rules, jobs).map((j) => items[Number(j.id)]!);
}

/**
 * The order in which `jobs` (any number per repository) would be given free slots, one by one:
 * each next the one `pickNext` picks among the oldest of each repository, counted as taken before
 * the next pick. Jobs passed over at a limit come last, oldest first (they are refused there).
 */
export function turnOrder(s: Shares, rules: ShareRules, jobs: readonly Waiting[]): Waiting[] {
  const left = [...jobs].sort((a, b) => a.seq - b.seq);
  const order: Waiting[] = [];
  let shares: Shares = { ...s, heads: [] };
  for (;;) {
    const heads = new Map<string, Waiting>();
    for (const w of left) if (!heads.has(w.repository)) heads.set(w.repository, w);
    const next = pickNext({ ...shares, heads: [...heads.values()] }, rules);
    if (!next) break;
    order.push(next);
    left.splice(left.indexOf(next), 1);
    shares = taken(shares, next);
  }
  return [...order, ...left];
}
