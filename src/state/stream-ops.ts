// The few JetStream requests admission is made of, on one connection: a publish that expects the
// subject's last sequence (the slot, the registration word), the last message of a subject or of
// every subject under a prefix, and a purge by subject. A missing stream reads as empty.
import { jetstreamManager, type JetStreamManager, type StoredMsg } from "@nats-io/jetstream";
import type { NatsHandle } from "../nats/connection.ts";
import { idOfToken } from "../nats/names.ts";
import { maybe } from "../nats/layout.ts";
import { isWrongLastSequence, readBatch } from "./kv.ts";

/** JetStream's "maximum messages exceeded": the slots stream is full. */
const STREAM_FULL = 10077;

/** A message TTL as JetStream takes it: whole seconds, rounded up. */
export const ttl = (ms: number) => `${Math.ceil(ms / 1_000)}s`;

export interface StreamOps {
  /** Publishes `value` if the subject's last message is `expected` (0: none): "taken" (at `seq`), already "held", or the stream is "full". */
  publishIf: (subject: string, value: object, ttlMs: number, expected?: number) => Promise<{ got: "taken" | "held" | "full"; seq?: number }>;
  /** The last message of `subject`, or null. */
  last: (stream: string, subject: string) => Promise<StoredMsg | null>;
  /** Last message of every subject under `prefix`, by id. */
  lastOfAll: (stream: string, prefix: string) => Promise<Map<string, StoredMsg>>;
  /** Purges `subject`: how many messages went. */
  purge: (stream: string, subject: string) => Promise<number>;
  jsm: () => Promise<JetStreamManager>;
}

export function createStreamOps(handle: NatsHandle): StreamOps {
  let manager: Promise<JetStreamManager> | undefined;
  const jsm = () => (manager ??= jetstreamManager(handle.nc, { checkAPI: false }));
  return {
    jsm,
    publishIf: async (subject, value, ttlMs, expected = 0) => {
      try {
        const ack = await handle.js.publish(subject, JSON.stringify(value), { expect: { lastSubjectSequence: expected }, ttl: ttl(ttlMs) });
        return { got: "taken", seq: ack.seq };
      } catch (err) {
        if (isWrongLastSequence(err)) return { got: "held" };
        if ((err as { code?: unknown }).code === STREAM_FULL) return { got: "full" };
        throw err;
      }
    },
    last: async (stream, subject) => (await maybe(async () => (await jsm()).direct.getMessage(stream, { last_by_subj: subject }))) ?? null,
    lastOfAll: async (stream, prefix) => {
      const messages = (await maybe(async () => readBatch(handle, stream, { multi_last: [`${prefix}.>`] }))) ?? [];
      return new Map(messages.map((m) => [idOfToken(m.subject.slice(prefix.length + 1)), m]));
    },
    purge: async (stream, subject) => (await maybe(async () => (await jsm()).streams.purge(stream, { filter: subject })))?.purged ?? 0,
  };
}
