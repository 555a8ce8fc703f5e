// Reruns of a job lost with its runner, as each Gitea release does them (versions.ts):
// - 1.24, 1.25: no rerun API (routers/api/v1/api.go has none before #36768, 2026-03-02): by hand.
// - 1.26: the same job row runs again (services/actions/rerun.go:169-215 at aedf4e84: task_id 0,
//   status waiting, Attempt untouched; it rises at the next pickup). Whether it took is read on the
//   job itself: the run's run_attempt is always 0 there (convert.go ToActionWorkflowRun never sets it).
// - 1.27: a rerun makes attempt n+1 of the run with new job rows (rerun.go:197,503 at 82edc3da)
//   and answers 201 with the new job (routers/api/v1/repo/action.go:1584-1595). The endpoint finds
//   the job among the latest attempt's only (action.go:1294, else 404 "workflow job not found"), so
//   a job of an earlier attempt is asked for by its copy there, found by name. A copy that was not
//   rerun is a pass-through clone: it keeps the template's started time (rerun.go:293-296).
import type { LostJob, JobReruns, RerunAsked, RerunLook } from "../../domain/forge.ts";
import type { ApiJob, ApiRun, GiteaClient } from "./client.ts";
import { jobAssignmentId } from "./webhook.ts";
import { executionOf, type GiteaRelease } from "./versions.ts";

/** A run's status once it finished: GitHub's word, and Gitea's own results. */
const RUN_DONE = new Set(["completed", "success", "failure", "cancelled", "skipped"]);

/** What a look at the forge read: the run, the lost job, and (1.27, a later attempt) the latest attempt's jobs. */
export interface RerunFacts {
  run: ApiRun | null;
  job: ApiJob | null;
  latest?: ApiJob[] | null;
}

/** Where the lost job's rerun stands, from what was read. Pure. */
export function lookAt(release: GiteaRelease, lost: LostJob, facts: RerunFacts): RerunLook {
  if (release.reruns === "none") return { step: "by_hand", reason: `Gitea ${release.version} has no rerun API (1.26 and later have): rerun it by hand` };
  const { run, job } = facts;
  if (!run) return { step: "by_hand", reason: "Gitea has no such run any more: rerun it by hand" };
  // A job lost with its runner fails (Gitea gives up on its task); one cancelled, or in a cancelled run, was not lost to that.
  if (job?.conclusion === "cancelled") return { step: "settled", reason: "the job was cancelled (by a person, or by a newer run of the workflow): not rerun" };
  if (run.conclusion === "cancelled") return { step: "settled", reason: "its run was cancelled (by a person, or by a newer run of the workflow): not rerun" };
  const done = RUN_DONE.has(run.status);
  if (release.reruns === "same-job") {
    if (!job) return { step: "by_hand", reason: "Gitea has no such job any more: rerun it by hand" };
    // Queued again, or taken again since: a later execution of the same row.
    const now = executionOf("at-pickup", job);
    if (now > lost.execution) return { step: "rerun", next: jobAssignmentId(lost.job, now) };
    return job.status === "completed" && done ? { step: "ask", job: lost.job } : { step: "wait" };
  }
  const attempt = run.run_attempt ?? 0;
  if (attempt <= lost.execution) return done ? { step: "ask", job: lost.job } : { step: "wait" };
  // A later attempt: this job's copy there was either rerun or passed through with its old result.
  if (!job) return { step: "by_hand", reason: "Gitea has no such job any more: rerun it by hand" };
  const copies = (facts.latest ?? []).filter((j) => j.name === job.name);
  if (copies.length !== 1)
    return { step: "by_hand", reason: `the run's attempt ${attempt} has ${copies.length ? "several jobs" : "no job"} of this job's name: rerun it by hand` };
  const copy = copies[0]!;
  if (copy.status !== "completed" || copy.started_at !== job.started_at) return { step: "rerun", next: jobAssignmentId(copy.id, executionOf("per-run", copy)) };
  return done ? { step: "ask", job: copy.id } : { step: "wait" };
}

/** What Gitea's answer to a rerun means. Pure. */
export function askedAnswer(release: GiteaRelease, lost: LostJob, answer: { asked: ApiJob } | { refused: number }): RerunAsked {
  if ("asked" in answer) {
    // 1.26 reran the row itself: its next execution; 1.27 answered with the new attempt's job.
    const next =
      release.reruns === "same-job" ? jobAssignmentId(lost.job, lost.execution + 1) : jobAssignmentId(answer.asked.id, executionOf("per-run", answer.asked));
    return { step: "rerun", next };
  }
  const status = answer.refused;
  // 1.27: not in the latest attempt (404) or made by another rerun first (409): look again.
  if (release.reruns === "new-job" && (status === 404 || status === 409)) return { step: "wait", reason: `Gitea answered ${status}` };
  if (status === 404) return { step: "by_hand", reason: "Gitea has no such job any more: rerun it by hand" };
  if (status === 405) return { step: "by_hand", reason: `Gitea ${release.version} has no rerun API: rerun it by hand` };
  // 400: past MAX_RERUN_ATTEMPTS (1.27), or the run is not done after all; 403: the token may not.
  return { step: "refused", reason: `Gitea refused the rerun (${status}): rerun it by hand` };
}

/** The reruns of the Gitea behind `client`, as `release()` says it numbers them. */
export function giteaReruns(client: GiteaClient, release: () => Promise<GiteaRelease>): JobReruns {
  return {
    async look(lost) {
      const r = await release();
      if (r.reruns === "none") return lookAt(r, lost, { run: null, job: null });
      const [run, job] = await Promise.all([client.getRun(lost.repository, lost.run), client.getJob(lost.repository, lost.job)]);
      const later = r.reruns === "new-job" && run && (run.run_attempt ?? 0) > lost.execution;
      const latest = later ? await client.listRunJobs(lost.repository, lost.run) : undefined;
      return lookAt(r, lost, { run, job, latest });
    },
    async ask(lost, id) {
      const r = await release();
      return askedAnswer(r, lost, await client.rerunJob(lost.repository, lost.run, id));
    },
  };
}
