// What differs between the Gitea releases the fake Gitea plays (POST /_control/version), each rule
// read in Gitea's source at the commit named (go-gitea/gitea history: v1.24.7 = 99053ce4fa, main
// before the 1.25 branch = 7a474d1c95, 1.26 = aedf4e84 (main at the parent of #37119), 1.27 =
// 82edc3da (main four days after 1.27.0)). The dispatcher's reading of them is
// src/forge/gitea/versions.ts; docs/gitea.md has the table.

/** The fake's Gitea when none is chosen: the newest release modelled. */
export const DEFAULT_GITEA_VERSION = "1.27.0";
export const GITEA_VERSIONS = ["1.24.7", "1.25.5", "1.26.2", "1.27.0"];

const minorOf = (version) => {
  const m = /^v?1\.(\d+)/.exec(version);
  return m ? Number(m[1]) : 99;
};

/**
 * Attempt numbering. Before 1.27 a job is inserted with Attempt 0 (no Attempt in the ActionRunJob
 * literal: models/actions/run.go:318 at 99053ce4fa, services/actions/run.go:114-126 at aedf4e84) and `job.Attempt++` runs when a runner
 * takes it (models/actions/task.go:262 at 99053ce4fa and 7a474d1c95, :275 at aedf4e84). 1.27 (#37119)
 * inserts every job with its run attempt's number (services/actions/run.go:93,162 at 82edc3da) and
 * no longer increments at pickup (models/actions/task.go:309-325).
 */
export const numbersAtPickup = (version) => minorOf(version) <= 26;

/** The jobs and runners lists and one job's GET: 1.25 and later (routers/api/v1/api.go at 7a474d1c95; absent at 99053ce4fa). */
export const hasLists = (version) => minorOf(version) >= 25;

/** GET …/actions/runs/{run} and …/runs/{run}/jobs: 1.25 and later (api.go:1288-1292 at 7a474d1c95; absent at 99053ce4fa). */
export const hasRunApi = (version) => minorOf(version) >= 25;

/**
 * The run's `run_attempt` in GET runs/{run}: never set before 1.27 (services/convert/convert.go
 * ToActionWorkflowRun, :250-275 at aedf4e84, no RunAttempt; the field has no omitempty), so 0; 1.27
 * gives the latest attempt's number (convert.go:262-314 at 82edc3da).
 */
export const runAttemptShown = (version, latest) => (minorOf(version) >= 27 ? latest : 0);

/**
 * The rerun API (POST runs/{run}/jobs/{job_id}/rerun, #36768, 2026-03-02): none before 1.26;
 * 1.26 reruns the job row itself (services/actions/rerun.go:169-215 at aedf4e84: task_id 0,
 * status waiting, started and stopped 0, Attempt untouched) and answers 201 with it
 * (routers/api/v1/repo/action.go:1318-1380); 1.27 makes attempt n+1 whose jobs are new rows
 * (services/actions/rerun.go:188-358, cloneRunJobForAttempt :503 at 82edc3da) and answers 201
 * with the new job (action.go:1584-1595). Both refuse a run that is not done with 400
 * (rerun.go:76-77 at aedf4e84, :72 at 82edc3da).
 */
export const rerunKind = (version) => (minorOf(version) >= 27 ? "new-job" : minorOf(version) >= 26 ? "same-job" : "none");

/** 1.27's [actions].MAX_RERUN_ATTEMPTS default (services/actions/rerun.go:104-114, custom/conf/app.example.ini). */
export const MAX_RERUN_ATTEMPTS = 50;

/** PATCH runners/{id} {disabled}: 1.26 and later (#36776). */
export const canDisableRunners = (version) => minorOf(version) >= 26;
