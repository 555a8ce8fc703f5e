// Forgejo jobs as assignments, and what one poll of the waiting list means: pure, no I/O.
import type { AssignmentRequest } from "../../model/assignment.ts";
import type { Pool } from "../../pools/config.ts";
import { routeJob } from "../../pools/route.ts";
import type { ForgejoJob, ForgejoScope } from "./client.ts";

export function forgejoAssignmentId(jobId: number, attempt: number | undefined): string {
  return `forgejo-${jobId}-${attempt ?? 1}`;
}

/** The message id a job attempt is published under: a second poll, or a second isolate, stores nothing new. */
export function forgejoMsgId(job: Pick<ForgejoJob, "id" | "attempt" | "handle">): string {
  return `${forgejoAssignmentId(job.id, job.attempt)}.${job.handle ?? ""}`;
}

/**
 * "owner/name" where the scope names them; Forgejo lists a job with ids only (`owner_id`,
 * `repo_id`), so elsewhere the ids stand in: `id-<owner id>/id-<repo id>` (characters a NATS key
 * and a metric label keep as they are). Fair share and QUOTAS key by this.
 */
export function repositoryOfJob(scope: ForgejoScope, job: Pick<ForgejoJob, "owner_id" | "repo_id">): string {
  if (scope.kind === "repo") return `${scope.owner}/${scope.repo}`;
  const repo = `id-${job.repo_id ?? 0}`;
  return scope.kind === "org" ? `${scope.org}/${repo}` : `id-${job.owner_id ?? 0}/${repo}`;
}

/** The assignment request of a waiting job, or undefined when no pool can run it; `repository` as looked up (names.ts), else the scope's or the ids. */
export function forgejoAssignment(
  pools: readonly Pool[],
  scope: ForgejoScope,
  job: ForgejoJob,
  repository = repositoryOfJob(scope, job),
): AssignmentRequest | undefined {
  const route = routeJob(pools, job.runs_on ?? []);
  if (!route) return undefined;
  return {
    version: 1,
    id: forgejoAssignmentId(job.id, job.attempt),
    ...route,
    // Forgejo 15 lists no run id with a job (0 says so); 16 does (92863bb1, #12480).
    job: {
      id: job.id,
      runId: job.run_id ?? 0,
      attempt: job.attempt ?? 1,
      repository,
      ...(job.name ? { name: job.name.slice(0, 256) } : {}),
      ...(job.handle ? { handle: job.handle } : {}),
    },
  };
}

/** A job attempt the poller published, as it keeps it between polls. */
export interface KnownJob {
  /** Its assignment id. */
  id: string;
  job: number;
  attempt: number;
  handle: string;
  /** Seen running with a task: its claim was made. */
  claimed?: true;
  /** When it was first missing from the list (it ended, or was cancelled). */
  goneSince?: number;
  /** Not published, and not to be again: why (an event said so once). */
  skipped?: "unbindable" | "no_route" | "conflict";
  /** Given to the warm runner of assignment `id` (warm.ts), at this epoch ms. */
  boundAt?: number;
  /** Listed with this other handle, and said so once: not again while it stays. */
  conflictHandle?: string;
  /**
   * Waiting its turn, it is being moved to the idle warm runner `to` (move.ts), since epoch ms
   * `at`: written before its own assignment is ended, so that a poll that dies midway is finished
   * or undone by the next.
   */
  moving?: { to: string; at: number };
}

/** What earlier polls published, kept by the poller's owner (Durable Object storage). */
export interface KnownStore {
  all(): Promise<Map<string, KnownJob>>;
  put(key: string, job: KnownJob): Promise<void>;
  delete(key: string): Promise<void>;
}

export interface PollPlan {
  /** Waiting, with a handle, not published yet. */
  publish: ForgejoJob[];
  /** Published, now running with a task: claim. */
  claim: KnownJob[];
  /** Published, no longer listed: it ended or was cancelled. */
  gone: KnownJob[];
  /** Waiting without a handle (created before Forgejo 15): no runner can be bound to it. */
  unbindable: ForgejoJob[];
  /** Listed under a known attempt with another handle than the one published, not said yet. */
  conflicting: ForgejoJob[];
  /** Given to a warm runner that has not taken it within the claim timeout: taken back. */
  unbind: KnownJob[];
  /** Given to a warm runner that has not taken it yet, still waiting: taken back at once if that runner ended. */
  boundWaiting: { known: KnownJob; job: ForgejoJob }[];
  /** Published to its own runner, still waiting for one (or for its turn): an idle warm runner may take it instead. */
  waiting: { known: KnownJob; job: ForgejoJob }[];
}

/** Items of each kind one poll works on at most; the rest wait for the next poll (a mass cancel spreads over polls). */
export const MAX_PER_POLL = 100;

export const jobKey = (job: number, attempt: number | undefined) => `${job}-${attempt ?? 1}`;

/** What one poll's list means, given what earlier polls published. Pure; each kind at most `max` (oldest first). */
export function planPoll(known: ReadonlyMap<string, KnownJob>, jobs: readonly ForgejoJob[], now = 0, claimTimeoutMs = Infinity, max = MAX_PER_POLL): PollPlan {
  const plan: PollPlan = { publish: [], claim: [], gone: [], unbindable: [], conflicting: [], unbind: [], boundWaiting: [], waiting: [] };
  const listed = new Set<string>();
  for (const job of jobs) {
    const key = jobKey(job.id, job.attempt);
    listed.add(key);
    const k = known.get(key);
    if (k && job.handle !== undefined && job.handle !== k.handle) {
      if (job.handle !== k.conflictHandle) plan.conflicting.push(job);
      continue;
    }
    const running = (job.task_id ?? 0) > 0;
    if (k) {
      // Skipped (no route, no handle, a conflict): left to the operator's own runners, at no cost per poll.
      if (k.skipped) continue;
      if (running && !k.claimed) plan.claim.push(k);
      else if (!running && k.boundAt !== undefined && !k.claimed && now - k.boundAt > claimTimeoutMs) plan.unbind.push(k);
      else if (!running && k.boundAt !== undefined && !k.claimed) plan.boundWaiting.push({ known: k, job });
      else if (!running && !k.claimed && !k.moving && job.status === "waiting") plan.waiting.push({ known: k, job });
      continue;
    }
    // Running without having been published here: another runner's, or taken before we saw it.
    if (running || job.status !== "waiting") continue;
    if (!job.handle) plan.unbindable.push(job);
    else plan.publish.push(job);
  }
  for (const [key, k] of known) if (!listed.has(key)) plan.gone.push(k);
  // Forgejo lists newest first; published oldest first, they queue in the order they came.
  plan.publish.sort((a, b) => a.id - b.id);
  const byJob = (a: { job: number }, b: { job: number }) => a.job - b.job;
  return {
    publish: plan.publish.slice(0, max),
    claim: plan.claim.sort(byJob).slice(0, max),
    gone: plan.gone.sort(byJob).slice(0, max),
    unbindable: plan.unbindable.slice(0, max),
    conflicting: plan.conflicting.slice(0, max),
    unbind: plan.unbind.sort(byJob).slice(0, max),
    boundWaiting: plan.boundWaiting.slice(0, max),
    waiting: plan.waiting.sort((a, b) => a.job.id - b.job.id).slice(0, max),
  };
}
