// Messages near JetStream's MaxDeliver are renewed: published again (a copy with an id of its own,
// so that a renewal asked twice publishes one copy) and only then acknowledged. A wait however long
// (a warm runner idle for hours, a job held for a day, a full backend) is never cut off by the
// delivery limit: the copy starts again at its first delivery, and its record is the same.
// A Worker killed between the two leaves the original, delivered again and renewed again (deduplicated).
import type { JetStreamClient } from "@nats-io/jetstream";
import { MAX_DELIVER } from "./layout.ts";
import type { DeliveredMessage } from "./pull.ts";

/** A delivery at or past this count is renewed instead of processed (a pass may deliver a message a few times). */
export const RENEW_AT = MAX_DELIVER - 100;

/** The Nats-Msg-Id of the copy of the message at stream sequence `seq`. */
export const renewalId = (seq: number) => `renew-${seq}`;

/** Whether a delivery is renewed rather than processed. */
export const needsRenewal = (m: DeliveredMessage) => m.deliveryCount >= RENEW_AT && m.subject !== undefined;

/** Publishes each message again, then acknowledges the original (waiting for both). */
export async function renewMessages(js: JetStreamClient, messages: readonly DeliveredMessage[]): Promise<void> {
  for (const m of messages) {
    await js.publish(m.subject!, m.data, { msgID: renewalId(m.seq) });
    await m.ackAck();
  }
}
