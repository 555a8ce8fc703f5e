// Forgejo 15's REST surface for an autoscaler (forgejo-v15.json, and the handler behaviour the
// swagger does not show: test/fixtures/upstream-schemas/forgejo-v15-webhooks.md §3): the
// waiting and running jobs of a scope, each attempt with its handle, and ephemeral runners
// registered and deleted over REST. `Authorization: token …`, as for Gitea.
import type { Page } from "../pages.ts";
import { z } from "zod";
import { withTimeout } from "../../model/limit.ts";
import { UpstreamError } from "../../model/status-error.ts";

export class ForgejoError extends UpstreamError {
  override readonly name: string = "ForgejoError";
}

/** Where jobs are listed and runners registered: the instance, an organisation, a repository, or the token's user. */
export type ForgejoScope = { kind: "admin" } | { kind: "org"; org: string } | { kind: "repo"; owner: string; repo: string } | { kind: "user" };

const NAME = /^[A-Za-z0-9_.-]{1,100}$/;

/** The REST prefix of a scope; names are checked, so that nothing else reaches the path. */
export function forgejoScopePath(scope: ForgejoScope): string {
  const name = (n: string) => {
    if (!NAME.test(n)) throw new ForgejoError(`not a Forgejo name: ${JSON.stringify(n)}`);
    return encodeURIComponent(n);
  };
  switch (scope.kind) {
    case "admin":
      return "/admin";
    case "org":
      return `/orgs/${name(scope.org)}`;
    case "repo":
      return `/repos/${name(scope.owner)}/${name(scope.repo)}`;
    case "user":
      return "/user";
  }
}

const int64 = z.number().int().nonnegative();
/** ActionRunJob; `handle` is "" for jobs created before the upgrade to 15 (no backfill). */
export const forgejoJobSchema = z.looseObject({
  id: int64,
  attempt: int64.optional(),
  handle: z.string().optional(),
  name: z.string().optional(),
  needs: z.array(z.string()).nullish(),
  owner_id: int64.optional(),
  repo_id: int64.optional(),
  runs_on: z.array(z.string()).nullish(),
  status: z.string(),
  task_id: int64.optional(),
  // Forgejo 16 and later (modules/structs/action.go:15-16 on v16.0/forgejo); 15 lists none.
  run_id: int64.optional(),
});
export type ForgejoJob = z.infer<typeof forgejoJobSchema>;
// "No match gives the body null, not []".
const jobList = z.array(forgejoJobSchema).nullable();
const registered = z.object({ id: int64, uuid: z.string().min(1), token: z.string().min(1) });
export type ForgejoRunner = z.infer<typeof registered>;
const listedRunner = z.looseObject({ id: int64, name: z.string().optional(), ephemeral: z.boolean().optional(), status: z.string().optional() });
export type ListedRunner = z.infer<typeof listedRunner>;
const serverVersion = z.looseObject({ version: z.string() });
const repositoryById = z.looseObject({ id: int64, full_name: z.string() });

export interface ForgejoClient {
  /** Jobs `waiting` or `running` in the scope (one request; Forgejo does not paginate it), newest first. */
  jobs(scope: ForgejoScope): Promise<ForgejoJob[]>;
  /** Registers an ephemeral runner (Forgejo deletes it after its one job); it has no labels until it declares them. */
  registerRunner(scope: ForgejoScope, name: string): Promise<ForgejoRunner>;
  /** Deletes a runner; one Forgejo does not have (404) is gone already. */
  deleteRunner(scope: ForgejoScope, id: number): Promise<void>;
  /** One runner of the scope; null when Forgejo has none (an ephemeral runner is deleted after its job). */
  getRunner(scope: ForgejoScope, id: number): Promise<ListedRunner | null>;
  /** One page of the scope's own runners (a bare array; `page` from 1), and their total (X-Total-Count, shared/runners.go:128-129). */
  listRunners(scope: ForgejoScope, page: number, limit: number): Promise<Page<ListedRunner>>;
  /** The server's version string (`GET /version`), e.g. "15.0.3+gitea-1.22.0". */
  version(): Promise<string>;
  /** A repository's "owner/name" by its id (`GET /repositories/{id}`, repoGetByID); null when Forgejo has none the token sees (404). */
  repositoryName(id: number): Promise<string | null>;
}

export interface ForgejoClientOptions {
  url: string;
  apiToken: string;
  timeoutMs: number;
  fetch?: typeof fetch;
}

export function createForgejoClient(opts: ForgejoClientOptions): ForgejoClient {
  const doFetch = opts.fetch ?? fetch;
  const base = `${opts.url.replace(/\/+$/, "")}/api/v1`;
  const call = (method: string, path: string, body?: unknown): Promise<Response> =>
    withTimeout(opts.timeoutMs, (signal) =>
      doFetch(`${base}${path}`, {
        method,
        headers: { authorization: `token ${opts.apiToken}`, accept: "application/json", ...(body !== undefined ? { "content-type": "application/json" } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal,
      }),
    ).catch((err: unknown) => {
      throw new ForgejoError(`Forgejo did not answer ${method} ${path}: ${(err as Error).name}`);
    });
  const refuse = async (res: Response, what: string): Promise<never> => {
    await res.body?.cancel();
    const why =
      res.status === 401
        ? " (GITEA_API_TOKEN is not accepted)"
        : res.status === 403 || res.status === 404
          ? " (the token may lack the scope's rights, or Actions is off there)"
          : "";
    throw new ForgejoError(`Forgejo answered ${res.status} to ${what}${why}`, res.status);
  };
  const json = async <T>(res: Response, schema: z.ZodType<T>, what: string): Promise<T> => {
    const parsed = schema.safeParse(await res.json().catch(() => undefined));
    if (!parsed.success)
      throw new ForgejoError(
        `Forgejo's answer to ${what} is not what Forgejo 15 sends: ${parsed.error.issues.map((i) => `${i.path.join(".") || "body"} ${i.message}`).join("; ")}`,
      );
    return parsed.data;
  };
  return {
    async jobs(scope) {
      const what = `GET ${forgejoScopePath(scope)}/actions/runners/jobs`;
      const res = await call("GET", `${forgejoScopePath(scope)}/actions/runners/jobs`);
      if (!res.ok) return refuse(res, what);
      return (await json(res, jobList, what)) ?? [];
    },
    async registerRunner(scope, name) {
      const path = `${forgejoScopePath(scope)}/actions/runners`;
      const res = await call("POST", path, { name, ephemeral: true });
      if (res.status !== 201) return refuse(res, `POST ${path}`);
      return json(res, registered, `POST ${path}`);
    },
    async deleteRunner(scope, id) {
      const path = `${forgejoScopePath(scope)}/actions/runners/${id}`;
      const res = await call("DELETE", path);
      if (res.status === 204 || res.status === 404 || res.ok) return void (await res.body?.cancel());
      return refuse(res, `DELETE ${path}`);
    },
    async getRunner(scope, id) {
      const path = `${forgejoScopePath(scope)}/actions/runners/${id}`;
      const res = await call("GET", path);
      if (res.status === 404) {
        await res.body?.cancel();
        return null;
      }
      if (!res.ok) return refuse(res, `GET ${path}`);
      return json(res, listedRunner, `GET ${path}`);
    },
    async listRunners(scope, page, limit) {
      const path = `${forgejoScopePath(scope)}/actions/runners`;
      const res = await call("GET", `${path}?page=${page}&limit=${limit}`);
      if (!res.ok) return refuse(res, `GET ${path}`);
      const total = Number(res.headers.get("x-total-count") ?? NaN);
      return { items: await json(res, z.array(listedRunner), `GET ${path}`), ...(Number.isSafeInteger(total) && total >= 0 ? { total } : {}) };
    },
    async repositoryName(id) {
      const path = `/repositories/${id}`;
      const res = await call("GET", path);
      if (res.status === 404) {
        await res.body?.cancel();
        return null;
      }
      if (!res.ok) return refuse(res, `GET ${path}`);
      return (await json(res, repositoryById, `GET ${path}`)).full_name;
    },
    async version() {
      const res = await call("GET", "/version");
      if (!res.ok) return refuse(res, "GET /version");
      return (await json(res, serverVersion, "GET /version")).version;
    },
  };
}
