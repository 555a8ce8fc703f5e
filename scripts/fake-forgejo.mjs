// A Forgejo 15 that follows the contract the dispatcher relies on (test/fixtures/upstream-schemas/
// forgejo-v15.json and forgejo-v15-webhooks.md), for tests and `FORGE=forgejo npm start`:
// the waiting list of a scope (newest first, `null` when empty, not paginated), runners registered
// over REST (201 {id, uuid, token}; 422 without a name), listed as a bare array, deleted (204/404);
// the runner protocol's Declare, FetchTask and FetchSingleTask (a handle gets that attempt and no
// other, and only when it waits and its runs_on are all among the runner's labels), UpdateTask
// (an ephemeral runner is deleted after its task); cancels; and run-level webhooks once every job
// of a run is done, signed like Forgejo's. Tests share one server; each uses a path prefix.
import { createHmac, randomBytes, randomUUID } from "node:crypto";
import { authenticatedRunner, startTenantServer } from "./fake-http.mjs";

export const FAKE_FORGEJO = { apiToken: "forgejo-api-token-0000", user: "alice" };
const DONE = new Set(["success", "failure", "cancelled", "skipped"]);
const RESULTS = {
  RESULT_SUCCESS: "success",
  RESULT_FAILURE: "failure",
  RESULT_CANCELLED: "cancelled",
  RESULT_SKIPPED: "skipped",
  1: "success",
  2: "failure",
  3: "cancelled",
  4: "skipped",
};
const labelName = (l) => (l.includes(":") ? l.slice(0, l.indexOf(":")) : l);

const newInstance = (onTake) => ({
  version: "15.0.3+gitea-1.22.0",
  apiToken: FAKE_FORGEJO.apiToken,
  runners: new Map(),
  nextRunner: 1,
  jobs: [],
  nextJob: 7000,
  nextTask: 1,
  tasksVersion: 1,
  requests: [],
  registrations: 0,
  // Faults: the jobs list answers this status (0: normally), or drops the connection ("down").
  jobsFault: 0,
  registerFault: 0,
  webhook: { url: undefined, secret: "" },
  outbox: [],
  taken: [],
  onTake,
});

export function startFakeForgejo({ onTake } = {}) {
  return startTenantServer(() => newInstance(onTake), serve, { contentType: "application/json;charset=utf-8" });
}

function serve({ req, res, text, url, path, tenant: g, send }) {
  if (path.startsWith("/_control/")) return control(g, path.slice(10), req.method, text, send);
  g.requests.push({ method: req.method, path, search: url.search, headers: req.headers, body: text, at: Date.now() });
  const apiError = (status, message) => send(status, { message, url: "http://forgejo.example.com/api/swagger" });
  const rpc = /^\/api\/actions\/runner\.v1\.RunnerService\/(\w+)$/.exec(path)?.[1];
  if (rpc) return runnerRpc(g, rpc, req, text, send);
  if (!path.startsWith("/api/v1/")) return apiError(404, "not found");
  if (!/^(token|bearer) /i.test(req.headers.authorization ?? "") || req.headers.authorization.replace(/^\S+ /, "") !== g.apiToken)
    return apiError(401, "token is required");
  if (path === "/api/v1/version" && req.method === "GET") return send(200, { version: g.version });
  // repoGetByID: a repository by id, as the token sees it (a private one it may not read is a 404).
  const byId = /^\/api\/v1\/repositories\/(\d+)$/.exec(path);
  if (byId && req.method === "GET") {
    if (g.repositoryFault === "down") return req.socket.destroy();
    if (g.repositoryFault) return apiError(g.repositoryFault, "refused");
    const job = g.jobs.find((j) => j.repo_id === Number(byId[1]));
    if (!job) return apiError(404, "The target couldn't be found.");
    return send(200, {
      id: job.repo_id,
      name: job.repo,
      full_name: `${job.owner}/${job.repo}`,
      owner: { id: job.owner_id, login: job.owner },
      private: false,
      fork: false,
      empty: false,
    });
  }
  const scoped = /^\/api\/v1\/(admin|user|orgs\/[^/]+|repos\/[^/]+\/[^/]+)\/actions\/runners(\/jobs|\/\d+)?$/.exec(path);
  if (!scoped) return apiError(404, "not found");
  const parts = decodeURIComponent(scoped[1]).toLowerCase().split("/");
  const scope =
    parts[0] === "admin"
      ? { kind: "admin" }
      : parts[0] === "user"
        ? { kind: "user", owner: FAKE_FORGEJO.user }
        : parts[0] === "orgs"
          ? { kind: "org", owner: parts[1] }
          : { kind: "repo", owner: parts[1], repo: parts[2] };
  const tail = scoped[2] ?? "";
  if (tail === "/jobs" && req.method === "GET") {
    if (g.jobsFault === "down") return req.socket.destroy();
    if (g.jobsFault) return apiError(g.jobsFault, "internal server error");
    const labels = url.searchParams.get("labels");
    const listed = g.jobs
      .filter((j) => (j.status === "waiting" || j.status === "running") && inScope(scope, j))
      .filter((j) => labels === null || (labels === "" ? j.runs_on.length === 0 : runsOn(j, labels.split(","))))
      .sort((a, b) => b.id - a.id)
      .map((j) => publicJob(j, g.version));
    // `var res []*structs.ActionRunJob` encoded as is: no match is null, with a trailing newline.
    res.writeHead(200, { "content-type": "application/json;charset=utf-8" });
    return res.end(`${JSON.stringify(listed.length ? listed : null)}\n`);
  }
  const visible = (r) => sameScope(r.scope, scope);
  if (tail === "" && req.method === "POST") {
    if (g.registerFault) return apiError(g.registerFault, g.registerFault === 422 ? "[Name]: Required" : "refused");
    if (g.registerRepoFault && scope.kind === "repo")
      return apiError(g.registerRepoFault, "user should be an owner or a collaborator with admin write of a repository");
    let body;
    try {
      body = JSON.parse(text || "{}");
    } catch {
      return apiError(422, "invalid JSON");
    }
    if (!body.name) return apiError(422, "[Name]: Required");
    const runner = {
      id: g.nextRunner++,
      uuid: randomUUID(),
      token: randomBytes(20).toString("hex"),
      name: body.name,
      ephemeral: body.ephemeral === true,
      labels: [],
      scope,
    };
    g.runners.set(runner.id, runner);
    g.registrations++;
    return send(201, { id: runner.id, uuid: runner.uuid, token: runner.token });
  }
  if (tail === "" && req.method === "GET") {
    const page = Number(url.searchParams.get("page") ?? 1);
    // Clamped to [api].MAX_RESPONSE_ITEMS (services/convert/utils.go:15-22 at v15.0.3; 50 by default, 30 when no limit is given: modules/setting/api.go:24-25).
    const limit = Math.min(Number(url.searchParams.get("limit") ?? 30), g.maxResponseItems ?? 50);
    const all = [...g.runners.values()].filter(visible).map(apiRunner);
    res.writeHead(200, { "content-type": "application/json;charset=utf-8", "x-total-count": String(all.length) });
    return res.end(JSON.stringify(all.slice((page - 1) * limit, page * limit)));
  }
  const r = g.runners.get(Number(tail.slice(1)));
  if (!r || !visible(r)) return apiError(404, "runner not found");
  if (req.method === "GET") return send(200, apiRunner(r));
  if (req.method === "DELETE") {
    g.runners.delete(r.id);
    res.writeHead(204);
    return res.end();
  }
  return apiError(405, "method not allowed");
}

function inScope(scope, job) {
  if (scope.kind === "admin") return true;
  return scope.owner === job.owner && (scope.kind !== "repo" || scope.repo === job.repo);
}
const sameScope = (a, b) => (b.kind === "admin" ? a.kind === "admin" : a.kind === b.kind && a.owner === b.owner && a.repo === b.repo);
/** `ItRunsOn`: every runs_on label among the runner's; false when either is empty. */
const runsOn = (job, labels) => job.runs_on.length > 0 && labels.length > 0 && job.runs_on.every((l) => labels.includes(l));

/**
 * A job as the runners' jobs list gives it (modules/structs/action.go:12-33 at v15.0.3); Forgejo 16
 * adds its run's id (92863bb1, #12480: modules/structs/action.go:15-16, services/convert/action.go:67-84
 * on v16.0/forgejo), which 15 does not list.
 */
function publicJob(j, version = "15") {
  return {
    id: j.id,
    ...(Number(/^v?(\d+)/.exec(version)?.[1] ?? 0) >= 16 ? { run_id: j.run } : {}),
    attempt: j.attempt,
    handle: j.handle,
    name: j.name,
    needs: null,
    owner_id: j.owner_id,
    repo_id: j.repo_id,
    runs_on: j.runs_on,
    status: j.status,
    task_id: j.task_id,
  };
}
/**
 * A runner unheard of for a minute is offline, one with a task active, else idle (RunnerOfflineTime
 * and Status(), models/actions/runner.go:73,104-112 at v15.0.3; the names, modules/structs/repo_actions.go:36-52).
 */
function apiRunner(r) {
  const status = r.task !== undefined ? "active" : r.lastOnline !== undefined && Date.now() - r.lastOnline < 60_000 ? "idle" : "offline";
  return {
    id: r.id,
    uuid: r.uuid,
    name: r.name,
    ephemeral: r.ephemeral,
    labels: r.labels,
    status,
    owner_id: 0,
    repo_id: 0,
    version: r.version ?? "",
    description: "",
  };
}

function runnerRpc(g, rpc, req, text, send) {
  const authenticated = authenticatedRunner(g.runners, req, text, send);
  if (!authenticated) return;
  const { runner, msg } = authenticated;
  if (rpc === "Declare") {
    runner.labels = (msg.labels ?? []).map(labelName);
    runner.version = msg.version ?? "";
    return send(200, { runner: { id: String(runner.id), uuid: runner.uuid, name: runner.name, labels: runner.labels, ephemeral: runner.ephemeral } });
  }
  if (rpc === "UpdateLog") return send(200, { ackIndex: String(msg.index ?? 0) });
  if (rpc === "FetchTask" || rpc === "FetchSingleTask") {
    const handle = rpc === "FetchSingleTask" && msg.handle ? msg.handle : undefined;
    // An ephemeral runner gets at most one task.
    const task = runner.task !== undefined || (runner.ephemeral && runner.hadTask) ? undefined : take(g, runner, handle);
    return send(200, { ...(task ? { task } : {}), tasksVersion: String(g.tasksVersion) });
  }
  if (rpc === "UpdateTask") {
    const job = g.jobs.find((j) => j.task_id === Number(msg.state?.id) && j.runnerId === runner.id);
    if (!job) return send(404, { code: "not_found", message: "task not found" });
    const result = RESULTS[msg.state?.result];
    if (result && !DONE.has(job.status)) finish(g, job, result);
    return send(200, { state: { id: String(job.task_id), result: msg.state?.result ?? 0 }, sentOutputs: [] });
  }
  return send(404, { code: "unimplemented", message: `no procedure ${rpc}` });
}

/**
 * A job of a `concurrency` group with cancel-in-progress false (queue({concurrency})) is listed
 * `waiting` but not picked while an earlier run's job of its group in the repository is waiting or
 * running: CONCURRENCY_GROUP_QUEUE_ENABLED is on by default (modules/setting/actions.go:39 at
 * v15.0.3), such a run gets QueueBehind (services/actions/workflows.go:247-265) and
 * getConcurrencyCondition keeps its jobs out of the pick (models/actions/task.go:253-291, applied at :310-312).
 */
const queuedBehind = (g, j) =>
  j.concurrency !== undefined &&
  g.jobs.some(
    (k) => k !== j && k.concurrency === j.concurrency && k.repo_id === j.repo_id && k.run < j.run && (k.status === "waiting" || k.status === "running"),
  );

/** Forgejo's pick: waiting, no task, in the runner's scope, oldest (updated, id) first; with a handle, only that attempt. */
function take(g, runner, handle) {
  const fits = (j) =>
    j.status === "waiting" &&
    j.task_id === 0 &&
    inScope(runner.scope, j) &&
    (handle === undefined || j.handle === handle) &&
    runsOn(j, runner.labels) &&
    !queuedBehind(g, j);
  const job = g.jobs.filter(fits).sort((a, b) => a.updated - b.updated || a.id - b.id)[0];
  if (!job) return undefined;
  Object.assign(job, { status: "running", task_id: g.nextTask++, runnerId: runner.id, startedMs: Date.now() });
  runner.task = job.task_id;
  runner.hadTask = true;
  g.tasksVersion++;
  const took = { job: job.id, attempt: job.attempt, handle: job.handle, runner: runner.name, at: Date.now(), queuedAt: job.queuedAt };
  g.taken.push(took);
  g.onTake?.({ job: job.id, runner: runner.name, waitedMs: took.at - took.queuedAt });
  return {
    id: String(job.task_id),
    context: { repository: `${job.owner}/${job.repo}`, job: job.name, ...(job.runMs !== undefined ? { run_ms: job.runMs } : {}) },
    secrets: {},
    needs: {},
    vars: {},
  };
}

function finish(g, job, status) {
  const prior = job.status;
  Object.assign(job, { status, updated: Date.now() });
  g.tasksVersion++;
  const runner = job.runnerId !== undefined ? g.runners.get(job.runnerId) : undefined;
  if (runner) runner.task = undefined;
  // An ephemeral runner is deleted after its task, and when its task is stopped.
  if (runner?.ephemeral) g.runners.delete(runner.id);
  const run = g.jobs.filter((j) => j.run === job.run);
  if (run.every((j) => DONE.has(j.status))) emitRun(g, job, run.every((j) => j.status === "success") ? "success" : "failure", prior);
}

function emitRun(g, job, action, prior) {
  const payload = {
    action,
    run: {
      id: job.run,
      title: "CI",
      repository: { id: job.repo_id, name: job.repo, full_name: `${job.owner}/${job.repo}` },
      workflow_id: "ci.yml",
      index_in_repo: job.run,
      status: action === "success" ? "success" : job.status,
      html_url: `http://forgejo.example.com/${job.owner}/${job.repo}/actions/runs/${job.run}`,
    },
    prior_status: prior,
  };
  const raw = JSON.stringify(payload, null, 2);
  const signature = g.webhook.secret ? createHmac("sha256", g.webhook.secret).update(raw).digest("hex") : "";
  const event = `action_run_${action}`;
  const headers = {
    "content-type": "application/json",
    "x-forgejo-event": event,
    "x-forgejo-event-type": event,
    "x-forgejo-delivery": randomUUID(),
    "x-forgejo-signature": signature,
    "x-hub-signature-256": `sha256=${signature}`,
  };
  const delivery = { event, run: job.run, headers, body: raw };
  if (!g.webhook.url) return void g.outbox.push(delivery);
  fetch(g.webhook.url, { method: "POST", headers, body: raw, signal: AbortSignal.timeout(5_000) })
    .then((r) => r.body?.cancel())
    .catch(() => undefined);
}

/** A run queues jobs: [{runs_on, repository?: "owner/name", runMs?, id?, handle?, attempt?}]. */
function queue(g, specs) {
  const run = g.nextJob;
  return specs.map((s) => {
    const [owner, repo] = (s.repository ?? "acme/widgets").toLowerCase().split("/");
    const job = {
      id: s.id ?? g.nextJob++,
      run: s.run ?? run,
      attempt: s.attempt ?? 1,
      handle: s.handle ?? randomUUID(),
      name: s.name ?? "build",
      owner,
      repo,
      owner_id: ownerId(owner),
      repo_id: ownerId(`${owner}/${repo}`),
      runs_on: s.runs_on ?? ["ubuntu-latest"],
      status: "waiting",
      task_id: 0,
      updated: Date.now(),
      queuedAt: Date.now(),
      runMs: s.runMs,
      ...(s.concurrency ? { concurrency: s.concurrency } : {}),
    };
    g.jobs.push(job);
    g.tasksVersion++;
    return job;
  });
}
const ownerId = (name) => [...name].reduce((h, c) => (h * 31 + c.charCodeAt(0)) % 100_000, 7);

function control(g, what, method, text, send) {
  const body = () => JSON.parse(text || "{}");
  // An instance's [api].MAX_RESPONSE_ITEMS: {"max": n}.
  if (what === "max-response-items" && method === "POST") return send(200, { max: (g.maxResponseItems = body().max) });
  if (what === "queue" && method === "POST") return send(200, { jobs: queue(g, body()).map(publicJob) });
  if (what === "cancel" && method === "POST") {
    const job = g.jobs.find((j) => j.id === body().id && !DONE.has(j.status));
    if (job) finish(g, job, "cancelled");
    return send(200, { cancelled: job?.id ?? null });
  }
  // A rerun: the job's next attempt, with a fresh handle (or the one given: Forgejo's data gone
  // wrong). `sameAttempt`: the attempt listed again under another handle (wrong data too).
  if (what === "rerun" && method === "POST") {
    const { id, handle, sameAttempt } = body();
    const job = g.jobs.find((j) => j.id === id);
    if (!job) return send(404, { error: "no such job" });
    Object.assign(job, {
      attempt: job.attempt + (sameAttempt ? 0 : 1),
      handle: handle ?? randomUUID(),
      status: "waiting",
      task_id: 0,
      runnerId: undefined,
      updated: Date.now(),
      queuedAt: Date.now(),
    });
    g.tasksVersion++;
    return send(200, publicJob(job));
  }
  if (what === "fault" && method === "POST") {
    const f = body();
    if ("jobs" in f) g.jobsFault = f.jobs;
    if ("register" in f) g.registerFault = f.register;
    if ("repository" in f) g.repositoryFault = f.repository;
    if ("registerRepo" in f) g.registerRepoFault = f.registerRepo;
    return send(200, { jobs: g.jobsFault, register: g.registerFault, repository: g.repositoryFault });
  }
  if (what === "version" && method === "POST") return send(200, { version: (g.version = body().version) });
  // A repository renamed: its id (and its jobs) stay, its name changes.
  if (what === "rename" && method === "POST") {
    const { from, to } = body();
    const [owner, repo] = to.toLowerCase().split("/");
    const renamed = g.jobs.filter((j) => `${j.owner}/${j.repo}` === from.toLowerCase());
    for (const j of renamed) Object.assign(j, { owner, repo });
    return send(200, { renamed: renamed.length });
  }
  if (what === "webhook" && method === "POST") return send(200, (g.webhook = body()));
  if (what === "deliveries" && method === "POST") return send(200, { deliveries: g.outbox.splice(0) });
  if (what === "state")
    return send(200, { runners: [...g.runners.values()], jobs: g.jobs, taken: g.taken, registrations: g.registrations, requests: g.requests });
  return send(404, { error: "unknown control" });
}
