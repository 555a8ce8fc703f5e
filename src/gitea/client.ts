// Gitea's HTTP surface that the dispatcher uses: the runner Register RPC (Connect JSON, as
// act_runner calls it) and the REST API (`Authorization: token …`), scoped per GITEA_SCOPE.
import { z } from "zod";
import type { GiteaConfig, GiteaScope } from "./config.ts";
import { withTimeout } from "../reconcile/limit.ts";
import { UpstreamError } from "../status-error.ts";

export class GiteaError extends UpstreamError {
  override readonly name: string = "GiteaError";
}

const int64 = z.union([z.number().int(), z.string().regex(/^\d+$/).transform(Number)]);
const registerResponse = z.object({
  runner: z.object({ id: int64, uuid: z.string().min(1), token: z.string().min(1), name: z.string(), labels: z.array(z.string()).optional(), ephemeral: z.boolean().optional() }),
});
export type RegisteredRunner = z.infer<typeof registerResponse>["runner"];

const zeroTime = z.string().optional();
export const apiJobSchema = z.looseObject({
  id: z.number().int(),
  run_id: z.number().int(),
  run_attempt: z.number().int().optional(),
  name: z.string().optional(),
  labels: z.array(z.string()).nullish(),
  status: z.string(),
  url: z.string().optional(),
  html_url: z.string().optional(),
  created_at: zeroTime,
});
export type ApiJob = z.infer<typeof apiJobSchema>;
const jobsPage = z.object({ total_count: z.number().int(), jobs: z.array(apiJobSchema).nullable() });
const apiRunner = z.looseObject({ id: z.number().int(), name: z.string() });
const runnerDetail = z.looseObject({ id: z.number().int(), name: z.string(), busy: z.boolean().optional(), disabled: z.boolean().optional() });
export type RunnerDetail = z.infer<typeof runnerDetail>;
const runnersPage = z.object({ total_count: z.number().int(), runners: z.array(apiRunner).nullable() });

/** Gitea older than 1.25 answers 404 for the jobs and runners lists. */
export class GiteaFeatureMissing extends GiteaError {
  override readonly name = "GiteaFeatureMissing";
}

export function scopePath(scope: GiteaScope): string {
  if (scope.kind === "org") return `/api/v1/orgs/${encodeURIComponent(scope.org)}/actions`;
  if (scope.kind === "repo") return `/api/v1/repos/${encodeURIComponent(scope.owner)}/${encodeURIComponent(scope.repo)}/actions`;
  return "/api/v1/admin/actions";
}

export interface GiteaClient {
  registrationToken(): Promise<string>;
  register(req: { name: string; labels: string[]; version: string }): Promise<RegisteredRunner>;
  listQueuedJobs(page: number, limit: number): Promise<{ total: number; jobs: ApiJob[] }>;
  listRunners(page: number, limit: number): Promise<{ total: number; runners: { id: number; name: string }[] }>;
  /** One job of a repository (Gitea 1.25+: GET /repos/{owner}/{repo}/actions/jobs/{job_id}); null when Gitea has none. */
  getJob(repository: string, id: number): Promise<ApiJob | null>;
  deleteRunner(id: number): Promise<void>;
  /** One runner (busy: it runs a task now); null when Gitea has none. */
  getRunner(id: number): Promise<RunnerDetail | null>;
  /**
   * Stops Gitea handing the runner tasks (PATCH `{disabled: true}`, newer than Gitea 1.25). False
   * when this Gitea cannot (404/405), or has no such runner.
   */
  disableRunner(id: number): Promise<boolean>;
}

/**
 * Where a fetched registration token is kept: by default the client's own (one invocation); the
 * NATS gateway keeps one per Gitea across its passes, so that a pass does not wait for a token
 * fetch before its first registration. A kept token is fetched anew after TOKEN_TTL_MS, and at
 * once when Gitea no longer knows it (an operator reset it).
 */
export interface TokenCache {
  token?: Promise<string>;
  until?: number;
}

export const TOKEN_TTL_MS = 60_000;

export function createGiteaClient(cfg: GiteaConfig, timeoutMs: number, doFetch: typeof fetch = (i, init) => fetch(i, init), tokens: TokenCache = {}): GiteaClient {
  const base = cfg.url;
  const scoped = scopePath(cfg.scope);
  const call = async (what: string, path: string, init: RequestInit, auth = true): Promise<Response> => {
    if (auth && !cfg.apiToken) throw new GiteaError(`${what}: GITEA_API_TOKEN is not set`);
    const headers = { accept: "application/json", ...(auth ? { authorization: `token ${cfg.apiToken}` } : {}), ...(init.headers as Record<string, string>) };
    try {
      return await withTimeout(timeoutMs, (signal) => doFetch(`${base}${path}`, { ...init, headers, signal }));
    } catch (err) {
      throw new GiteaError(`${what}: ${(err as Error).name === "TimeoutError" ? "timed out" : "request failed"}`);
    }
  };
  const json = async <T>(what: string, res: Response, schema: z.ZodType<T>): Promise<T> => {
    const parsed = schema.safeParse(await res.json().catch(() => undefined));
    if (!parsed.success) throw new GiteaError(`${what}: unexpected response body`, res.status);
    return parsed.data;
  };
  const forget = (token: Promise<string>) => {
    if (tokens.token === token) Object.assign(tokens, { token: undefined, until: undefined });
  };
  const fail = async (what: string, res: Response): Promise<never> => {
    await res.body?.cancel();
    throw new GiteaError(`${what}: Gitea answered ${res.status}`, res.status);
  };
  return {
    registrationToken() {
      if (cfg.registrationToken) return Promise.resolve(cfg.registrationToken);
      if (!tokens.token || Date.now() >= (tokens.until ?? 0)) {
        const fetched = (async () => {
          const res = await call("registration token", `${scoped}/runners/registration-token`, { method: "POST" });
          if (!res.ok) return fail("registration token", res);
          return (await json("registration token", res, z.object({ token: z.string().min(1) }))).token;
        })();
        Object.assign(tokens, { token: fetched, until: Date.now() + TOKEN_TTL_MS });
        fetched.catch(() => forget(fetched));
      }
      return tokens.token!;
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
      const kept = this.registrationToken();
      let res = await attempt(await kept);
      // 404: Gitea no longer knows the token (reset since it was fetched). One retry with a new one.
      if (res.status === 404 && !cfg.registrationToken) {
        await res.body?.cancel();
        forget(kept);
        res = await attempt(await this.registrationToken());
      }
      if (!res.ok) return fail("register runner", res);
      return (await json("register runner", res, registerResponse)).runner;
    },
    async listQueuedJobs(page, limit) {
      const res = await call("list queued jobs", `${scoped}/jobs?status=queued&page=${page}&limit=${limit}`, { method: "GET" });
      if (res.status === 404) throw new GiteaFeatureMissing("list queued jobs: Gitea answered 404 (needs Gitea 1.25+)", 404);
      if (!res.ok) return fail("list queued jobs", res);
      const body = await json("list queued jobs", res, jobsPage);
      return { total: body.total_count, jobs: body.jobs ?? [] };
    },
    async listRunners(page, limit) {
      const res = await call("list runners", `${scoped}/runners?page=${page}&limit=${limit}`, { method: "GET" });
      if (res.status === 404) throw new GiteaFeatureMissing("list runners: Gitea answered 404 (needs Gitea 1.25+)", 404);
      if (!res.ok) return fail("list runners", res);
      const body = await json("list runners", res, runnersPage);
      return { total: body.total_count, runners: body.runners ?? [] };
    },
    async getJob(repository, id) {
      const [owner = "", repo = ""] = repository.split("/");
      const res = await call("get job", `/api/v1/repos/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}/actions/jobs/${id}`, { method: "GET" });
      if (res.status === 404) return drain(res, null);
      if (!res.ok) return fail("get job", res);
      return json("get job", res, apiJobSchema);
    },
    async getRunner(id) {
      const res = await call("get runner", `${scoped}/runners/${id}`, { method: "GET" });
      if (res.status === 404) return drain(res, null);
      if (!res.ok) return fail("get runner", res);
      return json("get runner", res, runnerDetail);
    },
    async disableRunner(id) {
      const res = await call("disable runner", `${scoped}/runners/${id}`, { method: "PATCH", headers: { "content-type": "application/json" }, body: JSON.stringify({ disabled: true }) });
      await res.body?.cancel();
      if (res.status === 404 || res.status === 405) return false;
      if (!res.ok) await fail("disable runner", res);
      return true;
    },
    async deleteRunner(id) {
      const res = await call("delete runner", `${scoped}/runners/${id}`, { method: "DELETE" });
      await res.body?.cancel();
      if (res.status !== 204 && res.status !== 200 && res.status !== 404) await fail("delete runner", res);
    },
  };
}

async function drain<T>(res: Response, value: T): Promise<T> {
  await res.body?.cancel();
  return value;
}
