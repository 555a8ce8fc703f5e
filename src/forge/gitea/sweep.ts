// The cron side of the Gitea integration. Gitea sends each webhook once and never retries, so
// every tick (1) publishes assignments for queued jobs that have none, and (2) deletes runners we
// registered that no assignment needs any more, in Gitea and at the backend.
import type { BackendAccess, Basics, ForgeAccess, Settings, State, StoreAccess } from "../../domain/context.ts";
import type { Backend } from "../../nats/names.ts";
import type { Admission } from "../../state/admission.ts";
import type { AssignmentRecord, RecordStore } from "../../state/records.ts";
import { startOver } from "../../state/transitions.ts";
import { GiteaFeatureMissing, type GiteaClient, type RunnerAt } from "./client.ts";
import { assignmentOfRunner } from "../../domain/runner-identity.ts";
import { jobAssignmentId, publishJob } from "./webhook.ts";
import { cleanRunner, eachItem } from "../runner-cleanup.ts";
import { giteaRelease } from "./release.ts";
import { executionOf } from "./versions.ts";
import { forEachPage } from "../pages.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings;
/** The stores this module's steps use (domain/context.ts State). */
type Stores = Pick<State, "admission" | "records">;

const PAGE_LIMIT = 50;

export interface SweepSummary {
  recovered: number;
  runnersDeleted: number;
  disabled: boolean;
}

export async function sweepGitea(d: Deps, client: GiteaClient, { records, admission }: Stores): Promise<SweepSummary> {
  const summary: SweepSummary = { recovered: 0, runnersDeleted: 0, disabled: false };
  const gitea = d.config.gitea;
  if (!gitea || !gitea.apiToken || gitea.jobPages === 0) return summary;
  try {
    await recoverJobs(d, client, records, summary);
    await cleanRunners(d, client, records, admission, summary);
  } catch (err) {
    if (!(err instanceof GiteaFeatureMissing)) throw err;
    summary.disabled = true;
    d.sink.event({ event: "gitea_sweep_disabled", assignment: "-", backend: undefined, reason: err.message });
  }
  return summary;
}

async function recoverJobs(d: Deps, client: GiteaClient, records: RecordStore, summary: SweepSummary) {
  const { numbering } = await giteaRelease(d, client);
  // Until Gitea says it is done: a page may be shorter than asked ([api].MAX_RESPONSE_ITEMS).
  await forEachPage(
    (page) => client.listQueuedJobs(page, PAGE_LIMIT),
    d.config.gitea!.jobPages,
    async (jobs) => {
      for (const job of jobs) {
        if (job.status !== "queued") continue;
        // 1.24–1.26 list a waiting job with the count before its pickup (versions.ts).
        const execution = executionOf(numbering, job);
        await eachItem(d, `job ${job.id}`, async () => {
          // A record is written only once its message is stored (see publishAssignment): a known
          // job is queued, even if it still waits behind MaxAckPending, and is not published again.
          // One whose runners never booted is, a while after it was given up on.
          const id = jobAssignmentId(job.id, execution);
          const known = await records.get(id);
          const retry = known?.gaveUpAt !== undefined && d.now() - Date.parse(known.gaveUpAt) > RETRY_GIVEN_UP_MS;
          if (known && !(retry && (await serveAfresh(records, known, d.now())))) return;
          const again = retry ? { msgId: `${id}.retry-${Date.parse(known.gaveUpAt!)}` } : {};
          const published = await publishJob(d, job, repositoryOf(job.url ?? job.html_url ?? ""), execution, again);
          if (published?.stored) {
            summary.recovered++;
            d.sink.event({ event: "recovered", assignment: published.id, backend: published.backend });
          }
        });
      }
    },
  );
}

async function cleanRunners(d: Deps, client: GiteaClient, records: RecordStore, admission: Admission, summary: SweepSummary) {
  const gitea = d.config.gitea!;
  const reservations = new Map<Backend, Promise<Set<string>>>();
  const registering = (backend: Backend) => {
    if (!reservations.has(backend))
      reservations.set(
        backend,
        admission.registering(backend).then((ids) => new Set(ids)),
      );
    return reservations.get(backend)!;
  };
  await forEachPage(
    (page) => client.listRunners(page, PAGE_LIMIT),
    gitea.jobPages,
    async (runners) => {
      for (const runner of runners) {
        // Names are anybody's to choose: what does not name a valid assignment id is not ours.
        const id = assignmentOfRunner(gitea.runnerNamePrefix, runner.name);
        const context = { d, records, admission, registering, summary, graceMs: gitea.cleanupGraceMs, deleteRunner: (at: RunnerAt) => client.deleteRunner(at) };
        if (id) await eachItem(d, `runner ${runner.id}`, () => cleanRunner(context, runner.id, id));
      }
    },
  );
}

/** A job whose runners never booted (MAX_BOOT_ATTEMPTS) is published again this long after. */
export const RETRY_GIVEN_UP_MS = 15 * 60_000;

/**
 * Makes a given-up record new again (a new incarnation: tokens of the old one are refused), so
 * that the job's message, published once more, is served afresh. False when another tick did.
 */
async function serveAfresh(records: RecordStore, known: AssignmentRecord, now: number): Promise<boolean> {
  const at = new Date(now).toISOString();
  return (await startOver(records, known.id, { at, when: (r) => r.gaveUpAt === known.gaveUpAt })).changed;
}

/** "owner/name" from a job's API or HTML URL. */
export function repositoryOf(url: string): string {
  const api = /\/repos\/([^/]+)\/([^/]+)\/actions\//.exec(url);
  if (api) return `${api[1]}/${api[2]}`;
  const html = /^https?:\/\/[^/]+(?:\/.*)?\/([^/]+)\/([^/]+)\/actions\/runs\//.exec(url);
  return html ? `${html[1]}/${html[2]}` : "unknown/unknown";
}
