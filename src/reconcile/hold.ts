// Within a cron pass, a runner that is ready often claims within moments. Rather than nak its
// message and leave the ack to a later pass (after the nak delay), the pass keeps the delivery for
// a short window and watches the records of everything it holds, one batch read per look (every
// 100 ms while claims land, further apart while none do), acking each as its claim lands. The
// window is written into the record when the runner becomes ready, so a claim inside it starts no
// pass of its own. After a window ends there is one last look, then a nak with the usual claim
// delay. AckWait is longer than any window (see ACK_WAIT_MS in config.ts).
import type { BatchSummary } from "../model/events.ts";
import { decide, DEFAULT_DELAYS } from "./decide.ts";
import { emit } from "./emit.ts";
import type { Prepared, ProcessDeps } from "./types.ts";

/** The first look comes after POLL_MS; while nobody claims, the looks grow apart up to MAX_POLL_MS. */
const POLL_MS = 100;
const MAX_POLL_MS = 800;
/** How long a cron pass holds a ready runner's message for its claim. */
export const HOLD_MS = 3_000;

export async function holdForClaims(deps: ProcessDeps, held: Prepared[], summary: BatchSummary): Promise<void> {
  const waiting = new Map(held.map((p) => [p.assignment!.id, p]));
  const delay = deps.policy.retryDelayMs ?? DEFAULT_DELAYS.claim;
  try {
    let interval = POLL_MS;
    while (waiting.size) {
      const nextWindowEnd = Math.min(...[...waiting.values()].map((p) => p.heldUntil!));
      // Never sleep past the end of the next window by much: its last look is due then.
      await new Promise((r) => setTimeout(r, Math.max(POLL_MS, Math.min(interval, nextWindowEnd - deps.now() + 10))));
      const claimedBefore = summary.acked + summary.termed;
      const lookedAt = deps.now();
      const records = await deps.records.getMany([...waiting.keys()]);
      await Promise.all(
        [...waiting].map(async ([id, p]) => {
          const r = records.get(id)?.value;
          const step =
            r &&
            decide({ now: lookedAt, budgetSpent: false, decoded: true, offer: "same", state: r.state, ...(r.reason ? { reason: r.reason } : {}) }, deps.policy);
          // Only the end of the wait is decided here: claimed or completed (ack), terminated (term).
          if (step?.next !== "done") {
            if (lookedAt < p.heldUntil!) return;
            // This look came after its window: that was the last one.
            waiting.delete(id);
            p.msg.nak(delay);
            summary.naked++;
            return;
          }
          waiting.delete(id);
          // Its claim acks this very delivery (the one its registration names) and tells it: a
          // second ack would only cost a round trip and say it twice. Should that claim die before
          // its ack, the message comes back after AckWait, and that delivery is acked as claimed.
          if (step.action.kind === "ack" && r?.state === "claimed" && r.askedBy === p.msg.ackSubject) {
            summary.acked++;
            return;
          }
          for (const event of step.events) emit(deps, event, id, step);
          if (step.action.kind === "ack") {
            await p.msg.ackAck();
            summary.acked++;
          } else if (step.action.kind === "term") {
            p.msg.term(step.action.reason);
            summary.termed++;
          }
        }),
      );
      interval = summary.acked + summary.termed > claimedBefore ? POLL_MS : Math.min(MAX_POLL_MS, interval * 2);
    }
  } finally {
    for (const p of waiting.values()) p.msg.nak(delay);
    summary.naked += waiting.size;
  }
}
