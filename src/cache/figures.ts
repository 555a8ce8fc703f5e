// What the cache counts, per repository, for /metrics and the status page: restores that hit and
// missed, bytes saved and served, refusals by reason, evictions; and, as the cron tick's upkeep
// last found them, the entries and bytes stored. One KV record per repository, changed by
// compare-and-set after the answer (a lost count is a missed figure, never a failed request).
import type { KV } from "@nats-io/kv";
import { CACHE_FIGURES_PREFIX, cacheFiguresKey, idOfToken } from "../nats/names.ts";
import type { NatsHandle } from "../nats/connection.ts";
import { casUpdate, readAllUnder } from "../state/kv.ts";
import type { RefusalReason } from "./service.ts";

export interface CacheFigures {
  hits: number;
  misses: number;
  /** Bytes of the entries committed, and of the downloads answered. */
  bytesIn: number;
  bytesOut: number;
  evictions: number;
  refused: Partial<Record<RefusalReason, number>>;
  /** At the latest upkeep: committed entries and their bytes. */
  entries: number;
  bytesStored: number;
}

export type CacheCount = Partial<Omit<CacheFigures, "refused" | "entries" | "bytesStored">> & {
  refused?: RefusalReason;
  /** The upkeep's count of what is stored, which replaces the last one. */
  stored?: { entries: number; bytes: number };
};

export const emptyFigures = (): CacheFigures => ({ hits: 0, misses: 0, bytesIn: 0, bytesOut: 0, evictions: 0, refused: {}, entries: 0, bytesStored: 0 });

/** `f` with `c` added. Pure. */
export function addCount(f: CacheFigures, c: CacheCount): CacheFigures {
  const refused = { ...f.refused };
  if (c.refused) refused[c.refused] = (refused[c.refused] ?? 0) + 1;
  return {
    hits: f.hits + (c.hits ?? 0),
    misses: f.misses + (c.misses ?? 0),
    bytesIn: f.bytesIn + (c.bytesIn ?? 0),
    bytesOut: f.bytesOut + (c.bytesOut ?? 0),
    evictions: f.evictions + (c.evictions ?? 0),
    refused,
    entries: c.stored?.entries ?? f.entries,
    bytesStored: c.stored?.bytes ?? f.bytesStored,
  };
}

export async function countCache(kv: KV, repo: string, c: CacheCount): Promise<void> {
  await casUpdate<CacheFigures, void>(kv, cacheFiguresKey(repo), (cur) => ({ value: addCount({ ...emptyFigures(), ...cur?.value }, c), result: undefined }));
}

/** Every repository's figures, in one listing and one batch read. */
export async function readCacheFigures(handle: NatsHandle, bucket: string): Promise<{ repository: string; figures: CacheFigures }[]> {
  const read = await readAllUnder<CacheFigures>(handle, bucket, CACHE_FIGURES_PREFIX);
  return [...read]
    .map(([key, v]) => ({ repository: idOfToken(key.slice(CACHE_FIGURES_PREFIX.length + 1)), figures: { ...emptyFigures(), ...v.value } }))
    .sort((a, b) => a.repository.localeCompare(b.repository));
}
