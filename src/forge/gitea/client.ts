// Gitea's HTTP surface that the dispatcher uses: the runner Register RPC (Connect JSON, as
// act_runner calls it) and the REST API (`Authorization: token …`), scoped per GITEA_SCOPE.
import { z } from "zod";
import type { GiteaConfig } from "./config.ts";
import { parseScope, scopeKey, scopePath, type GiteaScope, type RegistrationScope } from "./scope.ts";
import { withTimeout } from "../../model/limit.ts";
import { UpstreamError } from "../../model/status-error.ts";
import type { Page } from "../pages.ts";

export class GiteaError extends UpstreamError {
  override readonly name: string = "GiteaError";
}

const int64 = z.union([z.number().int(), z.string().regex(/^\d+$/).transform(Number)]);
const registerResponse = z.object({
  runner: z.object({
    id: int64,
    uuid: z.string().min(1),
    token: z.string().min(1),
    name: z.string(),
    labels: z.array(z.string()).optional(),
    ephemeral: z.boolean().optional(),
  }),
});
export type RegisteredRunner = z.infer<typeof registerResponse>["runner"];

const zeroTime = z.string().optional();
export const apiJobSchema = z.looseObject({
  id: z.number().int(),
  run_id: z.number().int(),
  // 0 on a job no runner took yet on Gitea 1.24–1.26 (versions.ts).
  run_attempt: z.number().int().nonnegative().optional(),
  name: z.string().optional(),
  labels: z.array(z.string()).nullish(),
  status: z.string(),
  // Once completed: success, failure, cancelled or skipped (services/convert/convert.go ToActionsStatus).
  conclusion: z.string().nullish(),
  runner_id: z.number().int().nullish(),
  started_at: zeroTime,
  url: z.string().optional(),
  html_url: z.string().optional(),
  created_at: zeroTime,
});
export type ApiJob = z.infer<typeof apiJobSchema>;
export type RerunAnswer = { asked: ApiJob } | { refused: number };
const apiRun = z.looseObject({
  id: z.number().int(),
  status: z.string(),
  // Cancelled as soon as any job of the run is (models/actions/run_job.go AggregateJobStatus), completed or not.
  conclusion: z.string().nullish(),
  run_attempt: z.number().int().optional(),
  html_url: z.string().optional(),
});
export type ApiRun = z.infer<typeof apiRun>;
const jobsPage = z.object({ total_count: z.number().int(), jobs: z.array(apiJobSchema).nullable() });
const apiRunner = z.looseObject({ id: z.number().int(), name: z.string() });
const runnerDetail = z.looseObject({ id: z.number().int(), name: z.string(), busy: z.boolean().optional(), disabled: z.boolean().optional() });
export type RunnerDetail = z.infer<typeof runnerDetail>;
const runnersPage = z.object({ total_count: z.number().int(), runners: z.array(apiRunner).nullable() });

/** Gitea older than 1.25 answers 404 for the jobs and runners lists. */
export class GiteaFeatureMissing extends GiteaError {
  override readonly name = "GiteaFeatureMissing";
}

/** A runner and the scope it was registered at (a scope key; absent: GITEA_SCOPE). */
export interface RunnerAt {
  id: number;
  scope?: string | undefined;
}

export interface GiteaClient {
  /**
   * A registration token for `scope` (default GITEA_SCOPE) and the scope it registers at: an
   * owner's is its organisation's, or, when Gitea has no such organisation, its user's.
   */
  registrationToken(scope?: RegistrationScope): Promise<{ token: string; scope: GiteaScope }>;
  register(req: { name: string; labels: string[]; version: string; scope?: RegistrationScope | undefined }): Promise<RegisteredRunner & { scope: GiteaScope }>;
  /** One page of queued jobs and Gitea's `total_count` (forge/pages.ts reads them all). */
  listQueuedJobs(page: number, limit: number): Promise<Page<ApiJob>>;
  /** Runners of `scope` (scope key; default GITEA_SCOPE). */
  listRunners(page: number, limit: number, scope?: string): Promise<Page<{ id: number; name: string }>>;
  /** One job of a repository (Gitea 1.25+: GET /repos/{owner}/{repo}/actions/jobs/{job_id}); null when Gitea has none. */
  getJob(repository: string, id: number): Promise<ApiJob | null>;
  deleteRunner(runner: RunnerAt): Promise<void>;
  /** A workflow run (GET /repos/{owner}/{repo}/actions/runs/{run}); null when Gitea has none. */
  getRun(repository: string, run: number): Promise<ApiRun | null>;
  /**
   * Asks Gitea to run job `job` of run `run` again (POST …/actions/runs/{run}/jobs/{job_id}/rerun,
   * Gitea 1.26 and later): the job it queued (201: 1.26 the same row, 1.27 its copy in a new
   * attempt), or the status of a refusal (400 not done or past MAX_RERUN_ATTEMPTS, 404 no such
   * job in the latest attempt, 405 no such endpoint, 409 another rerun made the attempt first).
   */
  rerunJob(repository: string, run: number, job: number): Promise<RerunAnswer>;
  /** One runner (busy: it runs a task now); null when Gitea has none. */
  getRunner(runner: RunnerAt): Promise<RunnerDetail | null>;
  /**
   * Stops Gitea handing the runner tasks (PATCH `{disabled: true}`, newer than Gitea 1.25). False
   * when this Gitea cannot (404/405), or has no such runner.
   */
  disableRunner(runner: RunnerAt): Promise<boolean>;
  /** The version Gitea reports (GET /api/v1/version, public on every release). */
  version(): Promise<string>;
  /**
   * The jobs of a run's latest attempt (GET …/actions/runs/{run}/jobs; on 1.27 the latest attempt's
   * only, routers/api/v1/repo/action.go ListWorkflowRunJobs at 82edc3da), every page; null when Gitea has no such run.
   */
  listRunJobs(repository: string, run: number): Promise<ApiJob[] | null>;
}

/**
 * Where fetched registration tokens are kept, by scope key: by default the client's own (one
 * invocation); the NATS gateway keeps one map per Gitea across its passes, so that a pass does
 * not wait for a token fetch before its first registration. A kept token is fetched anew after
 * TOKEN_TTL_MS, and at once when Gitea no longer knows it (an operator reset it).
 */
export type TokenCache = Map<string, { token: Promise<{ token: string; scope: GiteaScope }>; until: number }>;

export const TOKEN_TTL_MS = 60_000;

export function createGiteaClient(
  cfg: GiteaConfig,
  timeoutMs: number,
  doFetch: typeof fetch = (i, init) => fetch(i, init),
  tokens: TokenCache = new Map(),
): GiteaClient {
  const base = cfg.url;
  const call = async (what: string, path: string, init: RequestInit, auth = true, sudo?: string): Promise<Response> => {
    if (auth && !cfg.apiToken) throw new GiteaError(`${what}: GITEA_API_TOKEN is not set`);
    const headers = {
      accept: "application/json",
      ...(auth ? { authorization: `token ${cfg.apiToken}` } : {}),
      ...(sudo ? { sudo } : {}),
      ...(init.headers as Record<string, string>),
    };
    try {
      return await withTimeout(timeoutMs, (signal) => doFetch(`${base}${path}`, { ...init, headers, signal }));
    } catch (err) {
      throw new GiteaError(`${what}: ${(err as Error).name === "TimeoutError" ? "timed out" : "request failed"}`);
    }
  };
  /** A call about the runners of `scope` (a scope key; default GITEA_SCOPE): `tail` under its path. */
  const scoped = (what: string, scope: GiteaScope | string | undefined, tail: string, init: RequestInit) => {
    const at = scopePath(typeof scope === "string" ? parseScope(scope) : (scope ?? cfg.scope));
    return call(what, `${at.path}/${tail}`, init, true, at.sudo);
  };
  const json = async <T>(what: string, res: Response, schema: z.ZodType<T>): Promise<T> => {
    const parsed = schema.safeParse(await res.json().catch(() => undefined));
    if (!parsed.success) throw new GiteaError(`${what}: unexpected response body`, res.status);
    return parsed.data;
  };
  const forget = (key: string, token: Promise<unknown>) => {
    if (tokens.get(key)?.token === token) tokens.delete(key);
  };
  const fail = async (what: string, res: Response): Promise<never> => {
    await res.body?.cancel();
    throw new GiteaError(`${what}: Gitea answered ${res.status}`, res.status);
  };
  const tokenAt = async (scope: GiteaScope): Promise<Response> => scoped("registration token", scope, "runners/registration-token", { method: "POST" });
  const tokenOf = async (res: Response) => (await json("registration token", res, z.object({ token: z.string().min(1) }))).token;
  /** An owner's token: its organisation's; 404 (no such organisation) means a user, whose own is asked for as that user. */
  const resolveToken = async (scope: RegistrationScope): Promise<{ token: string; scope: GiteaScope }> => {
    let at: GiteaScope = scope.kind === "owner" ? { kind: "org", org: scope.owner } : scope;
    let res = await tokenAt(at);
    if (res.status === 404 && scope.kind === "owner") {
      await res.body?.cancel();
      at = { kind: "user", user: scope.owner };
      res = await tokenAt(at);
    }
    if (!res.ok) return fail("registration token", res);
    return { token: await tokenOf(res), scope: at };
  };
  return {
    registrationToken(scope = cfg.scope) {
      if (cfg.registrationToken && scopeKey(scope) === scopeKey(cfg.scope)) return Promise.resolve({ token: cfg.registrationToken, scope: cfg.scope });
      const key = scopeKey(scope);
      const kept = tokens.get(key);
      if (kept && Date.now() < kept.until) return kept.token;
      const fetched = resolveToken(scope);
      tokens.set(key, { token: fetched, until: Date.now() + TOKEN_TTL_MS });
      fetched.catch(() => forget(key, fetched));
      return fetched;
    },
    async register(req) {
      const attempt = async (token: string) =>
        call(
          "register runner",
          "/api/actions/runner.v1.RunnerService/Register",
          {
            method: "POST",
            headers: { "content-type": "application/json", "connect-protocol-version": "1" },
            body: JSON.stringify({ name: req.name, token, version: req.version, labels: req.labels, ephemeral: true }),
          },
          false,
        );
      const key = scopeKey(req.scope ?? cfg.scope);
      const kept = this.registrationToken(req.scope);
      let { token, scope } = await kept;
      let res = await attempt(token);
      // 404: Gitea no longer knows the token (reset since it was fetched). One retry with a new one.
      if (res.status === 404 && token !== cfg.registrationToken) {
        await res.body?.cancel();
        forget(key, kept);
        ({ token, scope } = await this.registrationToken(req.scope));
        res = await attempt(token);
      }
      if (!res.ok) return fail("register runner", res);
      return { ...(await json("register runner", res, registerResponse)).runner, scope };
    },
    async listQueuedJobs(page, limit) {
      const res = await scoped("list queued jobs", undefined, `jobs?status=queued&page=${page}&limit=${limit}`, { method: "GET" });
      if (res.status === 404) throw new GiteaFeatureMissing("list queued jobs: Gitea answered 404 (needs Gitea 1.25+)", 404);
      if (!res.ok) return fail("list queued jobs", res);
      const body = await json("list queued jobs", res, jobsPage);
      return { total: body.total_count, items: body.jobs ?? [] };
    },
    async listRunners(page, limit, scope) {
      const res = await scoped("list runners", scope, `runners?page=${page}&limit=${limit}`, { method: "GET" });
      if (res.status === 404) throw new GiteaFeatureMissing("list runners: Gitea answered 404 (needs Gitea 1.25+)", 404);
      if (!res.ok) return fail("list runners", res);
      const body = await json("list runners", res, runnersPage);
      return { total: body.total_count, items: body.runners ?? [] };
    },
    async getJob(repository, id) {
      const [owner = "", repo = ""] = repository.split("/");
      const res = await call("get job", `/api/v1/repos/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}/actions/jobs/${id}`, { method: "GET" });
      if (res.status === 404) return drain(res, null);
      if (!res.ok) return fail("get job", res);
      return json("get job", res, apiJobSchema);
    },
    async getRun(repository, run) {
      const res = await call("get run", `${repoPath(repository)}/actions/runs/${run}`, { method: "GET" });
      if (res.status === 404) return drain(res, null);
      if (!res.ok) return fail("get run", res);
      return json("get run", res, apiRun);
    },
    async rerunJob(repository, run, job) {
      const res = await call("rerun job", `${repoPath(repository)}/actions/runs/${run}/jobs/${job}/rerun`, { method: "POST" });
      if (res.status >= 400 && res.status < 500) return drain(res, { refused: res.status });
      if (!res.ok) return fail("rerun job", res);
      return { asked: await json("rerun job", res, apiJobSchema) };
    },
    async version() {
      const res = await call("version", "/api/v1/version", { method: "GET" }, cfg.apiToken !== undefined);
      if (!res.ok) return fail("version", res);
      return (await json("version", res, z.object({ version: z.string().max(100) }))).version;
    },
    async listRunJobs(repository, run) {
      const jobs: ApiJob[] = [];
      // Read until Gitea says it is done: a page may be shorter than asked ([api].MAX_RESPONSE_ITEMS).
      for (let page = 1; page <= RUN_JOB_PAGES; page++) {
        const res = await call("list run jobs", `${repoPath(repository)}/actions/runs/${run}/jobs?page=${page}&limit=50`, { method: "GET" });
        if (res.status === 404) return drain(res, null);
        if (!res.ok) return fail("list run jobs", res);
        const body = await json("list run jobs", res, jobsPage);
        jobs.push(...(body.jobs ?? []));
        if (!body.jobs?.length || jobs.length >= body.total_count) return jobs;
      }
      return jobs;
    },
    async getRunner({ id, scope }) {
      const res = await scoped("get runner", scope, `runners/${id}`, { method: "GET" });
      if (res.status === 404) return drain(res, null);
      if (!res.ok) return fail("get runner", res);
      return json("get runner", res, runnerDetail);
    },
    async disableRunner({ id, scope }) {
      const res = await scoped("disable runner", scope, `runners/${id}`, {
        method: "PATCH",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ disabled: true }),
      });
      await res.body?.cancel();
      if (res.status === 404 || res.status === 405) return false;
      if (!res.ok) await fail("disable runner", res);
      return true;
    },
    async deleteRunner({ id, scope }) {
      const res = await scoped("delete runner", scope, `runners/${id}`, { method: "DELETE" });
      await res.body?.cancel();
      if (res.status !== 204 && res.status !== 200 && res.status !== 404) await fail("delete runner", res);
    },
  };
}

/** A run has at most 256 jobs (a workflow's matrix limit); pages of 50, with room for a smaller page size. */
const RUN_JOB_PAGES = 30;

/** The API path of repository "owner/name". */
function repoPath(repository: string): string {
  const [owner = "", repo = ""] = repository.split("/");
  return `/api/v1/repos/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}`;
}

async function drain<T>(res: Response, value: T): Promise<T> {
  await res.body?.cancel();
  return value;
}
