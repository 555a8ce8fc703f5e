// The cron side of the Gitea integration. Gitea sends each webhook once and never retries, so
// every tick (1) publishes assignments for queued jobs that have none, and (2) deletes runners we
// registered that no assignment needs any more, in Gitea and at the backend.
import type { Dispatcher, State } from "../../dispatcher-types.ts";
import type { Backend } from "../../names.ts";
import type { Admission } from "../../state/admission.ts";
import { placementOf, type AssignmentRecord, type RecordStore } from "../../state/records.ts";
import { releaseRunner } from "../../reconcile/teardown.ts";
import { GiteaFeatureMissing, type RunnerAt } from "./client.ts";
import { assignmentOfRunner } from "./identity.ts";
import { jobAssignmentId, publishJob } from "./webhook.ts";
import { isNatsUnavailable } from "../../nats/connection.ts";

const PAGE_LIMIT = 50;
const FINISHED = new Set(["completed", "terminated"]);

export type CleanupVerdict = "keep" | "delete" | "delete_and_forget";

/** What to do with a runner named after one of our assignments. Pure. */
export function cleanupVerdict(
  record: AssignmentRecord | null,
  runnerId: number,
  now: number,
  limits: { claimTimeoutMs: number; graceMs: number; warmIdleMs?: number },
  /** A pass holds the assignment's registration reservation: it may be about to store this runner. */
  registering = false,
): CleanupVerdict {
  if (!record) return "delete";
  if (record.state === "completed" || record.state === "terminated") return "delete";
  if (!record.runner && registering) return "keep";
  if (!record.runner || record.runner.id !== runnerId) return "delete"; // a second registration, or one a dead pass never stored
  if (record.state === "claimed") return "keep";
  // An identity is reused when a runner is provisioned afresh after a claim timeout: the clock
  // starts with the latest incarnation, not with the registration.
  const since = Math.max(Date.parse(record.runner.registeredAt), record.readyAt ? Date.parse(record.readyAt) : 0);
  // A warm runner waits for any job as long as its pool keeps it idle; maintenance replaces it then.
  const timeout = record.warm ? Math.max(limits.claimTimeoutMs, limits.warmIdleMs ?? 0) : limits.claimTimeoutMs;
  return now - since > timeout + limits.graceMs ? "delete_and_forget" : "keep";
}

export interface SweepSummary {
  recovered: number;
  runnersDeleted: number;
  disabled: boolean;
}

export async function sweepGitea(d: Dispatcher, { records, admission }: State): Promise<SweepSummary> {
  const summary: SweepSummary = { recovered: 0, runnersDeleted: 0, disabled: false };
  const gitea = d.config.gitea;
  if (!gitea || !d.gitea || !gitea.apiToken || gitea.jobPages === 0) return summary;
  try {
    await recoverJobs(d, records, summary);
    await cleanRunners(d, records, admission, summary);
  } catch (err) {
    if (!(err instanceof GiteaFeatureMissing)) throw err;
    summary.disabled = true;
    d.sink.event({ event: "gitea_sweep_disabled", assignment: "-", backend: undefined, reason: err.message });
  }
  return summary;
}

/**
 * Runs `fn` on one listed item. One bad item (a name we cannot key, a runner Gitea will not
 * delete) is an event, and the sweep goes on; NATS being unreachable ends the sweep instead.
 */
export async function eachItem(d: Dispatcher, what: string, fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (err) {
    if (isNatsUnavailable(err)) throw err;
    d.sink.event({ event: "sweep_item_failed", assignment: "-", backend: undefined, reason: `${what}: ${(err as Error).message}` });
  }
}

async function recoverJobs(d: Dispatcher, records: RecordStore, summary: SweepSummary) {
  for (let page = 1; page <= d.config.gitea!.jobPages; page++) {
    const { jobs } = await d.gitea!.listQueuedJobs(page, PAGE_LIMIT);
    for (const job of jobs) {
      if (job.status !== "queued") continue;
      await eachItem(d, `job ${job.id}`, async () => {
        // A record is written only once its message is stored (see publishAssignment): a known
        // job is queued, even if it still waits behind MaxAckPending, and is not published again.
        // One whose runners never booted is, a while after it was given up on.
        const id = jobAssignmentId(job.id, job.run_attempt);
        const known = await records.get(id);
        const retry = known?.gaveUpAt !== undefined && d.now() - Date.parse(known.gaveUpAt) > RETRY_GIVEN_UP_MS;
        if (known && !(retry && (await startOver(records, known, d.now())))) return;
        const again = retry ? { msgId: `${id}.retry-${Date.parse(known!.gaveUpAt!)}` } : {};
        const published = await publishJob(d, job, repositoryOf(job.url ?? job.html_url ?? ""), again);
        if (published?.stored) {
          summary.recovered++;
          d.sink.event({ event: "recovered", assignment: published.id, backend: published.backend });
        }
      });
    }
    if (jobs.length < PAGE_LIMIT) break;
  }
}

async function cleanRunners(d: Dispatcher, records: RecordStore, admission: Admission, summary: SweepSummary) {
  const gitea = d.config.gitea!;
  const reservations = new Map<Backend, Promise<Set<string>>>();
  const registering = (backend: Backend) => {
    if (!reservations.has(backend)) reservations.set(backend, admission.registering(backend).then((ids) => new Set(ids)));
    return reservations.get(backend)!;
  };
  for (let page = 1; page <= gitea.jobPages; page++) {
    const { runners } = await d.gitea!.listRunners(page, PAGE_LIMIT);
    for (const runner of runners) {
      // Names are anybody's to choose: what does not name a valid assignment id is not ours.
      const id = assignmentOfRunner(gitea.runnerNamePrefix, runner.name);
      const context = { d, records, admission, registering, summary, graceMs: gitea.cleanupGraceMs, deleteRunner: (at: RunnerAt) => d.gitea!.deleteRunner(at) };
      if (id) await eachItem(d, `runner ${runner.id}`, () => cleanRunner(context, runner.id, id));
    }
    if (runners.length < PAGE_LIMIT) break;
  }
}

/** What cleaning one listed runner needs (Gitea's sweep, Forgejo's cleanup). */
export interface CleanContext {
  d: Dispatcher;
  records: RecordStore;
  admission: Admission;
  registering: (backend: Backend) => Promise<Set<string>>;
  summary: Pick<SweepSummary, "runnersDeleted">;
  /** CLEANUP_GRACE_MS */
  graceMs: number;
  /** Deletes the runner in the forge only (the backend's workload stays). */
  deleteRunner: (at: RunnerAt) => Promise<void>;
}

/** Deletes a runner named after assignment `id` when no assignment needs it (cleanupVerdict). */
export async function cleanRunner({ d, records, admission, registering, summary, graceMs, deleteRunner }: CleanContext, runnerId: number, id: string) {
  const record = await records.get(id);
  const warmIdleMs = d.config.pools.find((p) => p.name === record?.placement?.pool)?.maxIdleMs;
  const limits = { claimTimeoutMs: d.config.claimTimeoutMs, graceMs, ...(warmIdleMs ? { warmIdleMs } : {}) };
  const place = record ? placementOf(record) : undefined;
  const reserved = record && !record.runner ? (await registering(place!.backend)).has(id) : false;
  const verdict = cleanupVerdict(record, runnerId, d.now(), limits, reserved);
  // Listed at GITEA_SCOPE; where the record says it was registered, it is deleted there.
  const at = { id: runnerId, ...(record?.runner?.id === runnerId && record.runner.scope ? { scope: record.runner.scope } : {}) };
  if (verdict === "keep") return;
  if (verdict === "delete_and_forget") {
    // Forget the identity first, so the next delivery registers afresh instead of reusing it.
    await records.update(id, (r) => {
      if (r.runner?.id !== runnerId) return undefined;
      const { runner: _gone, readyAt: _stale, ...rest } = r;
      return { ...rest, state: r.state === "backend_ready" ? "backend_pending" : r.state };
    });
  }
  if (record && verdict === "delete_and_forget") {
    // Its slot and any registration reservation go too: the next delivery starts from scratch.
    await admission.release(place!, id);
    if (!(await releaseRunner(d, id, place!.backend, at))) return;
  } else if (record && FINISHED.has(record.state)) {
    // Still listed after its job ended: the teardown at the backend failed. Retried until it holds.
    if (!(await releaseRunner(d, id, place!.backend, at))) return;
  } else await deleteRunner(at);
  summary.runnersDeleted++;
  d.sink.event({ event: "runner_deleted", assignment: id, backend: record?.backend, reason: verdict });
}

/** A job whose runners never booted (MAX_BOOT_ATTEMPTS) is published again this long after. */
export const RETRY_GIVEN_UP_MS = 15 * 60_000;

/**
 * Makes a given-up record new again (a new incarnation: tokens of the old one are refused), so
 * that the job's message, published once more, is served afresh. False when another tick did.
 */
async function startOver(records: RecordStore, known: AssignmentRecord, now: number): Promise<boolean> {
  const at = new Date(now).toISOString();
  const fresh = await records.update(known.id, (r) => {
    if (r.gaveUpAt !== known.gaveUpAt) return undefined;
    const { id, backend, contentHash, createdAt, job, warm } = r;
    return { id, backend, contentHash, createdAt, state: "received", receivedAt: at, updatedAt: at, ...(job ? { job } : {}), ...(warm ? { warm } : {}) };
  });
  return fresh?.receivedAt === at;
}

/** "owner/name" from a job's API or HTML URL. */
export function repositoryOf(url: string): string {
  const api = /\/repos\/([^/]+)\/([^/]+)\/actions\//.exec(url);
  if (api) return `${api[1]}/${api[2]}`;
  const html = /^https?:\/\/[^/]+(?:\/.*)?\/([^/]+)\/([^/]+)\/actions\/runs\//.exec(url);
  return html ? `${html[1]}/${html[2]}` : "unknown/unknown";
}
