// A pull batch with `no_wait`: the server answers with what it has at once (then 404) instead
// of holding the request open for `expires`; nats.js's fetch waits at least a second whenever
// the consumer holds fewer messages than asked for. A short `expires` still goes along: without
// it, a consumer at MaxAckPending keeps the request forever and delivers to an abandoned inbox.
import { createInbox, type Msg, type NatsConnection } from "@nats-io/nats-core";
import { NatsUnavailable } from "./connection.ts";

/** One delivery of a JetStream message: the subset a reconciliation needs (the reference's Message). */
export interface DeliveredMessage {
  readonly data: Uint8Array;
  /** Stream sequence. */
  readonly seq: number;
  /** 1 on the first delivery. */
  readonly deliveryCount: number;
  /** The id its publisher gave it (Nats-Msg-Id), which JetStream keeps with the message. */
  readonly msgId?: string;
  /** The subject it was published to (a pulled message's; renew.ts publishes it there again). */
  readonly subject?: string;
  /** Where its ack goes ($JS.ACK…): the server acks by the stream sequence in it, from any connection (ackDelivery). */
  readonly ackSubject: string;
  ack(): void;
  /** Acknowledges and waits for the server to confirm it (the reference's DoubleAck). */
  ackAck(): Promise<void>;
  nak(delayMs: number): void;
  term(reason: string): void;
}

const ACK_TIMEOUT_MS = 5_000;
/** How long the server may hold a pull when no message can be delivered right now. */
export const PULL_EXPIRES_MS = 100;
const encoder = new TextEncoder();

export function wrapMessage(nc: NatsConnection, m: Msg): DeliveredMessage {
  const msgId = m.headers?.get("Nats-Msg-Id");
  return { ...messageAt(nc, m.reply ?? "", m.data), ...(msgId ? { msgId } : {}), subject: m.subject };
}

/**
 * A delivery known by its ack subject, from any connection: a waiting job's message that a pass
 * gives its turn to (reconcile/give-turn.ts). Acks and terms reach it by the stream sequence in the
 * subject, whichever delivery it names; a nak only while that delivery is the latest.
 */
export function messageAt(nc: NatsConnection, reply: string, data: Uint8Array): DeliveredMessage {
  const info = parseAckSubject(reply);
  return {
    data,
    seq: info.seq,
    deliveryCount: info.deliveryCount,
    ackSubject: reply,
    ack: () => nc.publish(reply, encoder.encode("+ACK")),
    async ackAck() {
      await nc.request(reply, encoder.encode("+ACK"), { timeout: ACK_TIMEOUT_MS });
    },
    nak: (delayMs) => nc.publish(reply, encoder.encode(delayMs > 0 ? `-NAK ${JSON.stringify({ delay: delayMs * 1_000_000 })}` : "-NAK")),
    term: (reason) => nc.publish(reply, encoder.encode(`+TERM ${reason}`)),
  };
}

/**
 * Acknowledges a delivery from another connection than the one it came on, and waits for the
 * server to confirm it: a claim acks the message of the pass that asked for its runner, which is
 * out on a nak delay (or delivered again since). The server finds the message by the stream
 * sequence in the subject, whichever delivery it names (test/node/claim-ack.test.ts pins this);
 * a message acked already is confirmed as well. Refuses what is not an ack subject.
 */
export async function ackDelivery(nc: NatsConnection, subject: string, timeoutMs = ACK_TIMEOUT_MS): Promise<void> {
  if (!isAckSubject(subject)) throw new Error("not a JetStream ack subject");
  await nc.request(subject, encoder.encode("+ACK"), { timeout: timeoutMs });
}

/** $JS.ACK with the 9 tokens of the v1 form, or the 11 or more of the v2 form (domain, account hash). */
export const isAckSubject = (subject: string) => {
  const tokens = subject.split(".");
  return tokens[0] === "$JS" && tokens[1] === "ACK" && (tokens.length === 9 || tokens.length >= 11) && tokens.every((t) => t.length > 0 && !/[\s*>]/.test(t));
};

/** $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>, or the v2 form with domain and account hash. */
export function parseAckSubject(subject: string): { deliveryCount: number; seq: number } {
  const tokens = subject.split(".");
  const offset = tokens.length >= 11 ? 2 : 0;
  return { deliveryCount: Number(tokens[4 + offset]) || 1, seq: Number(tokens[5 + offset]) || 0 };
}

/**
 * Pulls up to `batch` messages that are available now. Resolves as soon as the server says it has
 * no more (a status message) or the batch is full; `timeoutMs` bounds a server that never answers.
 */
export async function pullNoWait(
  nc: NatsConnection,
  stream: string,
  consumer: string,
  batch: number,
  timeoutMs = 5_000,
  expiresMs = PULL_EXPIRES_MS,
  /** When > 0: wait up to this long for messages (one whose nak delay is about to end, say). */
  waitMs = 0,
): Promise<DeliveredMessage[]> {
  const inbox = createInbox();
  const messages: DeliveredMessage[] = [];
  const sub = nc.subscribe(inbox, { timeout: timeoutMs + waitMs });
  const request = waitMs > 0 ? { batch, expires: waitMs * 1_000_000 } : { batch, no_wait: true, expires: expiresMs * 1_000_000 };
  nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${stream}.${consumer}`, encoder.encode(JSON.stringify(request)), { reply: inbox });
  try {
    for await (const m of sub) {
      if (m.headers?.code && !m.reply) {
        // 503: nobody answered (the consumer has no leader, in an election or gone).
        if (m.headers.code === 503) throw new NatsUnavailable(`pull from ${stream}/${consumer}: 503 no responders`);
        // 404 no messages, 408 request done, 409 max ack pending reached: the batch is over.
        if (m.headers.code >= 400 && m.headers.code !== 404 && m.headers.code !== 408 && m.headers.code !== 409) {
          throw new Error(`pull from ${stream}/${consumer}: ${m.headers.code} ${m.headers.description}`);
        }
        break;
      }
      messages.push(wrapMessage(nc, m));
      if (messages.length >= batch) break;
    }
  } catch (err) {
    if (!messages.length || !isTimeout(err)) throw err;
  } finally {
    sub.unsubscribe();
  }
  return messages;
}

function isTimeout(err: unknown): boolean {
  return (err as Error)?.name === "TimeoutError" || /timeout/i.test((err as Error)?.message ?? "");
}
