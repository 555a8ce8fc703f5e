// Publishing an assignment: validate, publish, then record (see offerAndPublish for the order).
import { errors } from "@nats-io/nats-core";
import { type Assignment, assignmentRequestSchema, completeAssignment, encodeAssignment, toFieldIssues } from "../model/assignment.ts";
import type { Basics, Settings, StoreAccess } from "./context.ts";
import { Conflict, InvalidInput, Unavailable } from "../model/errors.ts";
import { assignmentSubject, type Backend } from "../nats/names.ts";
import { whyDisabled } from "../model/states.ts";
import { contentHash, sameContent } from "../state/records.ts";
import type { JobFacts } from "../state/record-new.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & Settings;

export interface Published {
  id: string;
  backend: Backend;
  stream: string;
  seq: number;
  duplicate: boolean;
  /** The stream stored a new message (false when its duplicate window dropped this one). */
  stored: boolean;
  /** The id's record is a tombstone: the job completed in Gitea before this was published (see RecordStore.tombstone). */
  ended?: true;
  /** With `recordLater`: the assignment whose record the caller writes once it has answered (recordAssignment). */
  pending?: Assignment;
  /** And what its forge told of its job, for that record. */
  facts?: JobFacts;
}

export interface PublishOptions {
  /**
   * Answer once the message is stored (one round trip), and leave the record to the caller
   * (`pending`). The record is read alongside the publish, so that a conflict is still refused.
   */
  recordLater?: boolean;
  /** Pool maintenance publishing a warm runner's assignment (refused from anyone else). */
  warm?: boolean;
  /** The message id JetStream deduplicates on, when not the assignment id (a job published again). */
  msgId?: string;
  /** What the forge told of the job beside the assignment (state/record-new.ts JobFacts), for its record. */
  facts?: JobFacts;
}

export async function publishAssignment(d: Deps, body: unknown, opts: PublishOptions = {}): Promise<Published> {
  const request = assignmentRequestSchema.safeParse(body);
  if (!request.success) throw new InvalidInput("invalid assignment", toFieldIssues(request.error));
  const completed = completeAssignment(request.data, d.config.trustDomain, new Date(d.now()));
  if (!completed.ok) throw new InvalidInput("invalid assignment", completed.issues);
  const a = completed.assignment;
  if (!d.config.backends.some((b) => b.backend === a.backend)) {
    throw new InvalidInput("invalid assignment", [
      {
        field: "backend",
        message: `backend ${a.backend} is disabled (${whyDisabled(a.backend)})`,
      },
    ]);
  }
  const pools = (a.pools ?? []).flatMap((name, i) => {
    const pool = d.config.pools.find((p) => p.name === name);
    if (!pool) return [{ field: `pools.${i}`, message: `no pool ${name} is configured (RUNNER_POOLS)` }];
    return i === 0 && pool.backend !== a.backend
      ? [{ field: "pools.0", message: `pool ${name} runs on ${pool.backend}, not on the assignment's backend ${a.backend}` }]
      : [];
  });
  if (a.warm && !opts.warm) pools.push({ field: "warm", message: "is set by the dispatcher's own pool maintenance only" });
  // No client names a server to rebuild: only maintenance binds a warm runner to a parked one.
  if (a.reuse && (!opts.warm || !a.warm)) pools.push({ field: "reuse", message: "is set by the dispatcher's own pool maintenance only, on a warm runner" });
  else if (a.warm && (a.pools?.length !== 1 || a.job)) pools.push({ field: "warm", message: "a warm runner names exactly one pool and no job" });
  if (pools.length) throw new InvalidInput("invalid assignment", pools);
  try {
    return await offerAndPublish(d, a, opts.recordLater ?? false, opts.msgId ?? a.id, opts.facts);
  } catch (err) {
    if (err instanceof Conflict || err instanceof Unavailable) throw err;
    // Before the publish (no connection, no stream), so nothing was sent.
    throw new Unavailable("NATS is unavailable; nothing was queued. Retrying with the same id is safe.");
  }
}

/**
 * Publishes, then records. In this order a record always has its message: the sweep can trust
 * that a known job was queued, and never needs to publish it again. A publish that fails leaves
 * nothing; a record write that fails after the publish (or one left for later that never comes)
 * leaves a message without a record, which its first delivery creates (the reconciler offers
 * what it is delivered).
 */
async function offerAndPublish(d: Deps, a: Assignment, recordLater: boolean, msgId: string, facts?: JobFacts): Promise<Published> {
  return d.withState(async (state, handle) => {
    // Read alongside the publish: a record can only be older than this message, never newer.
    const known = recordLater ? state.records.get(a.id).catch(() => null) : undefined;
    let ack;
    try {
      ack = await handle.js.publish(assignmentSubject(d.config, a.backend), encodeAssignment(a), { msgID: msgId });
    } catch (err) {
      // No stream listens: the server refused it. Any other failure (a lost acknowledgement, a
      // connection that broke) may come after the stream stored it.
      if (refusedUnheard(err))
        throw new Unavailable("NATS did not confirm the publish (no stream took it); nothing was queued. Retrying with the same id is safe.");
      throw new Unavailable(
        "NATS did not confirm the publish; the assignment may or may not be queued. Retrying with the same id is safe: it is deduplicated by id.",
      );
    }
    let result: "new" | "same" | "conflict" | undefined;
    let record;
    if (known) {
      record = await known;
      result = record ? (sameContent(record, await contentHash(a)) ? "same" : "conflict") : undefined;
    } else {
      ({ result, record } = (await state.records.offer(a, facts).catch(() => undefined)) ?? {});
    }
    // Within the duplicate window the stream dropped a conflicting copy; past it, the stored copy
    // is termed as conflicting at its first delivery.
    if (result === "conflict") throw new Conflict(`assignment ${a.id} already exists with different content`);
    if (!ack.duplicate) d.sink.event({ event: "published", assignment: a.id, backend: a.backend });
    const pending = recordLater && result === undefined ? { pending: a, ...(facts ? { facts } : {}) } : {};
    // Its message is termed at its first delivery, as any terminated assignment's.
    const ended = record?.tombstone ? { ended: true as const } : {};
    return {
      id: a.id,
      backend: a.backend,
      stream: ack.stream,
      seq: ack.seq,
      duplicate: ack.duplicate || result === "same",
      stored: !ack.duplicate,
      ...pending,
      ...ended,
    };
  });
}

/** A publish that no stream heard (NATS answered "no responders"): certainly not stored. */
function refusedUnheard(err: unknown): boolean {
  for (let e = err as { cause?: unknown } | undefined, depth = 0; e && depth < 4; e = e.cause as typeof e, depth++) {
    if (e instanceof errors.NoRespondersError) return true;
  }
  return false;
}

/** Writes the record of an assignment published with `recordLater`. A conflict found now is logged: its message is termed at delivery. */
export async function recordAssignment(d: Deps, a: Assignment, facts?: JobFacts): Promise<void> {
  const offered = await d.withState((state) => state.records.offer(a, facts));
  if (offered.result === "conflict")
    d.sink.event({ event: "conflict", assignment: a.id, backend: a.backend, reason: "published with other content than its record" });
}
