// The most recently changed assignments, from the tail of the records bucket's stream: one stream
// info and one batch read of its last messages, whatever the number of records.
import { jetstreamManager, type StoredMsg } from "@nats-io/jetstream";
import { RECORD_PREFIX } from "../nats/names.ts";
import type { NatsHandle } from "../nats/connection.ts";
import { isKvValue, readBatch } from "../state/kv.ts";
import type { AssignmentRecord } from "../state/records.ts";

/** A record changes a few times in its life: this many last writes hold the last `limit` records well. */
const TAIL_PER_RECORD = 4;

export async function recentRecords(handle: NatsHandle, bucket: string, limit: number): Promise<AssignmentRecord[]> {
  const jsm = await jetstreamManager(handle.nc, { checkAPI: false });
  const stream = `KV_${bucket}`;
  const { first_seq, last_seq, messages } = (await jsm.streams.info(stream)).state;
  if (!messages) return [];
  const seq = Math.max(first_seq, last_seq - limit * TAIL_PER_RECORD + 1);
  const latest = new Map<string, StoredMsg>();
  // The bucket also lists failed teardowns (state/teardowns.ts): records only.
  const records = `$KV.${bucket}.${RECORD_PREFIX}.`;
  for (const m of await readBatch(handle, stream, { seq, batch: last_seq - seq + 1 })) if (m.subject.startsWith(records)) latest.set(m.subject, m);
  return [...latest.values()]
    .filter(isKvValue)
    .sort((a, b) => b.seq - a.seq)
    .slice(0, limit)
    .map((m) => m.json<AssignmentRecord>());
}
