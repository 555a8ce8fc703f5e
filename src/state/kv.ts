import { jetstreamManager } from "@nats-io/jetstream";
// Compare-and-set helpers over a JetStream KV bucket holding JSON values.
import type { StoredMsg } from "@nats-io/jetstream";
// Internal, on purpose: the public direct batch (DirectStreamAPI.getBatch) is the leak readBatch
// avoids, and no public API parses a direct get's reply read on a subscription of one's own.
import { DirectMsgImpl, JetStreamStatus } from "@nats-io/jetstream/internal";
import { createInbox } from "@nats-io/nats-core";
import { Kvm, type KV } from "@nats-io/kv";
import { bounded, isNatsError, type NatsHandle } from "../nats/connection.ts";

export interface Versioned<T> {
  value: T;
  revision: number;
}

/**
 * Binds to an existing bucket without a round trip; the Worker never creates buckets. With
 * `direct` (the default) any replica answers reads; without, the bucket's leader does.
 */
export function bindBucket(handle: NatsHandle, bucket: string, direct = true): Promise<KV> {
  return new Kvm(handle.js).open(bucket, { allow_direct: direct });
}

export async function readJson<T>(kv: KV, key: string): Promise<Versioned<T> | null> {
  const entry = await kv.get(key);
  if (!entry || entry.operation !== "PUT" || entry.length === 0) return null;
  return { value: entry.json<T>(), revision: entry.revision };
}

/** Latest values of many keys in one request (JetStream batch direct get), keyed by key. */
export async function readManyJson<T>(handle: NatsHandle, bucket: string, keys: readonly string[]): Promise<Map<string, Versioned<T>>> {
  const found = new Map<string, Versioned<T>>();
  if (!keys.length) return found;
  const prefix = `$KV.${bucket}.`;
  for (let i = 0; i < keys.length; i += MULTI_LAST_LIMIT) {
    const subjects = keys.slice(i, i + MULTI_LAST_LIMIT).map((k) => prefix + k);
    keepValues(await readBatch(handle, `KV_${bucket}`, { multi_last: subjects }), prefix, found);
  }
  return found;
}

/** Many keys' latest values in one request (readManyJson on the invocation's connection). */
export type ReadMany = (keys: readonly string[]) => Promise<Map<string, { value: unknown; revision: number }>>;
/** Every live key under a prefix and its latest value, as readAllUnder reads them (one request, no consumer). */
export type ReadUnder = (prefix: string) => Promise<Map<string, { value: unknown; revision: number }>>;

/** Keys read in one request when a batch reader is given, else a few at a time: never one round trip per key. */
export const MANY_AT_ONCE = 32;

/** A reader of many keys' values and revisions (a missing or deleted key is absent from its answer). */
export function manyReader(kv: KV, readMany?: ReadMany) {
  return async <T>(keys: readonly string[]): Promise<Map<string, Versioned<T>>> => {
    if (readMany) return (await readMany(keys)) as Map<string, Versioned<T>>;
    const out = new Map<string, Versioned<T>>();
    for (let i = 0; i < keys.length; i += MANY_AT_ONCE) {
      const chunk = keys.slice(i, i + MANY_AT_ONCE);
      const read = await Promise.all(chunk.map((k) => readJson<T>(kv, k)));
      read.forEach((r, j) => r && out.set(chunk[j]!, r));
    }
    return out;
  };
}

/**
 * A batch direct get: the last message of each subject (multi_last), or `batch` messages from
 * `seq` or from `start_time`, of the subjects `next_by_subj` matches when given.
 */
export type DirectBatchRequest =
  { multi_last: string[] } | (({ seq: number } | { start_time: string }) & { batch: number; next_by_subj?: string; max_bytes?: number });

/**
 * Every message of a batch direct get, read to the end of the batch, on a subscription of our
 * own. nats.js's direct batch leaves its subscription, and a 5 s timer, behind until the timer
 * fires: harmless on a connection drained at the end of an invocation, a leak on the gateway's
 * warm one (workerd allows 10,000 timers at once). Bounded: the end-of-batch may never come.
 */
export async function readBatch(handle: NatsHandle, stream: string, request: DirectBatchRequest): Promise<StoredMsg[]> {
  const inbox = createInbox();
  const sub = handle.nc.subscribe(inbox);
  const read = async () => {
    const all: StoredMsg[] = [];
    for await (const m of sub) {
      const status = JetStreamStatus.maybeParseStatus(m);
      if (status) {
        // A batch that matched nothing ends with "404 message not found" (a next_by_subj batch).
        if (status.isEndOfBatch() || status.isNoResults() || status.code === 404) break;
        throw status.toError();
      }
      all.push(new DirectMsgImpl(m));
      // A server that answers without batching sends one message and no end-of-batch.
      if (typeof m.headers?.get("Nats-Num-Pending") !== "string") break;
    }
    return all;
  };
  try {
    handle.nc.publish(`$JS.API.DIRECT.GET.${stream}`, JSON.stringify(request), { reply: inbox });
    return await bounded(handle.nc, "batch direct get", read());
  } finally {
    sub.unsubscribe();
  }
}

/** The values among a batch's messages (not delete or purge markers), by key (the subject past `prefix`), into `found`. */
function keepValues<T>(messages: readonly StoredMsg[], prefix: string, found: Map<string, Versioned<T>>): Map<string, Versioned<T>> {
  for (const m of messages) if (isKvValue(m)) found.set(m.subject.slice(prefix.length), { value: m.json<T>(), revision: m.seq });
  return found;
}

/** A KV entry's message that holds a value, not a delete or purge marker. */
export function isKvValue(m: StoredMsg): boolean {
  const op = m.header?.get("KV-Operation");
  return op !== "DEL" && op !== "PURGE" && m.data.length > 0;
}

const MULTI_LAST_LIMIT = 1024;

/**
 * The live keys of `bucket` under `prefix` and their values, in one request: a multi_last batch on
 * the wildcard. A server that has more than its batch limit of keys there answers 413; then the
 * keys are listed first (a stream info) and read in batches.
 */
export async function readAllUnder<T>(handle: NatsHandle, bucket: string, prefix: string): Promise<Map<string, Versioned<T>>> {
  const subjects = `$KV.${bucket}.`;
  try {
    return keepValues(await readBatch(handle, `KV_${bucket}`, { multi_last: [`${subjects}${prefix}.>`] }), subjects, new Map<string, Versioned<T>>());
  } catch (err) {
    if ((err as { code?: unknown }).code !== TOO_MANY_RESULTS) throw err;
  }
  const jsm = await jetstreamManager(handle.nc, { checkAPI: false });
  const info = await jsm.streams.info(`KV_${bucket}`, { subjects_filter: `${subjects}${prefix}.>` });
  const keys = Object.keys(info.state.subjects ?? {}).map((s) => s.slice(subjects.length));
  return readManyJson<T>(handle, bucket, keys);
}

/** A batch direct get that matched more subjects than the server answers at once. */
const TOO_MANY_RESULTS = 413;

/** One compare-and-set write at a known revision: the revision after, or null when another writer came first. */
export async function casWrite<T>(kv: KV, key: string, value: T, revision: number): Promise<number | null> {
  try {
    return await kv.update(key, new TextEncoder().encode(JSON.stringify(value)), revision);
  } catch (err) {
    if (isWrongLastSequence(err)) return null;
    throw err;
  }
}

/** JetStream's "wrong last sequence": 10071 from a single server, 10164 from a clustered stream's leader. */
const WRONG_LAST_SEQUENCE = new Set([10071, 10164]);

export function isWrongLastSequence(err: unknown): boolean {
  const e = err as { code?: number; api_error?: { err_code?: number }; message?: string };
  return WRONG_LAST_SEQUENCE.has(e?.api_error?.err_code ?? -1) || /wrong last sequence/i.test(e?.message ?? "");
}

/** Deletes `key` only at `revision`: true for the one caller of many whose delete lands (a one-time hand-out). */
export async function deleteAtRevision(kv: KV, key: string, revision: number): Promise<boolean> {
  try {
    await kv.delete(key, { previousSeq: revision });
    return true;
  } catch (err) {
    if (isWrongLastSequence(err)) return false;
    throw err;
  }
}

const MAX_CAS_ATTEMPTS = 30;

/**
 * Applies `change` to the current value with compare-and-set, retrying on a concurrent writer.
 * `change` returns the new value, or undefined to leave the entry as it is.
 */
export async function casUpdate<T, R>(
  kv: KV,
  key: string,
  change: (current: Versioned<T> | null) => { value: T | undefined; result: R },
  leader?: KV,
): Promise<R> {
  return (await casUpdateRevision(kv, key, change, { leader })).result;
}

/** A compare-and-set that lost to other writers every time: contention, retried like NATS trouble. */
export class CasGaveUp extends Error {
  override readonly name = "CasGaveUp";
}

/** NATS trouble or contention: nothing is known to have changed, and trying again is safe. */
export function isRetryable(err: unknown): boolean {
  return isNatsError(err) || err instanceof CasGaveUp;
}

/**
 * casUpdate that also tells the entry's revision afterwards (undefined when there is no entry).
 * `assumeAbsent`: the first attempt creates without reading, saving a round trip where the entry
 * usually does not exist yet; if it does, the usual read-modify-write follows. `leader`: the
 * bucket bound without direct gets; after a lost write, reads go there, since a replica that
 * lags would keep answering with the revision that just lost.
 */
export async function casUpdateRevision<T, R>(
  kv: KV,
  key: string,
  change: (current: Versioned<T> | null) => { value: T | undefined; result: R },
  { assumeAbsent = false, leader }: { assumeAbsent?: boolean; leader?: KV | undefined } = {},
): Promise<{ result: R; revision: number | undefined }> {
  for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
    const current = assumeAbsent && attempt === 0 ? null : await readJson<T>(attempt > 0 && leader ? leader : kv, key);
    const { value, result } = change(current);
    if (value === undefined) return { result, revision: current?.revision };
    const bytes = new TextEncoder().encode(JSON.stringify(value));
    try {
      const revision = current ? await kv.update(key, bytes, current.revision) : await kv.create(key, bytes);
      return { result, revision };
    } catch (err) {
      if (!isWrongLastSequence(err)) throw err;
      // Another writer won; back off a little so that many contenders spread out.
      await new Promise((r) => setTimeout(r, Math.random() * Math.min(50, 2 ** attempt)));
    }
  }
  throw new CasGaveUp(`KV ${key}: gave up after ${MAX_CAS_ATTEMPTS} concurrent updates`);
}
