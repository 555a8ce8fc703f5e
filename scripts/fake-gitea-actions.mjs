// The Actions side of the fake Gitea, as Gitea hands work to polling runners: a workflow queues
// jobs; a registered runner's FetchTask (act_runner polls it every fetch interval, authenticated by
// x-runner-uuid and x-runner-token) is given the oldest queued job whose runs-on its label names
// cover; its UpdateTask with a result ends the job, and an ephemeral runner is deleted then. Each
// step sends the workflow_job webhook real Gitea sends (queued, in_progress with the runner's id
// and name, completed with the conclusion), signed like Gitea's: to a URL when one is set, else
// kept for the test to deliver (`/_control/deliveries`), as a Worker under test has no address.
import { createHmac, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { authenticatedRunner } from "./fake-http.mjs";
import { MAX_RERUN_ATTEMPTS, numbersAtPickup, rerunKind, runAttemptShown } from "./fake-gitea-releases.mjs";

const fixture = JSON.parse(readFileSync(new URL("../test/fixtures/gitea/workflow_job.queued.json", import.meta.url), "utf8"));
const ZERO = "0001-01-01T00:00:00Z";
const RESULTS = { 1: "success", 2: "failure", 3: "cancelled", 4: "skipped" };
// protojson writes an enum by name; a number is accepted too.
const RESULT_NAMES = { RESULT_SUCCESS: 1, RESULT_FAILURE: 2, RESULT_CANCELLED: 3, RESULT_SKIPPED: 4 };
const iso = (ms = Date.now()) => new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");
const labelName = (l) => (l.includes(":") ? l.slice(0, l.indexOf(":")) : l);

export const newActions = (onTake) => ({ webhook: { url: undefined, secret: "" }, outbox: [], nextTask: 1, tasksVersion: 1, nextJob: 5000, taken: [], onTake });

/**
 * A job of a workflow run, as Gitea lists it; `repository` is "owner/name". Its attempt is what
 * the release inserts (fake-gitea-releases.mjs numbersAtPickup): 0 before 1.27, the run's attempt
 * (1 for a new run) on 1.27.
 */
export function queueJob(g, job) {
  const a = g.actions;
  const id = job.id ?? a.nextJob++;
  const repository = job.repository ?? "acme/widgets";
  const run = job.run_id ?? id;
  const created = {
    id,
    run_id: run,
    run_attempt: job.run_attempt ?? (numbersAtPickup(g.version) ? 0 : 1),
    name: job.name ?? "build",
    labels: job.labels ?? ["ubuntu-latest"],
    // The branch of the run's ref, "" for a pull request's or a tag's (services/convert ToActionWorkflowJob).
    head_branch: job.head_branch ?? "main",
    status: "queued",
    url: `https://gitea.example.com/api/v1/repos/${repository}/actions/jobs/${id}`,
    html_url: `https://gitea.example.com/${repository}/actions/runs/${run}/jobs/0`,
    created_at: iso(),
    queuedAt: Date.now(),
    started_at: ZERO,
    completed_at: ZERO,
    repository,
    runMs: job.runMs,
  };
  g.jobs.push(created);
  a.tasksVersion++;
  emit(g, "queued", created);
  return created;
}

/** The job ends without a runner (cancelled before pickup), or is cancelled while it runs. */
export function cancelJob(g, id) {
  const job = g.jobs.find((j) => j.id === id && j.status !== "completed");
  if (!job) return undefined;
  finish(g, job, "cancelled");
  return job;
}

/** Connect RPCs of runner.v1.RunnerService a registered runner calls; false when `path` is none of them. */
export function runnerRpc(g, path, req, text, send) {
  const rpc = /^\/api\/actions\/runner\.v1\.RunnerService\/(FetchTask|UpdateTask|Declare|UpdateLog)$/.exec(path)?.[1];
  if (!rpc) return false;
  answer(g, rpc, req, text, send);
  return true;
}

function answer(g, rpc, req, text, send) {
  const authenticated = authenticatedRunner(g.runners, req, text, send);
  if (!authenticated) return;
  const { runner, msg } = authenticated;
  if (rpc === "Declare") return send(200, { runner: { id: String(runner.id), uuid: runner.uuid, name: runner.name, labels: runner.labels } });
  if (rpc === "UpdateLog") return send(200, { ackIndex: String(msg.index ?? 0) });
  if (rpc === "FetchTask") {
    const task = runner.task || runner.disabled ? undefined : take(g, runner);
    return send(200, { ...(task ? { task } : {}), tasksVersion: String(g.actions.tasksVersion) });
  }
  const job = g.jobs.find((j) => j.taskId === Number(msg.state?.id) && j.runner_id === runner.id);
  if (!job) return send(404, { code: "not_found", message: "task not found" });
  const code = msg.state?.result;
  const result = RESULTS[RESULT_NAMES[code] ?? code];
  if (result && job.status !== "completed") finish(g, job, result);
  return send(200, { state: { id: String(job.taskId), result: msg.state?.result ?? 0 }, sentOutputs: [] });
}

/** Whether a job of `repository` ("owner/name") is in a scope: the instance, its owner (org or user), or itself. */
export function inScope(scope = { kind: "admin" }, repository) {
  const [owner, repo] = repository.toLowerCase().split("/");
  if (scope.kind === "admin") return true;
  return scope.owner === owner && (scope.kind !== "repo" || scope.repo === repo);
}

/** The runner named `name` polls once (FetchTask) and is given what Gitea's pick gives it; the job taken, or undefined. */
export function pickUp(g, name) {
  const runner = [...g.runners.values()].find((r) => r.name === name);
  if (!runner || runner.task) return undefined;
  take(g, runner);
  return g.jobs.find((j) => j.taskId === runner.task);
}

/** Gitea's pick: the oldest queued job of the runner's scope whose every runs-on label is one of the runner's label names. */
function take(g, runner) {
  const names = new Set(runner.labels.map(labelName));
  const fits = (j) =>
    j.status === "queued" && inScope(runner.scope, j.repository ?? "acme/widgets") && j.labels?.length > 0 && j.labels.every((l) => names.has(l));
  const job = g.jobs.filter(fits).sort((a, b) => a.id - b.id)[0];
  if (!job) return undefined;
  // Before 1.27 the row's attempt rises as a runner takes it (models/actions/task.go:275 at aedf4e84, `job.Attempt++`).
  if (numbersAtPickup(g.version)) job.run_attempt++;
  Object.assign(job, {
    status: "in_progress",
    started_at: iso(),
    startedMs: Date.now(),
    runner_id: runner.id,
    runner_name: runner.name,
    taskId: g.actions.nextTask++,
  });
  runner.task = job.taskId;
  g.actions.tasksVersion++;
  const took = { job: job.id, runner: runner.name, at: Date.now(), queuedAt: job.queuedAt ?? Date.parse(job.created_at) };
  g.actions.taken.push(took);
  g.actions.onTake?.({ job: job.id, runner: runner.name, waitedMs: took.at - took.queuedAt });
  emit(g, "in_progress", job);
  // What a runner needs to run it; the fake runner reads only how long to take (`run_ms`).
  return {
    id: String(job.taskId),
    context: { repository: job.repository, job: job.name, ...(job.runMs !== undefined ? { run_ms: job.runMs } : {}) },
    secrets: {},
    needs: {},
    vars: {},
  };
}

function finish(g, job, conclusion) {
  Object.assign(job, { status: "completed", conclusion, completed_at: iso(), completedMs: Date.now() });
  g.actions.tasksVersion++;
  const runner = job.runner_id !== undefined ? g.runners.get(job.runner_id) : undefined;
  if (runner) runner.task = undefined;
  emit(g, "completed", job);
  // Gitea deletes an ephemeral runner once its task is done.
  if (runner?.ephemeral) g.runners.delete(runner.id);
}

/** A job as Gitea's REST API lists it: without what only this fake keeps. */
export function publicJob(job) {
  const { runMs: _r, taskId: _t, queuedAt: _q, repository: _repo, startedMs: _s, completedMs: _c, ...listed } = job;
  return listed;
}

/** The workflow_job payload of `job` now, as Gitea builds it. */
export function payloadOf(action, job) {
  const { repository: named } = job;
  const listed = publicJob(job);
  const repository = named ?? /\/repos\/([^/]+\/[^/]+)\/actions\//.exec(job.url ?? "")?.[1] ?? "acme/widgets";
  const [owner, name] = repository.split("/");
  const workflow_job = { ...listed, status: action === "completed" ? "completed" : job.status };
  if (action !== "completed") delete workflow_job.conclusion;
  return {
    ...fixture,
    action,
    workflow_job,
    repository: { ...fixture.repository, name, full_name: repository, owner: { ...fixture.repository.owner, login: owner } },
  };
}

function emit(g, action, job) {
  const raw = JSON.stringify(payloadOf(action, job));
  const signature = createHmac("sha256", g.actions.webhook.secret).update(raw).digest("hex");
  const headers = {
    "content-type": "application/json",
    "x-gitea-event": "workflow_job",
    "x-gitea-event-type": "workflow_job",
    "x-gitea-delivery": randomUUID(),
    "x-gitea-signature": signature,
  };
  const delivery = { action, job: job.id, headers, body: raw };
  if (!g.actions.webhook.url) return void g.actions.outbox.push(delivery);
  // One attempt, no retry, as Gitea's deliverer.
  fetch(g.actions.webhook.url, { method: "POST", headers, body: raw, signal: AbortSignal.timeout(5_000) })
    .then((res) => res.body?.cancel())
    .catch(() => undefined);
}

/** The latest attempt of a run: its jobs' highest attempt (1.27 numbers every job of attempt n with n). */
const latestOf = (jobs) => Math.max(1, ...jobs.map((j) => j.run_attempt ?? 0));

const runJobs = (g, repository, run) => g.jobs.filter((j) => j.run_id === run && (j.repository ?? "acme/widgets") === repository);

/** The jobs GET runs/{run}/jobs lists: 1.27 the latest attempt's (ListWorkflowRunJobs, LatestAttemptID at 82edc3da), before every job of the run. */
export function jobsOfRun(g, repository, run) {
  const jobs = runJobs(g, repository, run);
  if (rerunKind(g.version) !== "new-job") return jobs;
  const latest = latestOf(jobs);
  return jobs.filter((j) => Math.max(1, j.run_attempt ?? 0) === latest);
}

/** A workflow run as Gitea's API gives it: completed once every job of its latest attempt is; run_attempt as the release shows it. */
export function runOf(g, repository, run) {
  const all = runJobs(g, repository, run);
  if (!all.length) return undefined;
  const jobs = jobsOfRun(g, repository, run);
  const done = jobs.every((j) => j.status === "completed");
  return {
    id: run,
    run_attempt: runAttemptShown(g.version, latestOf(all)),
    status: done ? "completed" : jobs.some((j) => j.status === "in_progress") ? "in_progress" : "queued",
    // Gitea's AggregateJobStatus (models/actions/run_job.go): success when every job succeeded (or was skipped), cancelled when any was, else failure.
    ...(done
      ? {
          conclusion: jobs.every((j) => ["success", "skipped"].includes(j.conclusion))
            ? "success"
            : jobs.some((j) => j.conclusion === "cancelled")
              ? "cancelled"
              : "failure",
        }
      : {}),
    html_url: `https://gitea.example.com/${repository}/actions/runs/${run}`,
  };
}

/**
 * A job's rerun (POST runs/{run}/jobs/{job}/rerun) as the release does it (fake-gitea-releases.mjs
 * rerunKind): { status, body } of Gitea's answer. Refused (400) while the run is not done. 1.26
 * queues the same row again with its attempt untouched; 1.27 makes attempt n+1: every job of the
 * latest attempt is copied into a new row, the job asked for is queued (it alone gets a webhook,
 * rerun.go:358), the others pass through with their result and times (rerun.go:290-296).
 */
export function rerunJob(g, repository, run, id) {
  const found = runOf(g, repository, run);
  const kind = rerunKind(g.version);
  const latest = found ? jobsOfRun(g, repository, run) : [];
  const job = latest.find((j) => j.id === id);
  // 1.27 looks the job up among the latest attempt's only (action.go:1294, 1563: "workflow job not found").
  if (!found || !job || kind === "none") return { status: 404, body: { message: "workflow job not found" } };
  if (found.status !== "completed") return { status: 400, body: { message: "this workflow run is not done" } };
  const queued = {
    status: "queued",
    conclusion: undefined,
    started_at: ZERO,
    completed_at: ZERO,
    queuedAt: Date.now(),
    runner_id: undefined,
    runner_name: undefined,
    taskId: undefined,
  };
  let rerun = job;
  if (kind === "same-job") Object.assign(job, queued);
  else {
    const attempt = latestOf(latest) + 1;
    if (attempt > MAX_RERUN_ATTEMPTS) return { status: 400, body: { message: `workflow run has reached the maximum of ${MAX_RERUN_ATTEMPTS} attempts` } };
    for (const old of latest) {
      const copy = { ...old, id: g.actions.nextJob++, run_attempt: attempt, runner_id: undefined, runner_name: undefined, taskId: undefined };
      copy.url = old.url.replace(/\/jobs\/\d+$/, `/jobs/${copy.id}`);
      if (old === job) rerun = Object.assign(copy, queued);
      g.jobs.push(copy);
    }
  }
  delete rerun.conclusion;
  delete rerun.runner_name;
  g.actions.tasksVersion++;
  g.actions.reruns = (g.actions.reruns ?? 0) + 1;
  emit(g, "queued", rerun);
  return { status: 201, body: publicJob(rerun) };
}

/** Gitea gives up on a task whose runner went silent (its zombie-task timeout, fast-forwarded): the job fails. */
export function failLostJob(g, id) {
  const job = g.jobs.find((j) => j.id === id && j.status !== "completed");
  if (!job) return undefined;
  finish(g, job, "failure");
  return job;
}
