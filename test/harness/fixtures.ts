// The Gitea webhook fixtures, as Gitea would send them now: the job was created a minute ago.
// The dispatcher checks a queued job's age (a delivery older than the record TTL may be a replay),
// so fixed dates would make the suites fail once the calendar passes them.
import completed from "../fixtures/gitea/workflow_job.completed.json";
import inProgress from "../fixtures/gitea/workflow_job.in_progress.json";
import queued from "../fixtures/gitea/workflow_job.queued.json";

const createdAt = new Date(Date.now() - 60_000).toISOString().replace(/\.\d+Z$/, "Z");

function fresh<T extends { workflow_job: { created_at: string } }>(fixture: T): T {
  const copy = structuredClone(fixture);
  copy.workflow_job.created_at = createdAt;
  return copy;
}

export const queuedFixture = fresh(queued);
export const inProgressFixture = fresh(inProgress);
export const completedFixture = fresh(completed);
