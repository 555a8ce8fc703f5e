// The wait set: jobs that wait for a slot of a full backend (fair share, FAIR_SHARE=on), by turn
// rather than in the consumer's order. JetStream delivers a consumer's messages in order, so one
// owner's backlog at the head would hold back everyone's, and a job nak'd again and again would
// meet MaxDeliver. A waiting job's assignment is put here, with where its message is held (nak'd
// for minutes, reconcile/give-turn.ts), one subject per backend and repository, first in first out
// within it; a pass with a free slot picks whose turn it is (quotas/fair-share.ts), asks for that
// job's runner, and only then removes it from here. Each step is idempotent, so a pass that dies
// between them leaves the job here to be picked again, never lost. (Entries from before the hold
// have no message: their assignment is published to the consumer again at their turn.)
import { JetStreamApiError, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { maybe } from "../nats/layout.ts";
import type { NatsHandle } from "../nats/connection.ts";
import { assignmentSubject, waitPrefix, waitStream, type Backend, type NatsNames } from "../nats/names.ts";
import { readBatch } from "./kv.ts";

/** The message id of a waiting job's assignment published again at its turn: one message per wait entry. */
export const turnMessageId = (id: string, seq: number) => `${id}.turn-${seq}`;
/** Whether a delivery is of a turn's message (an id named like one is mistaken for it: it asks later, not otherwise). */
export const isTurnMessage = (msgId: string | undefined) => msgId !== undefined && /\.turn-\d+$/.test(msgId);

/**
 * The bytes `oldest` asks for: well above what its batch can hold (an entry carries one assignment
 * of at most MAX_ASSIGNMENT_BYTES, in base64), so that a batch shorter than asked is never one the
 * server cut short: it held every job waiting.
 */
const OLDEST_MAX_BYTES = 8 << 20;

/** A waiting job, as kept: its assignment (as published), and whose it is (lower case). */
export interface WaitEntry {
  id: string;
  owner: string;
  repository: string;
  /** The assignment message's data, base64: what its turn asks a runner for. */
  data: string;
  /**
   * Where its message is held (the delivery's ack subject): its turn asks for its runner and the
   * claim acks this (reconcile/give-turn.ts). Absent from entries of jobs whose message was acked
   * (before the hold): their assignment is published again at their turn.
   */
  ack?: string;
}

/** A waiting job at the head of its repository: `seq` orders the wait set. */
export type WaitHead = WaitEntry & { seq: number };

export interface WaitSet {
  /**
   * Puts a job in for one wait (`wait`: its record's life and the wait's number, effects.ts's
   * waitKey): its entry's sequence; a second put of the same job and wait within the stream's
   * duplicate window is dropped (undefined). A new wait after the entry was taken out is a new key.
   */
  add(backend: Backend, entry: WaitEntry, wait: string): Promise<number | undefined>;
  /** Whether any job waits for `backend` (one request). */
  any(backend: Backend): Promise<boolean>;
  /** The repositories that have a job waiting, up to `limit` (one request). */
  repositories(backend: Backend, limit: number): Promise<string[]>;
  /** The oldest waiting job of each of `repositories` (one request each, sent together). */
  headsOf(backend: Backend, repositories: readonly string[]): Promise<WaitHead[]>;
  /** The `limit` oldest waiting jobs of `backend`, whatever their repository, oldest first (one request). */
  oldest(backend: Backend, limit: number): Promise<WaitHead[]>;
  /** The oldest waiting job of one repository after `afterSeq`, if any. */
  next(backend: Backend, repository: string, afterSeq: number): Promise<WaitHead | undefined>;
  /** Publishes a waiting job's assignment to `backend`'s consumer again; one message per `msgId` (false: one was there). */
  republish(backend: Backend, data: Uint8Array, msgId: string): Promise<boolean>;
  /** Takes a job out (its turn came, or it ended meanwhile). */
  remove(seq: number): Promise<void>;
  /**
   * Takes out every job of `backend` up to and including `seq`, in one request: only for a pass
   * that knows each of them is done (its look held every entry up to `seq`, and each had its turn
   * or had ended). An entry is never put in below the last one: none can be there unseen.
   */
  removeThrough(backend: Backend, seq: number): Promise<void>;
  /** Jobs waiting per repository, for the status page and metrics (one request). */
  counts(backend: Backend): Promise<Map<string, number>>;
}

/**
 * A message deleted already: the server says 10043 "sequence <n> not found" for one inside the
 * stream, 10057 "no message found" for one at or below its first sequence.
 */
function isGoneAlready(err: unknown): boolean {
  if (!(err instanceof JetStreamApiError)) return false;
  return (err.code === 10043 && /^sequence \d+ not found$/i.test(err.message)) || (err.code === 10057 && /^no message found$/i.test(err.message));
}

/** Subject tokens cannot hold dots; '=' is never in an owner or repository name. */
const token = (name: string) => name.replaceAll(".", "=");
const name = (tok: string) => tok.replaceAll("=", ".");

export function createWaitSet(handle: NatsHandle, names: NatsNames): WaitSet {
  const stream = waitStream(names);
  let manager: Promise<JetStreamManager> | undefined;
  const jsm = () => (manager ??= jetstreamManager(handle.nc, { checkAPI: false }));
  const subject = (backend: Backend, repository: string) => {
    const [owner = "", repo = ""] = repository.split("/");
    return `${waitPrefix(names, backend)}.${token(owner)}.${token(repo)}`;
  };
  const repositoryOf = (backend: Backend, subj: string) =>
    subj
      .slice(waitPrefix(names, backend).length + 1)
      .split(".")
      .map(name)
      .join("/");
  const head = (seq: number, data: Uint8Array): WaitHead => ({ ...(JSON.parse(new TextDecoder().decode(data)) as WaitEntry), seq });
  return {
    async add(backend, entry, wait) {
      const ack = await handle.js.publish(subject(backend, entry.repository), JSON.stringify(entry), { msgID: `wait-${entry.id}-${wait}` });
      return ack.duplicate ? undefined : ack.seq;
    },
    async any(backend) {
      // The last entry of any of the backend's subjects: none, nobody waits.
      const last = await maybe(async () => (await jsm()).direct.getMessage(stream, { last_by_subj: `${waitPrefix(names, backend)}.>` }));
      return last !== undefined && last !== null;
    },
    async repositories(backend, limit) {
      const lasts = (await maybe(() => readBatch(handle, stream, { multi_last: [`${waitPrefix(names, backend)}.>`] }))) ?? [];
      return lasts.slice(0, limit).map((m) => repositoryOf(backend, m.subject));
    },
    async headsOf(backend, repositories) {
      const found = await Promise.all(repositories.map((r) => this.next(backend, r, 0)));
      return found.filter((h): h is WaitHead => h !== undefined);
    },
    async oldest(backend, limit) {
      // Bytes enough for every entry asked for: fewer than `limit` back then means none is left out.
      const request = { seq: 1, batch: limit, next_by_subj: `${waitPrefix(names, backend)}.>`, max_bytes: OLDEST_MAX_BYTES };
      return ((await maybe(() => readBatch(handle, stream, request))) ?? []).map((m) => head(m.seq, m.data));
    },
    async next(backend, repository, afterSeq) {
      const m = await maybe(async () => (await jsm()).direct.getMessage(stream, { next_by_subj: subject(backend, repository), seq: afterSeq + 1 }));
      return m ? head(m.seq, m.data) : undefined;
    },
    async republish(backend, data, msgId) {
      return !(await handle.js.publish(assignmentSubject(names, backend), data, { msgID: msgId })).duplicate;
    },
    async remove(seq) {
      // Removed already, by another pass that gave the same turn: done.
      await maybe(async () => (await jsm()).streams.deleteMessage(stream, seq, false)).catch((err: unknown) => {
        if (!isGoneAlready(err)) throw err;
      });
    },
    async removeThrough(backend, seq) {
      await maybe(async () => (await jsm()).streams.purge(stream, { filter: `${waitPrefix(names, backend)}.>`, seq: seq + 1 }));
    },
    async counts(backend) {
      const info = await maybe(async () => (await jsm()).streams.info(stream, { subjects_filter: `${waitPrefix(names, backend)}.>` }));
      return new Map(Object.entries(info?.state.subjects ?? {}).map(([s, n]) => [repositoryOf(backend, s), n]));
    },
  };
}

/** What one look at the wait set found: the heads of its repositories, and each one's next after a turn. */
export interface WaitView {
  heads: WaitHead[];
  /**
   * Whether the heads are every repository's that had a job waiting when the look began: the
   * glance held every job, or the repositories were listed and fewer than LOOK_REPOSITORIES.
   */
  complete: boolean;
  /** The next waiting job of `repository` after `afterSeq`: from the look where it holds it, else read. */
  next(repository: string, afterSeq: number): Promise<WaitHead | undefined>;
}

/** A first look: the `limit` oldest waiting jobs; `whole` when they were every job waiting. */
export interface Glance {
  oldest: WaitHead[];
  whole: boolean;
}

/** How many of the oldest waiting jobs a look reads (one request), and how many repositories it lists when those are not all. */
export const LOOK_OLDEST = 32;
export const LOOK_REPOSITORIES = 64;

/** The oldest waiting jobs (one request): an empty glance, nobody waits. */
export async function glanceAt(set: WaitSet, backend: Backend, limit = LOOK_OLDEST): Promise<Glance> {
  const oldest = await set.oldest(backend, limit);
  return { oldest, whole: oldest.length < limit };
}

/**
 * The heads of every repository from a glance: where it held every job waiting, its first job of
 * each repository, and nothing more is read; otherwise the repositories are listed too (one
 * request), and the head of each one none of the glance's jobs is of is read (one request each).
 * A batch holds every entry up to its last sequence, so a repository's next found in it is its
 * next; one not found is read, unless the glance held every job waiting when it was read.
 */
export async function lookAt(set: WaitSet, backend: Backend, { oldest, whole }: Glance): Promise<WaitView> {
  const firstOf = new Map<string, WaitHead>();
  for (const h of oldest) if (!firstOf.has(h.repository)) firstOf.set(h.repository, h);
  const listed = whole ? [] : await set.repositories(backend, LOOK_REPOSITORIES);
  const unseen = listed.filter((r) => !firstOf.has(r));
  const more = unseen.length ? await set.headsOf(backend, unseen) : [];
  return {
    heads: [...firstOf.values(), ...more],
    complete: whole || listed.length < LOOK_REPOSITORIES,
    async next(repository, afterSeq) {
      const found = oldest.find((h) => h.repository === repository && h.seq > afterSeq);
      return found || whole ? found : set.next(backend, repository, afterSeq);
    },
  };
}
