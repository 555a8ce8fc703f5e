// What each Gitea release sends about a job's attempts, read from Gitea's source (docs/gitea.md,
// "Versions"; the citations are in test/fixtures/gitea/README.md). Pure: which release answers is
// found by release.ts.
//
// - 1.24 to 1.26 number attempts on the job row at pickup: a job is inserted with Attempt 0
//   (services/actions/run.go), `job.Attempt++` runs in CreateTaskForRunner
//   (models/actions/task.go:262 at v1.24.7, :275 at aedf4e84), and the webhook and the API carry
//   `job.Attempt` (services/convert/convert.go:376 at aedf4e84). A rerun (1.26's API, or the web UI)
//   reuses the row with task_id 0 and leaves Attempt alone (services/actions/rerun.go:175-207).
// - 1.27 numbers attempts per run (#37119): every job of attempt n is its own row, inserted with
//   Attempt n (services/actions/run.go:93,162 at 82edc3da); pickup no longer increments
//   (models/actions/task.go:309-325); a rerun clones the latest attempt's jobs into new rows
//   (services/actions/rerun.go:197,503).

/** How a release numbers a job's attempts. */
export type AttemptNumbering = "at-pickup" | "per-run";

/** What a release's rerun API does: none (1.24, 1.25), the same job row again (1.26), a new job in a new attempt (1.27). */
export type RerunKind = "none" | "same-job" | "new-job";

export interface GiteaRelease {
  /** The version Gitea reported (GET /api/v1/version), or how it was chosen. */
  version: string;
  numbering: AttemptNumbering;
  reruns: RerunKind;
  /** Set when the release is none this dispatcher was built against: what it is served as, and why. */
  unknown?: string;
}

/** The newest release whose behaviour is modelled; anything newer is served as it. */
export const NEWEST_KNOWN_MINOR = 27;
const OLDEST_KNOWN_MINOR = 24;

/** The behaviour of Gitea `version` ("1.26.2", "1.27.0+dev-12-gabc", "v1.25.0"). Pure. */
export function releaseOf(version: string): GiteaRelease {
  const m = /^v?(\d+)\.(\d+)(?:[.\-+]|$)/.exec(version.trim());
  const major = m ? Number(m[1]) : NaN;
  const minor = m ? Number(m[2]) : NaN;
  if (major === 1 && minor >= OLDEST_KNOWN_MINOR && minor <= 26) return { version, numbering: "at-pickup", reruns: minor >= 26 ? "same-job" : "none" };
  if (major === 1 && minor === NEWEST_KNOWN_MINOR) return { version, numbering: "per-run", reruns: "new-job" };
  // Before 1.24 the row was numbered the same way (the increment is older than the workflow_job webhook).
  if (major === 1 && minor < OLDEST_KNOWN_MINOR)
    return { version, numbering: "at-pickup", reruns: "none", unknown: `Gitea ${version} is older than 1.24, which this dispatcher was not tested against` };
  const why = m
    ? `Gitea ${version} is newer than 1.${NEWEST_KNOWN_MINOR}`
    : `Gitea's version ${JSON.stringify(version.slice(0, 40))} is not one this dispatcher can read`;
  return { version, numbering: "per-run", reruns: "new-job", unknown: `${why}: served as 1.${NEWEST_KNOWN_MINOR}` };
}

/** A job as a delivery or a list gives it: what its execution number is read from. */
export interface AttemptFacts {
  run_attempt?: number | undefined;
  status?: string | undefined;
  runner_id?: number | null | undefined;
}

/**
 * Which execution of its job a delivery (`action`) or a listed job (its `status`) is about: 1 for
 * the first, one more for each rerun of the same job row. It is the same for every delivery of one
 * execution, whatever the release, so that `queued`, `in_progress` and `completed` name one
 * assignment. Pure.
 *
 * At pickup numbering the row says the count before the pickup until a runner took it: `queued`,
 * `waiting` and a `completed` without a runner (cancelled before pickup) carry one less than
 * `in_progress` and a `completed` after a runner ran it. Per run, every delivery carries the run's
 * attempt; 0 is a job inserted before 1.27 (a legacy row, never rerun), its first execution.
 */
export function executionOf(numbering: AttemptNumbering, job: AttemptFacts, action?: string): number {
  const raw = Math.max(0, job.run_attempt ?? 0);
  if (numbering === "per-run") return Math.max(1, raw);
  const state = action ?? job.status ?? "queued";
  const pickedUp = state === "in_progress" || (state === "completed" && (job.runner_id ?? 0) > 0);
  return pickedUp ? Math.max(1, raw) : raw + 1;
}
