// The cache's upkeep on the cron tick: reservations never committed (a job that died, a Worker
// killed mid-upload or mid-commit) go with their upload and any object their commit made; a
// repository over CACHE_REPO_BYTES loses its least recently used entries; and an object no entry
// names (its entry expired: the records bucket's TTL is the cache's 7 days unused) is deleted.
// Each entry goes before its object, so that no lookup ever finds an entry without its bytes.
import { blobKey } from "./blobs.ts";
import type { CacheEntry } from "./index-store.ts";
import type { CacheDeps } from "./service.ts";

/** A reservation not committed within this is taken for dead: the longest upload the limits allow takes far less. */
export const STALE_RESERVATION_MS = 60 * 60_000;
/** One whose upload never started (a Worker killed between its reserve and its start) holds its name this long only. */
export const UNSTARTED_RESERVATION_MS = 5 * 60_000;
/** An object younger than this is never taken for an orphan: its entry may be on its way. */
export const ORPHAN_GRACE_MS = 10 * 60_000;

export interface Upkeep {
  stale: number;
  evicted: { repo: string; bytes: number }[];
  orphans: number;
  /** Per repository looked at: its committed entries and their bytes, after the upkeep. */
  stored: { repo: string; entries: number; bytes: number }[];
}

/** Which committed entries go so that the repository fits its quota: the least recently used first. */
export function overQuota(entries: readonly CacheEntry[], repoBytes: number): CacheEntry[] {
  const committed = entries.filter((e) => e.state === "committed").sort((a, b) => a.usedAt - b.usedAt || a.id - b.id);
  let total = committed.reduce((sum, e) => sum + (e.size ?? 0), 0);
  const out: CacheEntry[] = [];
  for (const e of committed) {
    if (total <= repoBytes) break;
    out.push(e);
    total -= e.size ?? 0;
  }
  return out;
}

/** Removes an entry, then its object and its upload: what fails is found again at the next tick. */
async function drop(d: CacheDeps, e: CacheEntry): Promise<void> {
  await d.index.remove(e);
  if (e.state === "reserved" && e.upload) await d.blobs.abort(blobKey(e.repo, e.id), e.upload).catch(() => undefined);
  await d.blobs.remove([blobKey(e.repo, e.id)]);
}

export async function maintainCache(d: CacheDeps, goOn: () => boolean = () => true): Promise<Upkeep> {
  const now = d.now();
  const upkeep: Upkeep = { stale: 0, evicted: [], orphans: 0, stored: [] };
  for (const repo of await d.index.repos()) {
    if (!goOn()) return upkeep;
    const entries = await d.index.all(repo);
    const stale = (x: CacheEntry) => now - x.reservedAt > (x.upload ? STALE_RESERVATION_MS : UNSTARTED_RESERVATION_MS);
    for (const e of entries.filter((x) => x.state === "reserved" && stale(x))) {
      await drop(d, e);
      upkeep.stale++;
    }
    const evicted = overQuota(entries, d.limits.repoBytes);
    for (const e of evicted) {
      await drop(d, e);
      upkeep.evicted.push({ repo, bytes: e.size ?? 0 });
    }
    const kept = entries.filter((e) => e.state === "committed" && !evicted.includes(e));
    upkeep.stored.push({ repo, entries: kept.length, bytes: kept.reduce((sum, e) => sum + (e.size ?? 0), 0) });
  }
  upkeep.orphans = await sweepOrphans(d, now, goOn);
  return upkeep;
}

/** Objects whose entry is gone, past the grace: deleted, a page at a time. */
async function sweepOrphans(d: CacheDeps, now: number, goOn: () => boolean): Promise<number> {
  let removed = 0;
  let cursor: string | undefined;
  do {
    if (!goOn()) break;
    const page = await d.blobs.list("cache/", cursor);
    cursor = page.cursor;
    const byRepo = new Map<string, { key: string; id: number }[]>();
    for (const { key, uploaded } of page.keys) {
      const m = /^cache\/(.+)\/(\d+)$/.exec(key);
      if (!m || now - uploaded < ORPHAN_GRACE_MS) continue;
      byRepo.set(m[1]!, [...(byRepo.get(m[1]!) ?? []), { key, id: Number(m[2]) }]);
    }
    for (const [repo, objects] of byRepo) {
      const known = await d.index.entries(
        repo,
        objects.map((o) => o.id),
      );
      const gone = objects.filter((o) => !known.has(o.id)).map((o) => o.key);
      if (gone.length) await d.blobs.remove(gone);
      removed += gone.length;
    }
  } while (cursor);
  return removed;
}
