// Jobs lost with an interrupted runner (after its claim), kept in the records bucket until their
// rerun is asked for, or known to need a person: the to-do list of the tick's rerun step
// (domain/reruns.ts) and what the status page and metrics count. One entry per interrupted
// assignment (create: a second report finds the first); each change is a compare-and-set, so of
// two ticks that read the same entry one moves it on. Entries expire with the bucket (7 days).
import type { KV } from "@nats-io/kv";
import { rerunKey, rerunOfKey, RERUN_PREFIX } from "../nats/names.ts";
import type { NatsHandle } from "../nats/connection.ts";
import { casUpdate, casWrite, isWrongLastSequence, readAllUnder, readJson, type Versioned } from "./kv.ts";

/** Interruptions counted per pool, beside the entries (not under their prefix: listing entries skips them). */
const COUNT_PREFIX = "rr-count";
const countKey = (pool: string) => `${COUNT_PREFIX}.${pool}`;

/**
 * - waiting: its run has not finished, or the rerun was not asked for yet;
 * - asked: the forge took the rerun (or the job was found running again: asked before);
 * - by_hand: this forge cannot rerun a job (Gitea 1.24 and 1.25, Forgejo), or its reruns are used up;
 * - refused: the forge refused the rerun (`reason`).
 */
/** settled: the job or its run was cancelled (a person, a newer push): nothing to rerun. */
export type RerunState = "waiting" | "asked" | "by_hand" | "refused" | "settled";

export interface RerunEntry {
  /** The interrupted assignment. */
  id: string;
  repository: string;
  run: number;
  job: number;
  /** Which execution of the job was lost (1 for its first run; the assignment's job attempt). */
  attempt: number;
  /** Reruns of this job the dispatcher asked for before this execution (MAX_RERUNS counts them). */
  reruns?: number;
  /** The execution its rerun made (its assignment id), once known. */
  next?: string;
  pool?: string;
  /** Where a person finds the job (its page in the forge), for the status page. */
  link?: string;
  since: string;
  state: RerunState;
  askedAt?: string;
  reason?: string;
}

export interface RerunList {
  /** Lists the job once; a second call for the same assignment gives the entry that stands. */
  add(e: RerunEntry): Promise<RerunEntry>;
  get(id: string): Promise<Versioned<RerunEntry> | null>;
  list(): Promise<Versioned<RerunEntry>[]>;
  /** Counts an interruption of a runner of `pool`, before or after its claim (for /metrics and the status page). */
  count(pool: string, when: "before" | "after"): Promise<void>;
  /** Interruptions counted so far, per pool. */
  counts(): Promise<Map<string, { before: number; after: number }>>;
  /** Writes `next` if the entry is still at `revision`: its revision after, or null when another tick moved it first. */
  move(next: RerunEntry, revision: number): Promise<number | null>;
  /** Notes that assignment `next` is the rerun entry `of` asked for, its job's `reruns`th (idempotent). */
  noteRerun(next: string, of: string, reruns: number): Promise<void>;
  /** What noteRerun noted of assignment `id`; null for an execution the dispatcher did not ask for. */
  rerunOf(id: string): Promise<{ of: string; reruns: number } | null>;
}

export function createRerunList(handle: NatsHandle, kv: KV, bucket: string): RerunList {
  const get = (id: string) => readJson<RerunEntry>(kv, rerunKey(id));
  return {
    async add(e) {
      try {
        await kv.create(rerunKey(e.id), JSON.stringify(e));
        return e;
      } catch (err) {
        if (!isWrongLastSequence(err)) throw err;
        return (await get(e.id))?.value ?? e;
      }
    },
    get,
    async list() {
      const found = await readAllUnder<RerunEntry>(handle, bucket, RERUN_PREFIX);
      return [...found.values()].sort((a, b) => a.value.since.localeCompare(b.value.since));
    },
    async count(pool, when) {
      await casUpdate<{ before: number; after: number }, void>(kv, countKey(pool), (cur) => {
        const c = cur?.value ?? { before: 0, after: 0 };
        return { value: { ...c, [when]: c[when] + 1 }, result: undefined };
      });
    },
    async counts() {
      const found = await readAllUnder<{ before: number; after: number }>(handle, bucket, COUNT_PREFIX);
      return new Map([...found].map(([k, v]) => [k.slice(COUNT_PREFIX.length + 1), v.value]));
    },
    async move(next, revision) {
      return casWrite(kv, rerunKey(next.id), next, revision);
    },
    async noteRerun(next, of, reruns) {
      await kv.put(rerunOfKey(next), JSON.stringify({ of, reruns }));
    },
    async rerunOf(id) {
      return (await readJson<{ of: string; reruns: number }>(kv, rerunOfKey(id)))?.value ?? null;
    },
  };
}
