// Which assignment holds each warm position of each pool. A pool that wants N warm runners has
// positions 0…N-1; each points at the assignment of the runner kept warm there, and is changed only
// by compare-and-set. A position is filled only while it is below the pool's target, so however
// many isolates maintain a pool at once, at most N runners are warm (idle or booting) in it: two
// that see the same vacancy write the same key, and one of them loses. Kept in the records bucket
// under their own prefix, so that one request lists every pool's.
import type { KV } from "@nats-io/kv";
import { warmKey, WARM_PREFIX } from "../nats/names.ts";
import type { NatsHandle } from "../nats/connection.ts";
import { isWrongLastSequence, readAllUnder } from "./kv.ts";

export interface WarmSlot {
  pool: string;
  index: number;
  /** The assignment whose runner is warm here. */
  id: string;
  /** When it was pointed here (ISO time). */
  since: string;
  revision: number;
  /** A warm runner by reuse: the parked server it is rebuilt on, and when it is given up (epoch ms). */
  reuse?: { server: number; until: number };
}

/** The warm positions of every pool, changed only by compare-and-set. */
export interface WarmSlots {
  /** Every position of every pool, by pool. */
  list(): Promise<Map<string, WarmSlot[]>>;
  /**
   * Points `index` at `id` (a runner by reuse: with its server and end) if it is still at
   * `revision` (0: the position is empty): the position's revision after, null when another writer came first.
   */
  put(pool: string, index: number, id: string, revision: number, reuse?: WarmSlot["reuse"]): Promise<number | null>;
  /** Empties a position if it is still at `revision`. */
  clear(pool: string, index: number, revision: number): Promise<boolean>;
}

export function createWarmSlots(handle: NatsHandle, kv: KV, bucket: string, now: () => number): WarmSlots {
  // A compare-and-set write: its result, or null when another writer came first.
  const cas = async <T>(fn: () => Promise<T>): Promise<T | null> => {
    try {
      return await fn();
    } catch (err) {
      if (isWrongLastSequence(err)) return null;
      throw err;
    }
  };
  return {
    async list() {
      const found = await readAllUnder<Omit<WarmSlot, "revision">>(handle, bucket, WARM_PREFIX);
      const byPool = new Map<string, WarmSlot[]>();
      for (const { value, revision } of found.values()) {
        const slots = byPool.get(value.pool) ?? [];
        slots.push({ ...value, revision });
        byPool.set(value.pool, slots);
      }
      for (const slots of byPool.values()) slots.sort((a, b) => a.index - b.index);
      return byPool;
    },
    put(pool, index, id, revision, reuse) {
      const value = new TextEncoder().encode(JSON.stringify({ pool, index, id, since: new Date(now()).toISOString(), ...(reuse ? { reuse } : {}) }));
      return cas(() => (revision === 0 ? kv.create(warmKey(pool, index), value) : kv.update(warmKey(pool, index), value, revision)));
    },
    async clear(pool, index, revision) {
      return (await cas(() => kv.delete(warmKey(pool, index), { previousSeq: revision }))) !== null;
    },
  };
}
