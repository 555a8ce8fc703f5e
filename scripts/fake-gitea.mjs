// A Gitea that follows the contract the dispatcher relies on, for tests and `npm start`: the runner
// Register RPC (Connect JSON), registration tokens, the jobs and runners lists and one job (Gitea 1.25+),
// runner deletion, `Authorization: token …` on the REST API and Gitea's 401/404 bodies.
// Tests share one server; each uses a path prefix (a sub-path install of Gitea) of its own.
import { startTenantServer } from "./fake-http.mjs";
import { randomUUID, randomBytes } from "node:crypto";
import { cancelJob, failLostJob, inScope, jobsOfRun, newActions, pickUp, publicJob, queueJob, rerunJob, runOf, runnerRpc } from "./fake-gitea-actions.mjs";
import { canDisableRunners, DEFAULT_GITEA_VERSION, hasLists, hasRunApi } from "./fake-gitea-releases.mjs";

export const FAKE_GITEA = { apiToken: "gitea-api-token-0000", registrationToken: "gitea-registration-token-0000" };

function newInstance(onTake) {
  // `users`: owners that are users, not organisations (lower case); `scopeTokens`: registration
  // tokens of the scopes other than the instance's, by "org:x" | "user:x" | "repo:o/r".
  return {
    version: DEFAULT_GITEA_VERSION,
    users: new Set(),
    scopeTokens: new Map(),
    runners: new Map(),
    nextRunnerId: 1,
    jobs: [],
    requests: [],
    registrations: 0,
    failDelete: [],
    delayMs: 0,
    apiToken: FAKE_GITEA.apiToken,
    registrationToken: FAKE_GITEA.registrationToken,
    actions: newActions(onTake),
  };
}

/** `onTake({ job, runner, waitedMs })` hears each job a runner is given (npm start prints them). */
export function startFakeGitea({ onTake } = {}) {
  return startTenantServer(() => newInstance(onTake), serve, { contentType: "application/json;charset=utf-8" });
  async function serve({ req, res, text, url, path, tenant: g, send }) {
    // A slow Gitea (POST /_control/delay {"ms": …}): the REST API answers that much later.
    if (g.delayMs && path.startsWith("/api/v1/")) await new Promise((r) => setTimeout(r, g.delayMs));
    // A slow runner registration ({"registerMs": …}): the Register RPC answers that much later.
    if (g.registerDelayMs && path.endsWith(".RunnerService/Register")) await new Promise((r) => setTimeout(r, g.registerDelayMs));
    const notFound = () => send(404, { errors: null, message: "not found", url: `http://gitea.example.com/api/swagger` });
    if (path.startsWith("/_control/")) return control(g, path.slice(10), req.method, text, send);
    g.requests.push({ method: req.method, path, search: url.search, headers: req.headers, body: text });

    if (path === "/api/actions/runner.v1.RunnerService/Register" && req.method === "POST") {
      if (!/^application\/json/.test(req.headers["content-type"] ?? "")) return send(415, { code: "invalid_argument", message: "unsupported content type" });
      let msg;
      try {
        msg = JSON.parse(text);
      } catch {
        return send(400, { code: "invalid_argument", message: "invalid JSON" });
      }
      if (!msg.token || !msg.name) return send(400, { code: "invalid_argument", message: "missing runner token, name" });
      // A registration token belongs to one scope, and so does the runner it registers.
      const at = msg.token === g.registrationToken ? { kind: "admin" } : [...g.scopeTokens].find(([, t]) => t === msg.token)?.[0];
      if (!at) return send(404, { code: "not_found", message: "runner registration token not found" });
      const scope = typeof at === "string" ? scopeOfKey(at) : at;
      const runner = {
        id: g.nextRunnerId++,
        uuid: randomUUID(),
        token: randomBytes(20).toString("hex"),
        name: msg.name,
        version: msg.version ?? "",
        labels: msg.labels ?? [],
        ephemeral: msg.ephemeral === true,
        scope,
      };
      g.runners.set(runner.id, runner);
      g.registrations++;
      // protojson renders int64 as a string.
      return send(200, { runner: { ...runner, id: String(runner.id) } });
    }

    if (runnerRpc(g, path, req, text, send)) return;
    if (!path.startsWith("/api/v1/")) return notFound();
    // Public on every release (routers/api/v1/api.go:973 at 99053ce4fa, :1029 at 82edc3da): setting.AppVer.
    if (path === "/api/v1/version" && req.method === "GET") return send(200, { version: g.version });
    if (req.headers.authorization !== `token ${g.apiToken}`) return send(401, { message: "token is required", url: "http://gitea.example.com/api/swagger" });
    const scoped = /^\/api\/v1\/(admin|user|orgs\/[^/]+|repos\/[^/]+\/[^/]+)\/actions\/(.*)$/.exec(path);
    if (!scoped) return notFound();
    const [, where, tail] = scoped;
    // Gitea's context: the instance (admin), an organisation, a user (the token's own, or the one
    // an administrator's token names in Sudo), or a repository. Names are case-insensitive.
    const parts = decodeURIComponent(where).toLowerCase().split("/");
    const scope =
      parts[0] === "admin"
        ? { kind: "admin" }
        : parts[0] === "user"
          ? { kind: "user", owner: (req.headers.sudo ?? "admin").toLowerCase() }
          : parts[0] === "orgs"
            ? { kind: "org", owner: parts[1] }
            : { kind: "repo", owner: parts[1], repo: parts[2] };
    if (scope.kind === "org" && g.users.has(scope.owner)) return notFound();
    if (tail === "runners/registration-token" && req.method === "POST") {
      if (scope.kind === "admin") return send(200, { token: g.registrationToken });
      const key = keyOfScope(scope);
      if (!g.scopeTokens.has(key)) g.scopeTokens.set(key, `reg-${randomBytes(8).toString("hex")}`);
      return send(200, { token: g.scopeTokens.get(key) });
    }
    // A runner is seen and changed only from its own scope, or the instance's (Gitea's EditableInContext).
    const editable = (r) => scope.kind === "admin" || ((r.scope ?? { kind: "admin" }).kind === scope.kind && keyOfScope(r.scope) === keyOfScope(scope));
    const modern = hasLists(g.version);
    if (tail === "jobs" && req.method === "GET") {
      if (!modern) return notFound();
      const status = url.searchParams.get("status");
      const page = Number(url.searchParams.get("page") ?? 1);
      // Clamped to [api].MAX_RESPONSE_ITEMS (default 50), as Gitea's and Forgejo's ListOptions are.
      const limit = Math.min(Number(url.searchParams.get("limit") ?? 30), g.maxResponseItems ?? 50);
      const all = g.jobs.filter((j) => (!status || j.status === status) && inScope(scope, j.repository ?? "acme/widgets"));
      return send(200, { total_count: all.length, jobs: all.slice((page - 1) * limit, page * limit).map(publicJob) });
    }
    if (tail === "runners" && req.method === "GET") {
      if (!modern) return notFound();
      const page = Number(url.searchParams.get("page") ?? 1);
      // Clamped to [api].MAX_RESPONSE_ITEMS (default 50), as Gitea's and Forgejo's ListOptions are.
      const limit = Math.min(Number(url.searchParams.get("limit") ?? 30), g.maxResponseItems ?? 50);
      const all = [...g.runners.values()].filter(editable).map(apiRunner);
      return send(200, { total_count: all.length, runners: all.slice((page - 1) * limit, page * limit) });
    }
    const oneRunner = /^runners\/(\d+)$/.exec(tail);
    if (oneRunner && req.method === "GET") {
      const r = g.runners.get(Number(oneRunner[1]));
      return r && editable(r) ? send(200, apiRunner(r)) : notFound();
    }
    // Gitea after 1.25: a disabled runner is handed no task.
    if (oneRunner && req.method === "PATCH" && canDisableRunners(g.version)) {
      const r = g.runners.get(Number(oneRunner[1]));
      if (!r || !editable(r)) return notFound();
      const body = JSON.parse(text || "{}");
      if (typeof body.disabled !== "boolean") return send(422, { message: "nil Disabled field", url: "http://gitea.example.com/api/swagger" });
      r.disabled = body.disabled;
      return send(200, apiRunner(r));
    }
    const one = /^jobs\/(\d+)$/.exec(tail);
    if (one && req.method === "GET" && path.startsWith("/api/v1/repos/")) {
      if (!modern) return notFound();
      const repo = /^\/api\/v1\/(repos\/[^/]+\/[^/]+)\//.exec(path)[1];
      // A job belongs to one repository: asked under another, Gitea finds none.
      const job = g.jobs.find((j) => j.id === Number(one[1]) && (!j.url || j.url.includes(`/api/v1/${repo}/`)));
      return job ? send(200, publicJob(job)) : notFound();
    }
    // A run, and (Gitea after 1.25) one job's rerun; Gitea 1.25 has no such route.
    const oneRun = /^runs\/(\d+)$/.exec(tail);
    const repoOf = () => /^\/api\/v1\/repos\/([^/]+\/[^/]+)\//.exec(path)?.[1];
    if (oneRun && req.method === "GET" && repoOf()) {
      const found = hasRunApi(g.version) ? runOf(g, repoOf(), Number(oneRun[1])) : undefined;
      return found ? send(200, found) : notFound();
    }
    // The jobs of a run (1.27: of its latest attempt), paged as Gitea's ListJobs (page, limit).
    const runJobList = /^runs\/(\d+)\/jobs$/.exec(tail);
    if (runJobList && req.method === "GET" && repoOf() && hasRunApi(g.version)) {
      if (!runOf(g, repoOf(), Number(runJobList[1]))) return notFound();
      const all = jobsOfRun(g, repoOf(), Number(runJobList[1]));
      const page = Number(url.searchParams.get("page") ?? 1);
      const limit = Math.min(Number(url.searchParams.get("limit") ?? 30), g.maxResponseItems ?? 50);
      return send(200, { total_count: all.length, jobs: all.slice((page - 1) * limit, page * limit).map(publicJob) });
    }
    const rerun = /^runs\/(\d+)\/jobs\/(\d+)\/rerun$/.exec(tail);
    if (rerun && req.method === "POST" && repoOf()) {
      const { status, body } = rerunJob(g, repoOf(), Number(rerun[1]), Number(rerun[2]));
      if (status === 404) return send(404, { errors: null, message: body.message, url: "http://gitea.example.com/api/swagger" });
      return send(status, status === 201 ? body : { message: body.message, url: "http://gitea.example.com/api/swagger" });
    }
    const del = /^runners\/(\d+)$/.exec(tail);
    if (del && req.method === "DELETE") {
      if (g.failDelete.includes(Number(del[1]))) return send(500, { message: "internal server error", url: "http://gitea.example.com/api/swagger" });
      const r = g.runners.get(Number(del[1]));
      if (!r || !editable(r)) return notFound();
      g.runners.delete(r.id);
      res.writeHead(204);
      return res.end();
    }
    return notFound();
  }
  function keyOfScope(s) {
    return s.kind === "admin" ? "admin" : s.kind === "repo" ? `repo:${s.owner}/${s.repo}` : `${s.kind}:${s.owner}`;
  }
  function scopeOfKey(key) {
    const [kind, rest] = key.split(/:(.*)/s);
    const [owner, repo] = rest.split("/");
    return kind === "repo" ? { kind, owner, repo } : { kind, owner };
  }
  /** Gitea's ActionRunner: busy while it runs a task; "offline" until it polled once. */
  function apiRunner(r) {
    const status = r.task !== undefined ? "active" : r.lastOnline !== undefined ? "idle" : "offline";
    return {
      id: r.id,
      name: r.name,
      status,
      busy: r.task !== undefined,
      disabled: r.disabled === true,
      ephemeral: r.ephemeral,
      labels: r.labels.map((name) => ({ id: 0, name, type: "custom" })),
    };
  }
  function control(g, what, method, text, send) {
    // A workflow run queues jobs: POST [{labels, runMs?, repository?, id?}] (queued webhooks follow).
    if (what === "queue" && method === "POST") return send(200, { jobs: JSON.parse(text).map((j) => queueJob(g, j).id) });
    // The runner named {runner} polls once, as act_runner's FetchTask would (its in_progress webhook follows).
    if (what === "pickup" && method === "POST") return send(200, { job: pickUp(g, JSON.parse(text).runner)?.id ?? null });
    if (what === "max-response-items" && method === "POST") return send(200, { max: (g.maxResponseItems = JSON.parse(text).max) });
    if (what === "fail-lost" && method === "POST") return send(200, { failed: failLostJob(g, JSON.parse(text).id)?.id ?? null });
    if (what === "cancel" && method === "POST") return send(200, { cancelled: cancelJob(g, JSON.parse(text).id)?.id ?? null });
    // Where webhooks go: {url, secret}; without a url they wait in /_control/deliveries.
    if (what === "webhook" && method === "POST") {
      g.actions.webhook = JSON.parse(text);
      return send(200, {});
    }
    if (what === "deliveries" && method === "POST") return send(200, { deliveries: g.actions.outbox.splice(0) });
    if (what === "actions") return send(200, { jobs: g.jobs, taken: g.actions.taken, reruns: g.actions.reruns ?? 0 });
    if (what === "jobs" && method === "POST") {
      g.jobs = JSON.parse(text);
      return send(200, { jobs: g.jobs.length });
    }
    if (what === "fail-delete" && method === "POST") {
      g.failDelete = JSON.parse(text);
      return send(200, { failDelete: g.failDelete });
    }
    if (what === "delay" && method === "POST") {
      const { ms = 0, registerMs = 0 } = JSON.parse(text);
      Object.assign(g, { delayMs: ms, registerDelayMs: registerMs });
      return send(200, { delayMs: g.delayMs, registerDelayMs: g.registerDelayMs });
    }
    if (what === "users" && method === "POST") {
      g.users = new Set(JSON.parse(text).map((u) => u.toLowerCase()));
      return send(200, {});
    }
    if (what === "version" && method === "POST") {
      g.version = JSON.parse(text).version;
      return send(200, { version: g.version });
    }
    if (what === "runners" && method === "POST") {
      for (const r of JSON.parse(text)) g.runners.set(r.id, { uuid: randomUUID(), token: "t", version: "", labels: [], ephemeral: true, ...r });
      return send(200, {});
    }
    if (what === "state") return send(200, { runners: [...g.runners.values()], registrations: g.registrations, requests: g.requests, version: g.version });
    return send(404, { error: "unknown control" });
  }
}
