// The durable record of each assignment: what the reference kept in its in-memory claim
// registry, in JetStream KV with compare-and-set transitions.
import type { KV } from "@nats-io/kv";
import { fingerprint, type Assignment } from "../model/assignment.ts";
import { recordKey, type Backend } from "../nats/names.ts";
import { canTransition } from "../model/states.ts";
import { IllegalTransition } from "../model/errors.ts";
export type {
  AssignmentRecord,
  ForgeBindingPart,
  InterruptPart,
  Interruption,
  PlacementPart,
  RecordCore,
  RunnerPart,
  RunnerRef,
  Standing,
  SwapPart,
  WarmPart,
} from "./record.ts";
import type { AssignmentRecord } from "./record.ts";
import { casUpdateRevision, casWrite, readJson, type Versioned } from "./kv.ts";
import type { RecordCache } from "./record-cache.ts";
import { receivedRecord, tombstoneRecord, type JobFacts } from "./record-new.ts";
export { recordJob } from "./record-new.ts";

/** Where an assignment's runner runs and its slots are held: its pool's, else its own backend. */
export function placementOf(r: Pick<AssignmentRecord, "backend" | "placement" | "job" | "bound">): { backend: Backend; pool?: string; repository?: string } {
  return { ...(r.placement ?? { backend: r.backend }), ...placedRepository(jobRepository(r)) };
}

/** The repository a runner counts to: its own job's, or the one a warm runner was given (Forgejo's `bound`). */
export function jobRepository(r: Pick<AssignmentRecord, "job" | "bound">): string | undefined {
  return r.job?.repository ?? r.bound?.repository;
}

/** A job's repository as a placement carries it (lower case): a release gives its QUOTAS places back. */
export function placedRepository(repository: string | undefined): { repository?: string } {
  const lower = repository?.toLowerCase();
  return lower?.includes("/") ? { repository: lower } : {};
}

/** Its Gitea runner, where Gitea keeps it; undefined when none was registered. */
export function runnerAt(r: AssignmentRecord): { id: number; scope?: string } | undefined {
  return r.runner ? { id: r.runner.id, ...(r.runner.scope ? { scope: r.runner.scope } : {}) } : undefined;
}

export interface OfferResult {
  result: "new" | "same" | "conflict";
  record: AssignmentRecord;
  revision: number;
}

export type Transition = (record: AssignmentRecord) => AssignmentRecord | undefined;

/** Assignment records. Offer is idempotent for equal content and reports a conflict otherwise. */
export interface RecordStore {
  /** `facts`: what the forge told of its job beside the assignment, kept when this offer makes the record. */
  offer(assignment: Assignment, facts?: JobFacts): Promise<OfferResult>;
  /** Leaves a terminated tombstone for an id that has no record; returns null when one exists. */
  tombstone(id: string, backend: Backend, reason: string, job?: AssignmentRecord["job"]): Promise<AssignmentRecord | null>;
  get(id: string): Promise<AssignmentRecord | null>;
  /** Applies `change` atomically; returns the record after it, or null when there is none. */
  update(id: string, change: Transition): Promise<AssignmentRecord | null>;
  /**
   * The record as the bucket's leader has it. Other reads may be answered by any replica, and one
   * that lags (a node just restarted) shows an older record: fine for most decisions, not for
   * the one to register a runner.
   */
  getFromLeader(id: string): Promise<Versioned<AssignmentRecord> | null>;
  /**
   * Records of many assignments in one request. Those in `firstDeliveries` (their messages'
   * first deliveries) are answered by this isolate's own offer of them, made moments ago, where
   * there is one (record-cache.ts); the rest, and any whose record was changed since, are read.
   */
  getMany(ids: readonly string[], firstDeliveries?: ReadonlySet<string>): Promise<Map<string, Versioned<AssignmentRecord>>>;
  /**
   * `id`'s message was published again here (a turn given): the record this isolate last saw of
   * it answers that message's first delivery, as an offer's does (getMany's `firstDeliveries`).
   */
  republished(id: string): void;
  /**
   * The records of `ids` this isolate keeps, at whatever revision it last saw: only for what a
   * record never changes (its job, its repository). The rest are not in the map: the caller reads them.
   */
  kept(ids: readonly string[]): Map<string, AssignmentRecord>;
  /** Like update, but first tries one write at the revision the caller already read; tells the revision after. */
  updateFrom(known: Versioned<AssignmentRecord>, change: Transition): Promise<Versioned<AssignmentRecord> | null>;
}

export async function contentHash(assignment: Assignment): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(fingerprint(assignment)));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Which life of an id a record is: its creation time, in base 36, and how many of its runners
 * were replaced after an interruption. An id used again after its record expired gets another,
 * and so does a replacement runner: the claim tokens of the ones before are refused (claimToken).
 */
export function incarnationOf(record: { receivedAt: string; replaced?: number | undefined }): string {
  const base = Date.parse(record.receivedAt).toString(36);
  return record.replaced ? `${base}r${record.replaced}` : base;
}

/** Whether content of hash `hash` is the assignment `record` stands for (a tombstone stands for any). */
export function sameContent(record: AssignmentRecord, hash: string): boolean {
  return record.tombstone === true || record.contentHash === hash;
}

export function createRecordStore(
  kv: KV,
  now: () => number,
  readMany: (keys: string[]) => Promise<Map<string, Versioned<AssignmentRecord>>>,
  /** The same bucket bound without direct gets: reads go to its leader. */
  leaderKv: KV = kv,
  /** What this isolate saw of the bucket's records (record-cache.ts): `update` first writes at its revision. */
  cache?: RecordCache,
): RecordStore {
  const seen = <V extends Versioned<AssignmentRecord> | null>(v: V): V => {
    if (v) cache?.note(v);
    return v;
  };
  const iso = () => new Date(now()).toISOString();
  // Every write of a changed state is a transition of the machine (model/states.ts), or is refused unwritten.
  const checked =
    (change: Transition): Transition =>
    (current) => {
      const next = change(current);
      if (next && !canTransition(current.state, next.state))
        throw new IllegalTransition(`assignment ${current.id}: no transition from ${current.state} to ${next.state}`);
      return next;
    };
  const updateVersioned = async (id: string, unchecked: Transition): Promise<Versioned<AssignmentRecord> | null> => {
    const change = checked(unchecked);
    const { result, revision } = await casUpdateRevision<AssignmentRecord, AssignmentRecord | null>(
      kv,
      recordKey(id),
      (current) => {
        if (!current) return { value: undefined, result: null };
        const next = change(current.value);
        if (!next) return { value: undefined, result: current.value };
        const stamped = { ...next, updatedAt: iso() };
        return { value: stamped, result: stamped };
      },
      { leader: leaderKv },
    );
    return seen(result && revision !== undefined ? { value: result, revision } : null);
  };
  /** One write of `next` at the revision of `known`: the record after, or null when another writer came first. */
  const writeAt = async (known: Versioned<AssignmentRecord>, next: AssignmentRecord): Promise<Versioned<AssignmentRecord> | null> => {
    const stamped = { ...next, updatedAt: iso() };
    const written = await casWrite(kv, recordKey(known.value.id), stamped, known.revision);
    return written === null ? null : seen({ value: stamped, revision: written });
  };
  /**
   * One write at the revision the cache keeps, where the change applies to that record; null when
   * it does not (no change, another writer since, a change the machine refuses from there): the
   * caller then reads the record, as without the cache.
   */
  const updateCached = async (id: string, change: Transition): Promise<Versioned<AssignmentRecord> | null> => {
    const kept = cache?.get(id);
    if (!kept) return null;
    let next: AssignmentRecord | undefined;
    try {
      next = change(kept.value);
    } catch (err) {
      if (err instanceof IllegalTransition) return null;
      throw err;
    }
    return next ? writeAt(kept, next) : null;
  };
  const offer = async (assignment: Assignment, facts?: JobFacts): Promise<OfferResult> => {
    const hash = await contentHash(assignment);
    const { result, revision } = await casUpdateRevision<AssignmentRecord, Omit<OfferResult, "revision">>(
      kv,
      recordKey(assignment.id),
      (current) => {
        if (current) return { value: undefined, result: { result: sameContent(current.value, hash) ? "same" : "conflict", record: current.value } };
        const record = receivedRecord(assignment, hash, iso(), facts);
        return { value: record, result: { result: "new", record } };
      },
      { assumeAbsent: true, leader: leaderKv },
    );
    seen({ value: result.record, revision: revision! });
    return { ...result, revision: revision! };
  };
  return {
    offer(assignment, facts) {
      const made = offer(assignment, facts);
      // Never rejects: a failed offer only answers no first delivery.
      cache?.offering(
        assignment.id,
        made.then(
          ({ record, revision }) => ({ value: record, revision }),
          () => null,
        ),
        now(),
      );
      return made;
    },
    kept(ids) {
      return new Map(
        ids.flatMap((id) => {
          const v = cache?.get(id);
          return v ? [[id, v.value] as const] : [];
        }),
      );
    },
    republished(id) {
      const kept = cache?.get(id);
      if (kept) cache?.offering(id, Promise.resolve(kept), now());
    },
    async tombstone(id, backend, reason, job) {
      const { result } = await casUpdateRevision<AssignmentRecord, AssignmentRecord | null>(
        kv,
        recordKey(id),
        (current) => {
          if (current) return { value: undefined, result: null };
          const record = tombstoneRecord(id, backend, reason, iso(), job);
          return { value: record, result: record };
        },
        { assumeAbsent: true, leader: leaderKv },
      );
      return result;
    },
    async get(id) {
      return seen(await readJson<AssignmentRecord>(kv, recordKey(id)))?.value ?? null;
    },
    getFromLeader: async (id) => seen(await readJson<AssignmentRecord>(leaderKv, recordKey(id))),
    async update(id, unchecked) {
      const change = checked(unchecked);
      return ((await updateCached(id, change)) ?? (await updateVersioned(id, unchecked)))?.value ?? null;
    },
    async getMany(ids, firstDeliveries) {
      const t = now();
      const offered = ids.map((id) => (firstDeliveries?.has(id) ? cache?.takeOffered(id, t) : undefined));
      const toRead = ids.filter((_, i) => !offered[i]);
      const [read, answered] = await Promise.all([
        toRead.length ? readMany(toRead.map(recordKey)) : new Map<string, Versioned<AssignmentRecord>>(),
        Promise.all(offered.map((o) => o ?? Promise.resolve(undefined))),
      ]);
      // An offer that failed, or a record changed since: read after all (rare: one round trip more).
      const stale = ids.filter((_, i) => offered[i] && !answered[i]);
      const late = stale.length ? await readMany(stale.map(recordKey)) : new Map<string, Versioned<AssignmentRecord>>();
      for (const v of [...read.values(), ...late.values()]) seen(v);
      const all = [...read.values(), ...late.values(), ...answered.filter((v) => v !== undefined)];
      return new Map(all.map((v) => [v.value.id, v]));
    },
    async updateFrom(known, unchecked) {
      const change = checked(unchecked);
      const next = change(known.value);
      if (!next) return known;
      return (await writeAt(known, next)) ?? updateVersioned(known.value.id, unchecked);
    },
  };
}
