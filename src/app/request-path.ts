// What a request asks of NATS, apart from where the connection lives: on the invocation's own
// connection (directPath), or in the gateway Durable Object on its warm one (gateway/client.ts).
import type { Context, Passes, ReconcileOptions } from "../domain/context.ts";
import type { BatchSummary } from "../model/events.ts";
import { handleWorkflowJob, type WebhookOutcome, type WorkflowJobPayload } from "../forge/gitea/webhook.ts";
import { claimAssignment, completeAssignmentRun, getAssignment, type AssignmentView, type Claimed, type Completed } from "../domain/operations.ts";
import { publishAssignment, recordAssignment, type Published } from "../domain/publish.ts";
import type { JobFacts } from "../state/record-new.ts";
import type { Assignment } from "../model/assignment.ts";

/**
 * The NATS work of one API request, as one call each. Every method is idempotent (a publish is
 * deduplicated by the assignment id, a claim or completion of an assignment already in that state
 * answers the same), so a call that failed on the way may be made again, anywhere.
 */
export interface RequestPath {
  /**
   * Validates and publishes an assignment request (POST /v1/assignments). Answers once the message
   * is stored; a `pending` record is the caller's to write with `record` after answering (the
   * gateway writes it itself, and answers without one).
   */
  publish(body: unknown): Promise<Published>;
  /** Writes the record of a published assignment (idempotent). */
  record(assignment: Assignment, facts?: JobFacts): Promise<void>;
  get(id: string): Promise<AssignmentView>;
  /** A runner holding the claim token (signed for `incarnation`) took the assignment. */
  claim(id: string, incarnation: string): Promise<Claimed>;
  complete(id: string, incarnation: string): Promise<Completed>;
  /** A `workflow_job` delivery whose signature and shape were checked; like publish, it may leave a `record`. */
  webhook(payload: WorkflowJobPayload): Promise<WebhookOutcome>;
  /** A pass right after a request (see Passes.reconcile). */
  reconcile(trigger: string, budgetMs: number, opts: ReconcileOptions): Promise<BatchSummary[]>;
  /** Set when this is not the path the configuration asks for (and why), for /healthz to say. */
  readonly degraded?: string;
}

/** The request path on the dispatcher's own connection. */
export function directPath(d: Context & Passes): RequestPath {
  return {
    publish: (body) => publishAssignment(d, body, { recordLater: true }),
    record: (assignment, facts) => recordAssignment(d, assignment, facts),
    get: (id) => getAssignment(d, id),
    claim: (id, incarnation) => claimAssignment(d, id, { incarnation }),
    // A Forgejo runner's claim is seen by the poller, which may not have looked yet: its completion counts without it.
    complete: (id, incarnation) => completeAssignmentRun(d, id, { incarnation, ...(d.config.forgejo ? { unclaimed: true } : {}) }),
    webhook: (payload) => handleWorkflowJob(d, payload, { recordLater: true }),
    reconcile: (trigger, budgetMs, opts) => d.reconcile(trigger, budgetMs, opts),
  };
}

export const PATH_OPS = ["publish", "record", "get", "claim", "complete", "webhook", "reconcile"] as const satisfies readonly (keyof RequestPath)[];
export type PathOp = (typeof PATH_OPS)[number];
