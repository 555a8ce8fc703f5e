// Publishing an assignment: validate, publish, then record (see offerAndPublish for the order).
import { type Assignment, assignmentRequestSchema, completeAssignment, encodeAssignment, toFieldIssues } from "./assignment.ts";
import type { Dispatcher } from "./dispatcher-types.ts";
import { Conflict, InvalidInput, Unavailable } from "./domain-errors.ts";
import { assignmentSubject, type Backend } from "./names.ts";

export interface Published {
  id: string;
  backend: Backend;
  stream: string;
  seq: number;
  duplicate: boolean;
  /** The stream stored a new message (false when its duplicate window dropped this one). */
  stored: boolean;
}

export async function publishAssignment(d: Dispatcher, body: unknown): Promise<Published> {
  const request = assignmentRequestSchema.safeParse(body);
  if (!request.success) throw new InvalidInput("invalid assignment", toFieldIssues(request.error));
  const completed = completeAssignment(request.data, d.config.trustDomain, new Date(d.now()));
  if (!completed.ok) throw new InvalidInput("invalid assignment", completed.issues);
  const a = completed.assignment;
  if (!d.config.backends.some((b) => b.backend === a.backend)) {
    throw new InvalidInput("invalid assignment", [{ field: "backend", message: `backend ${a.backend} is disabled (CAPACITY_${a.backend.toUpperCase()}=0)` }]);
  }
  try {
    return await offerAndPublish(d, a);
  } catch (err) {
    if (err instanceof Conflict || err instanceof Unavailable) throw err;
    throw new Unavailable("NATS is unavailable; nothing was queued. Retrying with the same id is safe.");
  }
}

/**
 * Publishes, then records. In this order a record always has its message: the sweep can trust
 * that a known job was queued, and never needs to publish it again. A publish that fails leaves
 * nothing; a record write that fails after the publish leaves a message without a record, which
 * its first delivery creates (the reconciler offers what it is delivered).
 */
async function offerAndPublish(d: Dispatcher, a: Assignment): Promise<Published> {
  return d.withState(async (state, handle) => {
    let ack;
    try {
      ack = await handle.js.publish(assignmentSubject(d.config, a.backend), encodeAssignment(a), { msgID: a.id });
    } catch {
      throw new Unavailable("NATS did not confirm the publish; nothing was queued. Retrying with the same id is safe.");
    }
    const offered = await state.records.offer(a).catch(() => undefined);
    // Within the duplicate window the stream dropped a conflicting copy; past it, the stored copy
    // is termed as conflicting at its first delivery.
    if (offered?.result === "conflict") throw new Conflict(`assignment ${a.id} already exists with different content`);
    if (!ack.duplicate) d.sink.event({ event: "published", assignment: a.id, backend: a.backend });
    return { id: a.id, backend: a.backend, stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate || offered?.result === "same", stored: !ack.duplicate };
  });
}
