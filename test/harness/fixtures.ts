// The Gitea webhook fixtures, as Gitea would send them now: the job was created a minute ago.
// The dispatcher checks a queued job's age (a delivery older than the record TTL may be a replay),
// so fixed dates would make the suites fail once the calendar passes them.
import completed from "../fixtures/gitea/workflow_job.completed.json";
import inProgress from "../fixtures/gitea/workflow_job.in_progress.json";
import queued from "../fixtures/gitea/workflow_job.queued.json";
import gitea126 from "../fixtures/gitea/releases/gitea-1.26.json";
import gitea127 from "../fixtures/gitea/releases/gitea-1.27.json";

const createdAt = new Date(Date.now() - 60_000).toISOString().replace(/\.\d+Z$/, "Z");

function fresh<T extends { workflow_job: { created_at: string } }>(fixture: T): T {
  const copy = structuredClone(fixture);
  copy.workflow_job.created_at = createdAt;
  return copy;
}

export const queuedFixture = fresh(queued);
export const inProgressFixture = fresh(inProgress);
export const completedFixture = fresh(completed);

/** One delivery of a release's fixture set, and the assignment it must name. */
export interface ReleaseDelivery {
  action: string;
  assignment: string;
  workflow_job: Record<string, unknown> & { id: number; run_attempt: number; runner_id?: number; runner_name?: string };
}
export type ReleaseScenario = "first-run" | "rerun" | "cancel-before-pickup";

/** The Gitea releases the end-to-end tests play, and the fixture set whose numbering each sends. */
export const GITEA_RELEASES = ["1.26.2", "1.27.0"] as const;

/**
 * A release's deliveries of `scenario` (test/fixtures/gitea/releases), as full signed-ready
 * payloads created a minute ago; 1.24 and 1.25 number attempts as 1.26 does.
 */
export function releaseDeliveries(version: string, scenario: ReleaseScenario): (ReleaseDelivery & { payload: typeof queuedFixture })[] {
  const set = version.startsWith("1.27") ? gitea127 : gitea126;
  return (set.scenarios[scenario] as ReleaseDelivery[]).map((d) => {
    const payload = structuredClone(queuedFixture);
    payload.action = d.action;
    payload.workflow_job = { ...structuredClone(d.workflow_job), created_at: createdAt } as unknown as typeof payload.workflow_job;
    return { ...d, payload };
  });
}

/** The first run's queued, in_progress and completed payloads as Gitea `version` sends them. */
export function fixturesFor(version: string) {
  const [queued, inProgress, completed] = releaseDeliveries(version, "first-run").map((d) => d.payload) as unknown[];
  return { queued: queued as typeof queuedFixture, inProgress: inProgress as typeof inProgressFixture, completed: completed as typeof completedFixture };
}
