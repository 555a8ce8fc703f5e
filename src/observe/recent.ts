// The most recently changed assignments, from the tail of the records bucket's stream: one stream
// info and one batch read of its last messages, whatever the number of records.
import { jetstreamManager, type StoredMsg } from "@nats-io/jetstream";
import type { NatsHandle } from "../nats/connection.ts";
import { bounded } from "../nats/connection.ts";
import type { AssignmentRecord } from "../state/records.ts";

/** A record changes a few times in its life: this many last writes hold the last `limit` records well. */
const TAIL_PER_RECORD = 4;

export async function recentRecords(handle: NatsHandle, bucket: string, limit: number): Promise<AssignmentRecord[]> {
  const jsm = await jetstreamManager(handle.nc, { checkAPI: false });
  const stream = `KV_${bucket}`;
  const { first_seq, last_seq, messages } = (await jsm.streams.info(stream)).state;
  if (!messages) return [];
  const seq = Math.max(first_seq, last_seq - limit * TAIL_PER_RECORD + 1);
  const batch = await jsm.direct.getBatch(stream, { seq, batch: last_seq - seq + 1 });
  const latest = new Map<string, StoredMsg>();
  const read = async () => {
    for await (const m of batch) latest.set(m.subject, m);
  };
  await bounded(handle.nc, "batch direct get", read(), undefined, () => batch.stop());
  return [...latest.values()]
    .filter((m) => m.data.length > 0 && !["DEL", "PURGE"].includes(m.header?.get("KV-Operation") ?? ""))
    .sort((a, b) => b.seq - a.seq)
    .slice(0, limit)
    .map((m) => m.json<AssignmentRecord>());
}
