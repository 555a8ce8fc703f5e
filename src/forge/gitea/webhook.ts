// Gitea `workflow_job` deliveries, after the signature was checked on the raw bytes.
import { z } from "zod";
import type { BackendAccess, Basics, ForgeAccess, Settings, StoreAccess } from "../../domain/context.ts";
import type { Backend } from "../../nats/names.ts";
import { completeAssignmentRun, claimAssignment, giteaRunnerOf, RunnerMismatch } from "../../domain/operations.ts";
import type { RunnerAt } from "./client.ts";
import { cancelAssignment, type Tombstone } from "../../domain/cancel.ts";
import { publishAssignment, type PublishOptions, type Published } from "../../domain/publish.ts";
import type { JobFacts } from "../../state/record-new.ts";
import { Conflict, InvalidInput, NotFound } from "../../model/errors.ts";
import { assignmentTime, repositorySchema, toFieldIssues, type Assignment, type AssignmentRequest } from "../../model/assignment.ts";
import { assignmentOfRunner } from "../../domain/runner-identity.ts";
import type { Pool } from "../../pools/config.ts";
import { routeJob } from "../../pools/route.ts";
import { standInFor, type Started, type Taken } from "../../pools/taken.ts";
import { staleReplay } from "./stale.ts";
import { placementOf, recordJob, runnerAt } from "../../state/records.ts";
import { giteaClientOf } from "./client-of.ts";
import { giteaRelease } from "./release.ts";
import { executionOf, type AttemptFacts } from "./versions.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings;

const id = z.number().int().nonnegative();
export const workflowJobPayload = z.looseObject({
  action: z.string(),
  workflow_job: z.looseObject({
    id,
    run_id: id,
    // 0 on a first queued delivery of Gitea 1.24–1.26 (versions.ts): its attempt rises at pickup.
    run_attempt: z.number().int().nonnegative().optional(),
    name: z.string().optional(),
    labels: z.array(z.string()).nullish(),
    status: z.string().optional(),
    conclusion: z.string().nullish(),
    runner_id: z.number().int().nullish(),
    runner_name: z.string().nullish(),
    // Go zero times ("0001-01-01T00:00:00Z") arrive as strings like any other.
    created_at: z.string().optional(),
    // The branch of the run's ref: "" for a pull request's (refs/pull/N/head) or a tag's run
    // (services/convert ToActionWorkflowJob: git.RefName(run.Ref).BranchName()). The cache's scopes.
    head_branch: z.string().max(255).optional(),
  }),
  // As an assignment keeps it: a name no Gitea gives is refused here, naming the field.
  repository: z.looseObject({ full_name: repositorySchema, default_branch: z.string().max(255).optional() }),
  organization: z.looseObject({}).nullish(),
});
export type WorkflowJobPayload = z.infer<typeof workflowJobPayload>;

export interface WebhookOutcome {
  status: 200 | 202;
  body: Record<string, unknown>;
  /** A backend to reconcile right after answering. */
  reconcile?: Backend;
  /** What the reconcile follows: a claim (its message is acked), or a freed slot (one waiting takes it). */
  after?: "claim" | "release";
  /** A runner to tear down after answering (releaseRunner): plain data, so that it crosses an RPC. */
  teardown?: Teardown;
  /** An assignment published with `recordLater` whose record is to be written after answering. */
  record?: Assignment;
  /** And what the delivery told of its job, for that record. */
  facts?: JobFacts;
  /** A runner took another job than its own: settled after answering (pools/taken.ts). */
  taken?: Taken;
  /** A job started on a runner of a pool: its start-up time is recorded after answering. */
  started?: Started;
}

export interface Teardown {
  id: string;
  backend: Backend;
  giteaRunner: RunnerAt | undefined;
  /** The pool it ran in: one that reuses its servers rebuilds this one as a warm runner at once. */
  pool?: string | undefined;
}

/** The assignment of one execution of a job (versions.ts executionOf): the same for every delivery of that execution. */
export function jobAssignmentId(jobId: number, execution: number): string {
  return `gitea-${jobId}-${execution}`;
}

/** Which execution of its job `job` is about, as the configured Gitea numbers them (versions.ts). */
export async function executionFor(d: Basics & ForgeAccess & Settings, job: AttemptFacts, action?: string): Promise<number> {
  const release = await giteaRelease(d, giteaClientOf(d.forge));
  return executionOf(release.numbering, job, action);
}

export function parseWorkflowJob(value: unknown): WorkflowJobPayload {
  const parsed = workflowJobPayload.safeParse(value);
  if (!parsed.success) throw new InvalidInput("invalid workflow_job payload", toFieldIssues(parsed.error));
  return parsed.data;
}

type ListedJob = { id: number; run_id: number; run_attempt?: number; name?: string; labels?: string[] | null; created_at?: string };

/**
 * The assignment request of a queued job, or undefined when no pool can run it. Pure. It waits in
 * the queue of its first pool's backend and names every pool that can run it, in the order they
 * are tried (see pools/route.ts).
 */
export function jobAssignment(pools: readonly Pool[], job: ListedJob, repository: string, execution: number): AssignmentRequest | undefined {
  const route = routeJob(pools, job.labels ?? []);
  if (!route) return undefined;
  // A time the assignment could not keep (Go's zero time, or none that parses) is left out: the
  // publish fills in its own, as for any request without one.
  const created = job.created_at && !job.created_at.startsWith("0001-") && assignmentTime.safeParse(job.created_at).success ? job.created_at : undefined;
  return {
    version: 1,
    id: jobAssignmentId(job.id, execution),
    ...route,
    job: { id: job.id, runId: job.run_id, attempt: execution, repository, ...(job.name ? { name: job.name.slice(0, 256) } : {}) },
    ...(created ? { createdAt: created } : {}),
  };
}

/** Publishes the assignment of a queued job; undefined when no route matches it. */
export async function publishJob(d: Deps, job: ListedJob, repository: string, execution: number, opts: PublishOptions = {}): Promise<Published | undefined> {
  const request = jobAssignment(d.config.pools, job, repository, execution);
  if (!request) {
    d.sink.event({ event: "no_route", assignment: jobAssignmentId(job.id, execution), backend: undefined });
    return undefined;
  }
  return publishAssignment(d, request, opts);
}

export async function handleWorkflowJob(d: Deps, payload: WorkflowJobPayload, opts: PublishOptions = {}): Promise<WebhookOutcome> {
  const gitea = d.config.gitea!;
  const job = payload.workflow_job;
  const named = job.runner_name ?? undefined;
  const ours = assignmentOfRunner(gitea.runnerNamePrefix, named);
  // The runner must be the one we registered: a name is not proof, any admin can pick it.
  const runner = { runnerId: job.runner_id ?? null };
  // Every delivery of one execution names one assignment, however this Gitea numbers attempts
  // (read once per isolate and kept: release.ts). Never rejects.
  const counted = executionFor(d, job, payload.action);
  switch (payload.action) {
    case "queued": {
      // A replay's check and the release's read ask Gitea at once: a slow Gitea is waited for once.
      const [stale, execution] = await Promise.all([staleReplay(d, job, payload.repository.full_name), counted]);
      const own = jobAssignmentId(job.id, execution);
      if (stale) {
        d.sink.event({ event: "stale_delivery", assignment: own, backend: undefined, reason: stale });
        return { status: 200, body: { ignored: stale } };
      }
      const published = await publishJob(d, job, payload.repository.full_name, execution, { ...opts, facts: factsOf(payload) });
      if (!published) return { status: 202, body: { ignored: "no_route" } };
      if (published.ended) {
        // Its completed came first: the job is over in Gitea; its message is termed at delivery.
        const reason = `job ${published.id} completed in Gitea before its queued delivery`;
        d.sink.event({ event: "queued_after_completed", assignment: published.id, backend: published.backend, reason });
        return { status: 200, body: { ignored: reason } };
      }
      const record = published.pending ? { record: published.pending, ...(published.facts ? { facts: published.facts } : {}) } : {};
      return { status: 202, body: { assignment: published.id, duplicate: published.duplicate }, reconcile: published.backend, ...record };
    }
    case "in_progress": {
      if (!ours) return ignore(d, named ? "runner is not ours" : "no runner");
      const own = jobAssignmentId(job.id, await counted);
      // Counted by runner: an ephemeral runner may have taken another matching job than its own.
      const view = await claimAssignment(d, ours, runner, own).catch(refusal(d, ours));
      if (typeof view === "string") return ignore(d, view === MISMATCH ? `runner is not the one registered for ${ours}` : view, ours);
      // Gitea hands a runner the oldest job it can take, which need not be the one it was made for.
      // A warm runner's take leaves a runner too many, settled after answering; a cold runner's
      // swap is written with its claim.
      const taken = own !== ours && view.warm ? { taken: { own, by: ours, warm: view.warm, pool: view.pool } } : {};
      if (view.warm)
        d.sink.event({ event: "warm_took_job", assignment: ours, backend: view.backend, ...(view.pool ? { pool: view.pool } : {}), reason: `job ${own}` });
      const queuedAt = own === ours ? { queuedAt: view.receivedAt } : {};
      const started =
        view.changed && view.pool ? { started: { pool: view.pool, own, at: d.now(), createdAt: job.created_at, via: view.via, ...queuedAt } } : {};
      return { status: 200, body: { claimed: ours }, ...(view.held ? {} : { reconcile: view.backend }), after: "claim", ...taken, ...started };
    }
    case "completed": {
      const execution = await counted;
      if (ours) {
        const view = await completeAssignmentRun(d, ours, { ...runner, unclaimed: true }).catch(refusal(d, ours));
        if (typeof view !== "string") {
          const teardown = view.changed ? { teardown: { id: ours, backend: view.runsOn, giteaRunner: giteaRunnerOf(view), pool: view.pool ?? undefined } } : {};
          return { status: 200, body: { completed: ours }, ...teardown, ...(view.contended ? { reconcile: view.backend, after: "release" } : {}) };
        }
        if (view !== MISMATCH) return ignore(d, view, ours);
      }
      // No runner of ours ran it (cancelled or skipped before pickup, or another runner did): its
      // own assignment goes; when its runner already runs another job, the one standing for it.
      const standing = await standInFor(d, jobAssignmentId(job.id, execution));
      const cancelled = await cancelAssignment(d, standing, "cancelled", tombstoneOf(d.config.pools, job, payload.repository.full_name, execution));
      if (!cancelled) return ignore(d, `nothing to cancel for ${standing}`);
      if (cancelled.tombstoned) return { status: 200, body: { tombstone: standing } };
      const { record, contended } = cancelled;
      return {
        status: 200,
        body: { cancelled: standing },
        teardown: { id: standing, backend: placementOf(record).backend, giteaRunner: runnerAt(record), pool: placementOf(record).pool },
        ...(contended ? { reconcile: record.backend, after: "release" } : {}),
      };
    }
    default:
      // "waiting": blocked on needs, approval or concurrency; no runner can take it yet.
      return { status: 202, body: { ignored: `action ${payload.action}` } };
  }
}

/**
 * What a `completed` leaves for its job when no record exists yet: Gitea delivers from a queue,
 * so a job cancelled at once can have its `queued` arrive after. Undefined when no route serves
 * its labels (its queued would publish nothing either).
 */
function tombstoneOf(pools: readonly Pool[], job: WorkflowJobPayload["workflow_job"], repository: string, execution: number): Tombstone | undefined {
  const request = jobAssignment(pools, job, repository, execution);
  if (!request) return undefined;
  const conclusion = /^[a-z_]{1,32}$/.test(job.conclusion ?? "") ? job.conclusion : "unknown conclusion";
  const reason = `completed in Gitea (${conclusion}) before its queued delivery`;
  return { backend: request.backend, reason, ...(request.job ? { job: recordJob(request.job) } : {}) };
}

/** Gitea does not retry a delivery, so what we do not act on is answered 200 and logged. */
function ignore(d: Deps, reason: string, assignment = "-"): WebhookOutcome {
  d.sink.event({ event: "webhook_ignored", assignment, backend: undefined, reason });
  return { status: 200, body: { ignored: reason } };
}

const MISMATCH = "runner mismatch";

/** A refused claim or completion becomes the reason it is ignored; anything else propagates. */
function refusal(d: Deps, id: string) {
  return (err: unknown): string => {
    if (err instanceof RunnerMismatch) {
      d.sink.event({ event: "runner_mismatch", assignment: id, backend: undefined, reason: err.message });
      return MISMATCH;
    }
    if (err instanceof NotFound || err instanceof Conflict) return err.message;
    throw err;
  };
}

/** What a delivery tells of its job beside the assignment: its branch and the default branch, for the cache's scopes. */
export function factsOf(payload: WorkflowJobPayload): JobFacts {
  const branch = payload.workflow_job.head_branch;
  const defaultBranch = payload.repository.default_branch;
  return { ...(branch !== undefined ? { branch } : {}), ...(defaultBranch ? { defaultBranch } : {}) };
}
