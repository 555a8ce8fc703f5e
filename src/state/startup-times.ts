// Job start-up time per pool (queued → a runner took it), as a Prometheus histogram kept durably:
// one KV entry per pool with its bucket counts, sum and count, changed by compare-and-set when a
// job starts. Every isolate's scrape reads the same entries (one request for every pool), so the
// figures agree wherever /metrics is answered, and the cost does not grow with the number of jobs.
import type { KV } from "@nats-io/kv";
import { startupKey } from "../nats/names.ts";
import type { NatsHandle } from "../nats/connection.ts";
import { casUpdate, readManyJson } from "./kv.ts";
import type { StartVia } from "./record.ts";

/** Upper bounds in seconds, as ARC's gha_job_startup_duration_seconds, fewer of them. */
export const STARTUP_BUCKETS = [1, 2, 3, 5, 8, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 1800, 3600] as const;

/** Cumulative counts per bucket of STARTUP_BUCKETS (Prometheus's `le`), then +Inf as `count`. */
export interface Histogram {
  buckets: number[];
  sum: number;
  count: number;
}

export interface StartupHistogram extends Histogram {
  /** The same start-ups split by how the runner came (record.ts startVia); one observed without is in none. */
  via?: Partial<Record<StartVia, Histogram>>;
  /** Assignments of the pool given up on because their runners never booted (kept in the same entry: one read). */
  bootGiveUps?: number;
  /** Cloud VMs of the pool that did not fetch their launch in time (reconcile/launch-watch.ts). */
  launchesMissed?: number;
}

/** One job's start-up: seconds from queued to a runner taking it, and how that runner came. */
export interface Startup {
  seconds: number;
  via?: StartVia;
}

export interface StartupTimes {
  /** Adds observations to `pool`'s histogram (and its split by via), in one compare-and-set. */
  observe(pool: string, seen: readonly Startup[]): Promise<void>;
  countGiveUp(pool: string): Promise<void>;
  countLaunchMissed(pool: string): Promise<void>;
  read(pools: readonly string[]): Promise<Map<string, StartupHistogram>>;
}

export function emptyHistogram(): StartupHistogram {
  return { buckets: STARTUP_BUCKETS.map(() => 0), sum: 0, count: 0 };
}

export function addObservation<H extends Histogram>(h: H, seconds: number): H {
  const s = Math.max(0, seconds);
  return { ...h, buckets: STARTUP_BUCKETS.map((le, i) => (h.buckets[i] ?? 0) + (s <= le ? 1 : 0)), sum: h.sum + s, count: h.count + 1 };
}

/** `h` with one start-up added to the pool's figures and to its via's. */
export function addStartup(h: StartupHistogram, { seconds, via }: Startup): StartupHistogram {
  const all = addObservation(h, seconds);
  if (!via) return all;
  return { ...all, via: { ...h.via, [via]: addObservation(h.via?.[via] ?? emptyHistogram(), seconds) } };
}

export function createStartupTimes(handle: NatsHandle, kv: KV, bucket: string): StartupTimes {
  return {
    async observe(pool, seen) {
      await casUpdate<StartupHistogram, void>(kv, startupKey(pool), (current) => ({
        value: seen.reduce(addStartup, current?.value ?? emptyHistogram()),
        result: undefined,
      }));
    },
    async countGiveUp(pool) {
      await casUpdate<StartupHistogram, void>(kv, startupKey(pool), (current) => {
        const h = current?.value ?? emptyHistogram();
        return { value: { ...h, bootGiveUps: (h.bootGiveUps ?? 0) + 1 }, result: undefined };
      });
    },
    async countLaunchMissed(pool) {
      await casUpdate<StartupHistogram, void>(kv, startupKey(pool), (current) => {
        const h = current?.value ?? emptyHistogram();
        return { value: { ...h, launchesMissed: (h.launchesMissed ?? 0) + 1 }, result: undefined };
      });
    },
    async read(pools) {
      const found = await readManyJson<StartupHistogram>(handle, bucket, pools.map(startupKey));
      return new Map(
        pools.flatMap((p) => {
          const h = found.get(startupKey(p))?.value;
          return h ? [[p, h] as const] : [];
        }),
      );
    },
  };
}
